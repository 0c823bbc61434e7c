package simulate

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadReplay: the two readers, a file of lines and a CSV file, on
// their edge cases: headers named, numbered or guessed, keys by field or
// column, access log lines only in a file of lines.
func TestReadReplay(t *testing.T) {
	const clf = `127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1"`
	for _, tt := range []struct {
		name, body, column, key string
		times                   []int64
		names                   []string // nil: no keys
		keys                    []uint32
	}{
		{name: "lines", body: "# c\n\n2s\n1s\n", times: []int64{0, 1e9}},
		{name: "unix and RFC 3339", body: "1700000000.25\n1700000000\n2023-11-14T22:13:20Z\n", times: []int64{0, 0, 250e6}},
		{name: "access log spread over its second", body: clf + "\n1s\n" + clf + "\n", times: []int64{0, 971211335e9, 971211335e9 + 5e8}},
		{name: "csv numbered with a header", body: "a,b\n1s,x\n2s,y\n", column: "1", key: "2",
			times: []int64{0, 1e9}, names: []string{"x", "y"}, keys: []uint32{0, 1}},
		{name: "csv named", body: "a,b\n1s,x\n2s,y\n", column: "a", key: "b",
			times: []int64{0, 1e9}, names: []string{"x", "y"}, keys: []uint32{0, 1}},
		{name: "csv named column numbered key", body: "a,b\n1s,x\n2s,y\n", column: "a", key: "2",
			times: []int64{0, 1e9}, names: []string{"x", "y"}, keys: []uint32{0, 1}},
		{name: "csv numbered column named key", body: "a,b\n1s,x\n2s,x\n", column: "1", key: "b",
			times: []int64{0, 1e9}, names: []string{"x"}, keys: []uint32{0, 0}},
		{name: "csv without a header", body: "1s,x\n2s,y\n", column: "+1", times: []int64{0, 1e9}},
		{name: "csv of only a header", body: "time\n", column: "1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rp, err := readReplay(strings.NewReader(tt.body), tt.column, tt.key)
			if err != nil {
				t.Fatalf("readReplay: %v", err)
			}
			if !slices.Equal(rp.times, tt.times) || !slices.Equal(rp.names, tt.names) || !slices.Equal(rp.keys, tt.keys) {
				t.Errorf("readReplay = %v %q %v, want %v %q %v", rp.times, rp.names, rp.keys, tt.times, tt.names, tt.keys)
			}
			if (rp.keys == nil) != (tt.names == nil) {
				t.Errorf("readReplay keys = %#v, want nil only when the file names no keys", rp.keys)
			}
		})
	}
}

func TestReadReplayErrors(t *testing.T) {
	for _, tt := range []struct{ body, column, key, want string }{
		{"1s\nnope\n", "", "", `line 2: "nope" is not an RFC 3339 time, Unix seconds, an offset such as 1.5s, or an access log line`},
		{"1 a b\n2 c\n", "", "3", "line 2: no field 3 for the key in a line of 2 fields"},
		{"a,b\n1s,x\nzz,y\n", "a", "", `line 3: "zz" is not an RFC 3339 time, Unix seconds or an offset such as 1.5s`},
		{"a,1s\nb," + `127.0.0.1 - - [10/Oct/2000:13:55:36 -0700]` + "\n", "2", "", `line 2: "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700]" is not an RFC 3339 time, Unix seconds or an offset such as 1.5s`}, // no access log in a CSV file
		{"1s,x\n2s,y\n", "3", "", "line 1: no column 3 in a record of 2 fields"},
		{"1s,x\n2s,y\n", "0", "", "line 1: no column 0 in a record of 2 fields"},
		{"1s,x\n2s,y\n", "1", "0", "line 1: no column 0 for the key in a record of 2 fields"},
		{"a,b\n1s,x\n2s\n", "1", "b", "line 3: no column b for the key in a record of 1 fields"},
		{"a,b\n1s,x\n", "c", "", `line 1: the header has no column "c": ["a" "b"]`},
		{"a,b\n1s,x\n", "a", "c", `line 1: the header has no column "c": ["a" "b"]`},
		{"\"a,b\n", "1", "", "extraneous or missing \" in quoted-field"},
	} {
		rp, err := readReplay(strings.NewReader(tt.body), tt.column, tt.key)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("readReplay(%q, column %q, key %q) = %v, %v; want an error containing %q", tt.body, tt.column, tt.key, rp, err, tt.want)
		}
	}
}

// TestKeys: a replayed file with key K gives each request its key, kept
// with its time through the sort; clauses without keys get "".
func TestKeys(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want []string // "time key", in order
	}{
		{"replay testdata/nginx.log key 1", []string{
			"0s 203.0.113.7", "333.333333ms 203.0.113.7", "666.666666ms 203.0.113.7",
			"1s 198.51.100.2", "3s 203.0.113.9", "3.5s 203.0.113.9"}},
		{"replay testdata/access.csv column time key ip", []string{
			"0s 10.0.0.1", "250ms 10.0.0.2", "500ms 10.0.0.1", "1s 10.0.0.3", "1.000000001s 10.0.0.3", "3.75s 10.0.0.1"}},
		{"replay testdata/access.csv key 1 column 2", []string{
			"0s 10.0.0.1", "250ms 10.0.0.2", "500ms 10.0.0.1", "1s 10.0.0.3", "1.000000001s 10.0.0.3", "3.75s 10.0.0.1"}},
		{"burst 2 at 300ms; replay testdata/access.csv column time key ip", []string{
			"0s 10.0.0.1", "250ms 10.0.0.2", "300ms ", "300ms ", "500ms 10.0.0.1", "1s 10.0.0.3", "1.000000001s 10.0.0.3", "3.75s 10.0.0.1"}},
	} {
		tr, err := ParseTraffic(tt.spec)
		if err != nil {
			t.Fatalf("ParseTraffic(%q): %v", tt.spec, err)
		}
		rq, err := tr.Requests(time.Hour)
		if err != nil {
			t.Fatalf("Requests(%q): %v", tt.spec, err)
		}
		var got []string
		for i, at := range rq.Times {
			got = append(got, time.Duration(at).String()+" "+rq.Names[rq.Keys[i]])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q:\n got %q\nwant %q", tt.spec, got, tt.want)
		}
	}
	tr, _ := ParseTraffic("steady 2/s")
	if rq, _ := tr.Requests(time.Second); rq.Keys != nil || len(rq.Times) != 2 {
		t.Errorf("Requests without keys = %+v, want 2 times and nil keys", rq)
	}
}

func TestKeyErrors(t *testing.T) {
	for _, tt := range []struct{ spec, want string }{
		{"replay testdata/nginx.log key ip", `key of a file of lines must be a field number from 1, got "ip"`},
		{"replay testdata/nginx.log key 0", "field number from 1"},
		{"replay testdata/nginx.log key 40", "line 1: no field 40 for the key in a line of 12 fields"},
		{"replay testdata/access.csv column time key host", `the header has no column "host"`},
		{"replay testdata/access.csv column 2 key 7", "line 2: no column 7 for the key"}, // line 1 is the header
		{"replay testdata/nginx.log key", "want: replay FILE [column C] [key K]"},
		{"replay testdata/nginx.log key 1 key 2", "want: replay FILE [column C] [key K]"},
	} {
		_, err := ParseTraffic(tt.spec)
		if !errors.As(err, new(*SpecError)) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseTraffic(%q) = %v, want a *SpecError containing %q", tt.spec, err, tt.want)
		}
	}
}
