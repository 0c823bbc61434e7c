package envoyrls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
)

// env is a lookupEnv over a map.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestSettingsPrecedence: a key of the ratelimit: section wins over the
// environment variable, which wins over envoyproxy/ratelimit's default;
// files are read when the section or a RUNTIME_* variable asks.
func TestSettingsPrecedence(t *testing.T) {
	vars := env(map[string]string{"RUNTIME_SUBDIRECTORY": "rl", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "SHADOW_MODE": "1", "NEAR_LIMIT_RATIO": "0.5"})
	s, err := SettingsFromEnv(vars)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Files || s.RuntimeSubdirectory != "rl" || !s.ResponseHeaders || !s.ShadowMode || s.NearLimitRatio != 0.5 || s.RuntimeRoot != "/srv/runtime_data/current" {
		t.Errorf("SettingsFromEnv = %+v, want the variables over the defaults", s)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("{shadow_mode: false, runtime_root: /x}"), &doc); err != nil {
		t.Fatal(err)
	}
	s, err = DecodeSettings("ratelimit", doc.Content[0], vars)
	if err != nil {
		t.Fatal(err)
	}
	if s.ShadowMode || s.RuntimeRoot != "/x" || !s.ResponseHeaders || !s.Files {
		t.Errorf("DecodeSettings = %+v, want the keys over the variables", s)
	}
	if s, _ := SettingsFromEnv(env(nil)); s.Files || s != DefaultSettings() {
		t.Errorf("SettingsFromEnv without variables = %+v, want the defaults, no files", s)
	}
	if s, _ := SettingsFromEnv(env(map[string]string{"SHADOW_MODE": "true"})); s.Files {
		t.Error("SHADOW_MODE alone asks for files; want only RUNTIME_* variables to")
	}
	if s, _ := SettingsFromEnv(env(map[string]string{"RUNTIME_WATCH_ROOT": "false"})); !s.Files {
		t.Error("RUNTIME_WATCH_ROOT=false reads no files; want RUNTIME_ROOT/config as envoyproxy/ratelimit")
	}
}

func TestSettingsErrors(t *testing.T) {
	for _, tt := range []struct{ vars map[string]string }{
		{map[string]string{"SHADOW_MODE": "maybe"}},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}},
		{map[string]string{"RUNTIME_SUBDIRECTORY": "rl", "CONFIG_TYPE": "GRPC_XDS_SOTW"}},
	} {
		_, err := SettingsFromEnv(env(tt.vars))
		for k := range tt.vars {
			if err == nil || !strings.Contains(err.Error(), k) && !strings.Contains(err.Error(), "CONFIG_TYPE") {
				t.Errorf("SettingsFromEnv(%v) = %v, want an error naming %s", tt.vars, err, k)
			}
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("{near_limit_ratio: 2}"), &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSettings("ratelimit", doc.Content[0], env(nil)); err == nil || !strings.Contains(err.Error(), "ratelimit.near_limit_ratio (line 1)") {
		t.Errorf("DecodeSettings(near_limit_ratio: 2) = %v, want an error at its line", err)
	}
}

// write writes files under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFiles: the files envoyproxy/ratelimit's loader reads, in both
// layouts, with and without dot files, past links to directories.
func TestFiles(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"rl/config/a.yaml":     "x",
		"rl/config/sub/b.yml":  "x",
		"rl/config/.hidden":    "x",
		"rl/config/..d/c.yaml": "x",
		"rl/config.extra.yaml": "x", // counted by the root watcher's prefix rule
		"rl/other/d.yaml":      "x",
	})
	if err := os.Symlink(filepath.Join(root, "rl/config/..d"), filepath.Join(root, "rl/config/..data")); err != nil {
		t.Fatal(err)
	}
	rel := func(paths []string) []string {
		out := make([]string, len(paths))
		for i, p := range paths {
			out[i], _ = filepath.Rel(root, p)
		}
		return out
	}
	tests := []struct {
		name string
		s    Settings
		want []string
	}{
		{"watch root", Settings{RuntimeRoot: root, RuntimeSubdirectory: "rl", RuntimeAppDirectory: "config", RuntimeWatchRoot: true},
			[]string{"rl/config.extra.yaml", "rl/config/..d/c.yaml", "rl/config/.hidden", "rl/config/a.yaml", "rl/config/sub/b.yml"}},
		{"ignore dot files", Settings{RuntimeRoot: root, RuntimeSubdirectory: "rl", RuntimeAppDirectory: "config", RuntimeWatchRoot: true, RuntimeIgnoreDotFiles: true},
			[]string{"rl/config.extra.yaml", "rl/config/a.yaml", "rl/config/sub/b.yml"}},
		{"app directory", Settings{RuntimeRoot: root, RuntimeSubdirectory: "rl", RuntimeAppDirectory: "config"},
			[]string{"rl/config/..d/c.yaml", "rl/config/.hidden", "rl/config/a.yaml", "rl/config/sub/b.yml"}},
	}
	for _, tt := range tests {
		got, err := tt.s.files()
		if err != nil || !slices.Equal(rel(got), tt.want) {
			t.Errorf("%s: files() = %q, %v; want %q", tt.name, rel(got), err, tt.want)
		}
	}
	missing := Settings{RuntimeRoot: filepath.Join(root, "nope"), RuntimeSubdirectory: "rl", RuntimeWatchRoot: true, Files: true}
	var ce *config.Error
	if _, err := Load(nil, missing); !errors.As(err, &ce) || ce.File == "" {
		t.Errorf("Load of a missing directory = %v, want a *config.Error naming it", err)
	}
}

