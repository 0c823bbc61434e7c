package envoyrls

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// known are the limiters of the limiters: section the testdata assumes.
func known(name string) bool {
	return slices.Contains([]string{"per_ip", "login", "per_path", "per_tenant"}, name)
}

// section parses data and returns its envoy: node.
func section(t testing.TB, data []byte) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode || len(top.Content) != 2 || top.Content[0].Value != "envoy" {
		t.Fatalf("testdata must be one mapping with the key envoy")
	}
	return top.Content[1]
}

var header = regexp.MustCompile(`^# want: (.*) @ line ([0-9]+)\n# path: (.*)\n`)

// TestDecodeBad decodes every testdata/*.bad.yaml, one per rule, and checks
// the *yamlnode.Error its first two lines announce: a substring of the
// message, the line, and the path.
func TestDecodeBad(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.bad.yaml: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".bad.yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := header.FindSubmatch(data)
			if m == nil {
				t.Fatalf("header is not %q", "# want: <substring> @ line N\\n# path: <path>")
			}
			line, _ := strconv.Atoi(string(m[2]))
			d, err := Decode("envoy", section(t, data), known)
			if err == nil {
				t.Fatalf("Decode = %v, nil; want error %q", d, m[1])
			}
			var e *yamlnode.Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode error %T (%v) is not a *yamlnode.Error", err, err)
			}
			if !strings.Contains(err.Error(), string(m[1])) {
				t.Errorf("Decode error = %q, want it to contain %q", err, m[1])
			}
			if e.Line != line {
				t.Errorf("Decode error line = %d, want %d (%v)", e.Line, line, err)
			}
			if e.Path != string(m[3]) {
				t.Errorf("Decode error path = %q, want %q", e.Path, m[3])
			}
		})
	}
}

func TestDecodeNil(t *testing.T) {
	_, err := Decode("envoy", nil, known)
	var e *yamlnode.Error
	if !errors.As(err, &e) || e.Path != "envoy" {
		t.Errorf("Decode(nil) error = %v, want a *yamlnode.Error at envoy", err)
	}
}

func TestDecodeAliases(t *testing.T) {
	data := []byte(`envoy:
  - domain: a
    descriptors: &d
      - {key: remote_address, limiter: per_ip}
  - domain: b
    descriptors: *d
`)
	d, err := Decode("envoy", section(t, data), known)
	if err != nil {
		t.Fatal(err)
	}
	for _, domain := range []string{"a", "b"} {
		if n := d.match(domain, []entryRef{{"remote_address", "1.2.3.4"}}); n == nil || n.limiter != "per_ip" {
			t.Errorf("match(%s, remote_address) = %+v, want per_ip", domain, n)
		}
	}
}

