package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
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
		if r := d.find(domain, "remote_address", "1.2.3.4").rule; r == nil || r.limiter != "per_ip" {
			t.Errorf("find(%s, remote_address) = %+v, want per_ip", domain, r)
		}
	}
}

// find matches the descriptor of key, value pairs kv in domain.
func (d *Domains) find(domain string, kv ...string) match {
	desc := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	root := d.root(domain)
	if root == nil {
		return match{}
	}
	return lookup(domain, root, desc, true)
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
		name   string
		domain string
		kv     []string
		want   string // limiter, "N/UNIT", none or unlimited
		shadow bool
	}{
		{"any value", "edge", []string{"remote_address", "1.2.3.4"}, "per_ip", false},
		{"exact value first", "edge", []string{"path", "/login"}, "login", false},
		{"wildcard before key alone", "edge", []string{"path", "/api/v1/users"}, "per_ip", false},
		{"wildcard is not a suffix", "edge", []string{"path", "/v1/api/"}, "per_path", false},
		{"key alone last", "edge", []string{"path", "/logout"}, "per_path", false},
		{"value is case sensitive", "edge", []string{"path", "/LOGIN"}, "per_path", false},
		{"nested", "edge", []string{"path", "/login", "user", "bob"}, "5/MINUTE", false},
		{"deeper than the config", "edge", []string{"path", "/login", "user", "bob", "x", "y"}, none, false},
		{"nested key mismatch", "edge", []string{"path", "/login", "client", "bob"}, none, false},
		{"no nesting under the key alone", "edge", []string{"path", "/x", "user", "bob"}, none, false},
		{"unlimited", "edge", []string{"generic_key", "health"}, unlimited, false},
		{"unlimited in rate_limit", "edge", []string{"generic_key", "legacy"}, unlimited, false},
		{"exact value only", "edge", []string{"generic_key", "other"}, none, false},
		{"shadow", "edge", []string{"tenant", "acme"}, "per_tenant", true},
		{"node without a limit", "edge", []string{"authenticated", "true"}, none, false},
		{"under a node without a limit", "edge", []string{"authenticated", "true", "client_id", "c1"}, "1000/HOUR", false},
		{"other domain", "internal", []string{"remote_address", "1.2.3.4"}, "per_ip", false},
		{"other domain's descriptors", "internal", []string{"path", "/login"}, none, false},
		{"unknown domain", "nope", []string{"remote_address", "1.2.3.4"}, none, false},
		{"unknown key", "edge", []string{"nope", "x"}, none, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, shadow := none, false
			if r := d.find(tt.domain, tt.kv...).rule; r != nil {
				switch {
				case r.unlimited:
					got = unlimited
				case r.limiter != "":
					got = r.limiter
				default:
					got = fmt.Sprintf("%d/%s", r.requestsPerUnit, r.unit)
				}
				shadow = r.shadow
			}
			if got != tt.want || shadow != tt.shadow {
				t.Errorf("find(%s, %v) = %s (shadow %v), want %s (shadow %v)", tt.domain, tt.kv, got, shadow, tt.want, tt.shadow)
			}
		})
	}
	if (*Domains)(nil).root("edge") != nil {
		t.Error("a nil *Domains has domains")
	}
}

