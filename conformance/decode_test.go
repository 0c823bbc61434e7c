package conformance

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIntegerExact(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775806", math.MaxInt64 - 1},
		{"-9223372036854775808", math.MinInt64},
		{"0", 0},
		{"-51", -51},
	}
	for _, tt := range tests {
		var n integer
		if err := json.Unmarshal([]byte(tt.in), &n); err != nil || int64(n) != tt.want {
			t.Errorf("decode %s = %d, %v, want %d", tt.in, n, err, tt.want)
		}
	}
}

func TestIntegerRejects(t *testing.T) {
	for _, in := range []string{"9223372036854775808", "1.0", "1e3", `"5"`, "true", "[]"} {
		var n integer
		if err := json.Unmarshal([]byte(in), &n); err == nil {
			t.Errorf("decode %s = %d, want an error", in, n)
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{`"1m"`, time.Minute},
		{`"250ns"`, 250},
		{`"-1ns"`, -1},
		{`"1h30m"`, 90 * time.Minute},
		{"60000000000", time.Minute},
		{"9223372036854775807", math.MaxInt64},
	}
	for _, tt := range tests {
		var d duration
		if err := json.Unmarshal([]byte(tt.in), &d); err != nil || time.Duration(d) != tt.want {
			t.Errorf("decode %s = %v, %v, want %v", tt.in, time.Duration(d), err, tt.want)
		}
	}
	for _, in := range []string{`"1x"`, `"10"`, "1.5", `""`, "true"} {
		var d duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("decode %s = %v, want an error", in, time.Duration(d))
		}
	}
}

func TestDescribeSyntaxError(t *testing.T) {
	f := decodeFile("x.json", []byte("{\n  \"suite\": \"s\",\n  \"cases\": [,]\n}"))
	if f.err == nil {
		t.Fatal("decodeFile of bad JSON: no error")
	}
	if want := "line 3, column 13"; !strings.Contains(f.err.Msg, want) {
		t.Errorf("decodeFile of bad JSON: error %q, want it to contain %q", f.err.Msg, want)
	}
}

// FuzzDecodeFile checks that no input makes the decoder or a run panic, and
// that every case comes out failed, skipped or runnable.
func FuzzDecodeFile(f *testing.F) {
	paths, _ := filepath.Glob("vectors/*.json")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"cases":[{"name":"x","bucket":{"limits":[{"capacity":1,"refill":{"kind":"greedy","tokens":1,"period":1}}]},"steps":[{"op":"available","want":1}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := decodeFile("fuzz.json", data)
		if file.err != nil {
			return
		}
		for _, c := range file.cases {
			r := c.run(t.Context(), Local{})
			if r.Status == Failed && r.Failure == nil {
				t.Errorf("case %q failed without a failure", c.name)
			}
		}
	})
}