// TestLoadFiles: files load as envoyproxy/ratelimit's, beside the envoy:
// section, and every error names the file, the line and the key.
func TestLoadFiles(t *testing.T) {
	root := t.TempDir()
	s := Settings{RuntimeRoot: root, RuntimeSubdirectory: "rl", RuntimeAppDirectory: "config", RuntimeWatchRoot: true, Files: true}
	write(t, filepath.Join(root, "rl/config"), map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 0}\n",
	})
	d, err := Load(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	if r := d.find("a", "k", "v").rule; r == nil || r.unit != rlsv3.RateLimitResponse_RateLimit_MONTH || r.requestsPerUnit != 0 {
		t.Errorf("rule of a.k = %+v, want 0 a month", r)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("envoy:\n  - domain: a\n    descriptors: []\n"), &doc); err != nil {
		t.Fatal(err)
	}
	section, err := Decode("envoy", doc.Content[0].Content[1], known)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(section, s); err == nil || !strings.Contains(err.Error(), "duplicate domain 'a'") {
		t.Errorf("a domain in the section and a file = %v, want a duplicate domain error", err)
	}
	s.MergeDomainConfig = true
	if _, err := Load(section, s); err != nil {
		t.Errorf("a domain in the section and a file, merged = %v", err)
	}
	bad := []struct{ data, want string }{
		{"domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n", "b.yaml: descriptors[0].rate_limit.unit (line 4): invalid rate limit unit 'fortnight'"},
		{"domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, shadow_mode: true}\n", "b.yaml: descriptors[0].rate_limit.shadow_mode (line 4)"},
		{"domain: b\ndescriptors:\n  - key: k\n    limiter: per_ip\n", "only be named in the envoy: section"},
		{"domain: b\n---\ndomain: c\n", "more than one YAML document"},
		{"", "config file cannot have empty domain"},
		{"domain: b\ndescriptors:\n  - {key: k, value: v}\n  - {key: k_v}\n", "b.yaml: descriptors[1] (line 4): duplicate descriptor composite key 'b.k_v', first at"},
	}
	var ce *config.Error
	for _, tt := range bad {
		write(t, filepath.Join(root, "rl/config"), map[string]string{"b.yaml": tt.data})
		_, err := Load(nil, s)
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%q) = %v, want a *config.Error with %q", tt.data, err, tt.want)
		}
	}
}