// TestWildcards: a '*' anywhere in a value stands for any run of bytes,
// the empty one included, as envoyproxy/ratelimit matches it since 2026.
func TestWildcards(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true},
		{"foo*", "foo1", true},
		{"foo*", "fo", false},
		{"bar*b", "barab", true},
		{"bar*b", "bar123b", true},
		{"bar*b", "barb", true},
		{"bar*b", "bara", false},
		{"bar*b", "xbarb", false},
		{"bar*b", "bab", false}, // prefix and suffix may not overlap
		{"foo*bar*baz", "foo123bar456baz", true},
		{"foo*bar*baz", "foobarbaz", true},
		{"foo*bar*baz", "foo123baz", false},
		{"foo*bar*baz", "bar456baz", false},
		{"foo*bar*baz", "foobazbar", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "example.com", false},
		{"*", "", true},
		{"a**b", "ab", true},
		{"a*b*", "axbyyy", true},
	}
	for _, tt := range tests {
		if got := matchWildcard(strings.Split(tt.pattern, "*"), tt.value); got != tt.want {
			t.Errorf("matchWildcard(%q, %q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
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

// TestDecodeUnitMultiplier: a rate_limit's window is its unit times its
// unit_multiplier, which is 1 when absent or null, up to the longest
// window a counter's TTL can hold.
func TestDecodeUnitMultiplier(t *testing.T) {
	tests := []struct {
		rateLimit  string
		multiplier uint32
		window     int64
	}{
		{"{unit: second, requests_per_unit: 10, unit_multiplier: 5}", 5, 5},
		{"{unit: minute, requests_per_unit: 10, unit_multiplier: 15}", 15, 15 * 60},
		{"{unit: second, requests_per_unit: 10}", 0, 1},
		{"{unit: hour, requests_per_unit: 10, unit_multiplier: null}", 0, 60 * 60},
		{"{unit: hour, requests_per_unit: 10, unit_multiplier: 1}", 1, 60 * 60},
		{"{unit: second, requests_per_unit: 10, unit_multiplier: 4294967295}", 4294967295, 4294967295},
		{"{unit: year, requests_per_unit: 10, unit_multiplier: 292}", 292, 292 * 365 * 24 * 60 * 60},
		{"{unlimited: true, unit_multiplier: null}", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.rateLimit, func(t *testing.T) {
			doc := "envoy:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: " + tt.rateLimit + "\n"
			d, err := Decode("envoy", section(t, []byte(doc)), known)
			if err != nil {
				t.Fatal(err)
			}
			r := d.find("d", "k", "v").rule
			if r == nil {
				t.Fatal("find(d, k) = no rule")
			}
			if r.multiplier != tt.multiplier || r.window() != tt.window {
				t.Errorf("multiplier, window() = %d, %d, want %d, %d", r.multiplier, r.window(), tt.multiplier, tt.window)
			}
		})
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

// TestRequestValueStats: the descriptors whose stat keys, and so their
// series' labels, take the request's values are found, with their place;
// those whose stat keys the config writes are not.
func TestRequestValueStats(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       string // the error's text, "" for none
	}{
		{"config keys", `envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: user
        value: alice
        rate_limit: {unit: second, requests_per_unit: 1}
`, ""},
		{"value_to_metric without a rule below", `envoy:
  - domain: d
    descriptors:
      - {key: k, value_to_metric: true}
`, ""},
		{"detailed_metric", `envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: user
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 1}
`, "envoy[0].descriptors[1].detailed_metric (line 6): detailed_metric puts the request's values in the rule's stat key"},
		{"value_to_metric above a rule", `envoy:
  - domain: d
    descriptors:
      - key: tenant
        value_to_metric: true
        descriptors:
          - key: user
            rate_limit: {unit: second, requests_per_unit: 1}
`, "envoy[0].descriptors[0].value_to_metric (line 4): value_to_metric puts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode("envoy", section(t, []byte(tt.yaml)), known)
			if err != nil {
				t.Fatal(err)
			}
			got := d.RequestValueStats()
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("RequestValueStats = %v, want nil", got)
			case tt.want != "" && (got == nil || !strings.Contains(got.Error(), tt.want)):
				t.Errorf("RequestValueStats = %v, want %q", got, tt.want)
			}
		})
	}
	d, err := Load(nil, Settings{AllowRequestLimits: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.RequestValueStats(); got == nil || got.Path != "ratelimit.allow_request_limits" {
		t.Errorf("RequestValueStats with allow_request_limits = %v, want it named", got)
	}
}