// TestMatch matches descriptors against testdata/edge.good.yaml.
func TestMatch(t *testing.T) {
	data, err := os.ReadFile("testdata/edge.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode("envoy", section(t, data), known)
	if err != nil {
		t.Fatal(err)
	}
	const none, unlimited = "-", "unlimited"
	tests := []struct {
		name    string
		domain  string
		entries []entryRef
		want    string // limiter, none or unlimited
		shadow  bool
	}{
		{"wildcard key", "edge", []entryRef{{"remote_address", "1.2.3.4"}}, "per_ip", false},
		{"exact value first", "edge", []entryRef{{"path", "/login"}}, "login", false},
		{"prefix before wildcard", "edge", []entryRef{{"path", "/api/v1/users"}}, "per_ip", false},
		{"prefix is not a suffix", "edge", []entryRef{{"path", "/v1/api/"}}, "per_path", false},
		{"wildcard after exact and prefix", "edge", []entryRef{{"path", "/logout"}}, "per_path", false},
		{"value is case sensitive", "edge", []entryRef{{"path", "/LOGIN"}}, "per_path", false},
		{"nested", "edge", []entryRef{{"path", "/login"}, {"user", "bob"}}, "envoy:edge|path=/login|user", false},
		{"deeper than the config", "edge", []entryRef{{"path", "/login"}, {"user", "bob"}, {"x", "y"}}, none, false},
		{"nested key mismatch", "edge", []entryRef{{"path", "/login"}, {"client", "bob"}}, none, false},
		{"no nesting under wildcard", "edge", []entryRef{{"path", "/x"}, {"user", "bob"}}, none, false},
		{"unlimited", "edge", []entryRef{{"generic_key", "health"}}, unlimited, false},
		{"unlimited in rate_limit", "edge", []entryRef{{"generic_key", "legacy"}}, unlimited, false},
		{"exact value only", "edge", []entryRef{{"generic_key", "other"}}, none, false},
		{"shadow", "edge", []entryRef{{"tenant", "acme"}}, "per_tenant", true},
		{"node without a limit", "edge", []entryRef{{"authenticated", "true"}}, none, false},
		{"under a node without a limit", "edge", []entryRef{{"authenticated", "true"}, {"client_id", "c1"}}, "envoy:edge|authenticated=true|client_id", false},
		{"other domain", "internal", []entryRef{{"remote_address", "1.2.3.4"}}, "per_ip", false},
		{"other domain's descriptors", "internal", []entryRef{{"path", "/login"}}, none, false},
		{"unknown domain", "nope", []entryRef{{"remote_address", "1.2.3.4"}}, none, false},
		{"unknown key", "edge", []entryRef{{"nope", "x"}}, none, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, shadow := none, false
			if n := d.match(tt.domain, tt.entries); n != nil {
				got, shadow = n.limiter, n.shadow
				if n.unlimited {
					got = unlimited
				}
				if got == "" {
					got = none
				}
			}
			if got != tt.want || shadow != tt.shadow {
				t.Errorf("match(%s, %v) = %s (shadow %v), want %s (shadow %v)", tt.domain, tt.entries, got, shadow, tt.want, tt.shadow)
			}
		})
	}

	inline := d.Inline()
	want := map[string]string{
		"envoy:edge|path=/login|user":             sluice.AlignedFixedWindow(5, time.Minute).String(),
		"envoy:edge|authenticated=true|client_id": sluice.AlignedFixedWindow(1000, time.Hour).String(),
	}
	if len(inline) != len(want) {
		t.Errorf("Inline() has %d limiters, want %d: %v", len(inline), len(want), inline)
	}
	for name, p := range want {
		if got := inline[name]; got == nil || got.String() != p {
			t.Errorf("Inline()[%q] = %v, want %s", name, got, p)
		}
	}
	if (*Domains)(nil).Inline() != nil || (*Domains)(nil).match("edge", []entryRef{{"a", "b"}}) != nil {
		t.Error("a nil *Domains has limits")
	}
}

// TestInlineNamesEscaped: separators inside keys and values do not make two
// places share an inline limiter.
func TestInlineNamesEscaped(t *testing.T) {
	data := []byte(`envoy:
  - domain: d
    descriptors:
      - key: a
        value: b|c=d
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: a
        value: b
        descriptors:
          - key: c
            value: d
            rate_limit: {unit: second, requests_per_unit: 2}
`)
	d, err := Decode("envoy", section(t, data), known)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range d.Inline() {
			if !yield(k) {
				return
			}
		}
	})
	want := []string{"envoy:d|a=b%7Cc%3Dd", "envoy:d|a=b|c=d"}
	if !slices.Equal(got, want) {
		t.Errorf("Inline() names = %q, want %q", got, want)
	}
}

func TestUnitOf(t *testing.T) {
	tests := []struct {
		p    sluice.Policy
		want unit
	}{
		{sluice.FixedWindow(10, time.Minute), unit{2, 1}},
		{sluice.FixedWindow(10, 15*time.Minute), unit{2, 15}},
		{sluice.AlignedFixedWindow(10, time.Minute), unit{2, 1}},
		{sluice.FixedWindow(10, 90*time.Second), unit{1, 90}},
		{sluice.FixedWindow(10, 2*time.Hour), unit{3, 2}},
		{sluice.FixedWindow(10, 48*time.Hour), unit{4, 2}},
		{sluice.FixedWindow(10, 14*24*time.Hour), unit{7, 2}},
		{sluice.FixedWindow(10, 1500*time.Millisecond), unit{}},
		{sluice.SlidingWindow(10, time.Hour), unit{3, 1}},
		{sluice.SlidingLog(10, time.Second), unit{1, 1}},
		{sluice.TokenBucket(10, 1, time.Second), unit{}},
		{sluice.GCRA(10, 1, time.Second), unit{}},
		{sluice.NoLimit(), unit{}},
		{sluice.Compound(sluice.FixedWindow(10, time.Minute)), unit{}},
	}
	for _, tt := range tests {
		if got := unitOf(tt.p); got != tt.want {
			t.Errorf("unitOf(%v) = %+v, want %+v", tt.p, got, tt.want)
		}
	}
}

// FuzzDecode: any document decodes or fails with a *yamlnode.Error, without
// panicking.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc yaml.Node
		if yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc) != nil || len(doc.Content) == 0 {
			return
		}
		_, err := Decode("envoy", doc.Content[0], known)
		var e *yamlnode.Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("Decode error %T (%v) is not a *yamlnode.Error", err, err)
		}
	})
}