// TestWindows: envoyproxy/ratelimit's windows start on multiples of the
// unit since the epoch, months of 30 days and years of 365, and a reset
// is 1 to unit seconds away.
func TestWindows(t *testing.T) {
	tests := []struct {
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		now       int64
		start, in int64
	}{
		{rlsv3.RateLimitResponse_RateLimit_SECOND, 1234, 1234, 1},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, 1234, 1200, 26},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, 1200, 1200, 60},
		{rlsv3.RateLimitResponse_RateLimit_HOUR, 1000000, 997200, 800},
		{rlsv3.RateLimitResponse_RateLimit_DAY, 1000000, 950400, 36800},
		{rlsv3.RateLimitResponse_RateLimit_WEEK, 1000000, 604800, 209600},
		{rlsv3.RateLimitResponse_RateLimit_MONTH, 1000000, 0, 1592000},
		{rlsv3.RateLimitResponse_RateLimit_YEAR, 1800000000, 1797552000, 29088000},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, -30, -60, 30},
	}
	for _, tt := range tests {
		u := unitSeconds(tt.unit)
		if got := windowStart(tt.now, u); got != tt.start {
			t.Errorf("windowStart(%d, %s) = %d, want %d", tt.now, tt.unit, got, tt.start)
		}
		if got := untilReset(tt.now, u); got != tt.in {
			t.Errorf("untilReset(%d, %s) = %d, want %d", tt.now, tt.unit, got, tt.in)
		}
	}
	if unitSeconds(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) != 0 || unitSeconds(99) != 0 {
		t.Error("an unknown unit has a length")
	}
}

// TestOverLimitCache: keys are forgotten when they expire, and a full
// cache makes room with expired keys or remembers nothing more.
func TestOverLimitCache(t *testing.T) {
	var none *overLimitCache
	none.set("k", 0, 10)
	if none.has("k", 0) || newOverLimitCache(0) != nil {
		t.Error("a cache of size 0 remembers")
	}
	c := newOverLimitCache(2 * (overLimitOverhead + 1))
	c.set("a", 0, 10)
	c.set("b", 0, 5)
	c.set("c", 0, 10) // full
	if !c.has("a", 9) || c.has("c", 1) || c.has("a", 10) {
		t.Error("has: want a until 10, no c")
	}
	c.set("c", 6, 10) // b expired at 5 and makes room
	if !c.has("c", 7) || c.has("b", 7) {
		t.Error("an expired key did not make room")
	}
}

// TestStatLabels: a stat key becomes the labels domain, key1 and key2,
// cleaned as envoyproxy/ratelimit cleans stat names, and keys past
// MaxStatKeys share one series per domain.
func TestStatLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.max = 13
	m.of("edge", "edge.remote_address_10.0.0.1").add(totalHits, 2)
	m.of("edge", "edge.a_x:y.b_z").add(totalHits, 1)
	m.of("edge", "edge.k").add(totalHits, 1)
	for i := range 12 {
		m.of("d", fmt.Sprintf("d.k_%d", i)).add(overLimit, 1)
	}
	m.of("d", "d.k_more").add(overLimit, 1)
	m.of("d", "d.k_evenmore").add(overLimit, 1)
	got := map[[3]string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var l [3]string
			for _, lp := range mt.GetLabel() {
				l[slices.Index([]string{"domain", "key1", "key2"}, lp.GetName())] = lp.GetValue()
			}
			got[l] += mt.GetCounter().GetValue()
			if mf.GetName() == "ratelimit_service_rate_limit_over_limit" {
				series++
			}
		}
	}
	for l, want := range map[[3]string]float64{
		{"edge", "remote_address_10_0_0_1", ""}: 2,
		{"edge", "a_x_y", "b_z"}:                1,
		{"edge", "k", ""}:                       1,
		{"d", "_overflow", ""}:                  4, // past the 13th key
		{"d", "k_9", ""}:                        1,
	} {
		if got[l] != want {
			t.Errorf("series %v = %v, want %v", l, got[l], want)
		}
	}
	if series != 14 {
		t.Errorf("%d over_limit series, want 14: 3 keys of edge, 10 of d and its overflow", series)
	}
}

// FuzzDecodeFile: any file decodes or fails with a *config.Error naming
// it, without panicking.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: 'a*b', rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: [1, {b: c}]}\n    descriptors: [{key: x}]\n"))
	f.Add([]byte("'''"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := decodeFile("f.yaml", data)
		var ce *config.Error
		if err != nil && (!errors.As(err, &ce) || ce.File != "f.yaml") {
			t.Fatalf("decodeFile error %T (%v) is not a *config.Error naming the file", err, err)
		}
	})
}
