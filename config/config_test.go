package config_test

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sluicetest"
)

// wantLine is the first line of every testdata/*.bad.yaml: a substring of
// the error's text and the line the error must point at (0: none).
var wantLine = regexp.MustCompile(`^# want: (.*) @ line ([0-9]+)$`)

// isLine, on the second line, says the error must match
// sluice.ErrInvalidConfig: a sluice constructor rejected the value.
const isLine = "# is: sluice.ErrInvalidConfig"

type badFile struct {
	want    string
	line    int
	invalid bool
}

func readBad(t *testing.T, data []byte) badFile {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Scan()
	m := wantLine.FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("first line %q is not %q", sc.Text(), "# want: <substring> @ line N")
	}
	line, err := strconv.Atoi(m[2])
	if err != nil {
		t.Fatal(err)
	}
	sc.Scan()
	return badFile{want: m[1], line: line, invalid: sc.Text() == isLine}
}

// TestLoadBad loads every testdata/*.bad.yaml, one per rule of the format,
// and checks the error its first line announces.
func TestLoadBad(t *testing.T) {
	checkBad(t, "testdata/*.bad.yaml", "Load", func(_ string, data []byte) (any, error) { return config.Load(data) },
		func(t *testing.T, _ string, err error, e *config.Error) {
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("Load error = %q, want it to start with config: ", err)
			}
			if e.Path != "" && !strings.Contains(err.Error(), e.Path+" (line ") {
				t.Errorf("Load error = %q, want the path %q before the line", err, e.Path)
			}
		})
}

// checkBad loads every file of glob with load (called name in messages)
// and checks the error its first line announces (readBad): a *config.Error
// at that line that contains the text and matches sluice.ErrInvalidConfig
// as announced. extra checks what is particular to the loader.
func checkBad(t *testing.T, glob, name string, load func(file string, data []byte) (any, error),
	extra func(t *testing.T, file string, err error, e *config.Error)) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s: %v", glob, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".bad.yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := readBad(t, data)
			got, err := load(file, data)
			if err == nil {
				t.Fatalf("%s = %v, nil; want error %q", name, got, want.want)
			}
			var e *config.Error
			if !errors.As(err, &e) {
				t.Fatalf("%s error %T (%v) is not a *config.Error", name, err, err)
			}
			if !strings.Contains(err.Error(), want.want) {
				t.Errorf("%s error = %q, want it to contain %q", name, err, want.want)
			}
			if e.Line != want.line {
				t.Errorf("%s error line = %d, want %d", name, e.Line, want.line)
			}
			if got := errors.Is(err, sluice.ErrInvalidConfig); got != want.invalid {
				t.Errorf("errors.Is(%v, sluice.ErrInvalidConfig) = %v, want %v", err, got, want.invalid)
			}
			extra(t, file, err, e)
		})
	}
}

// TestLoadGood loads every testdata/*.good.yaml and checks its limiters'
// policies by their String, which must start with the text given: the
// whole string for the policies whose format is fixed.
func TestLoadGood(t *testing.T) {
	tests := []struct {
		file  string
		order []string
		want  map[string]string
	}{
		{
			file:  "symfony",
			order: []string{"anonymous_api", "authenticated_api", "business"},
			want: map[string]string{
				"anonymous_api":     "fixed_window(limit=100, interval=1h0m0s)",
				"authenticated_api": "token_bucket(limit=5000, rate=500 per 15m0s)",
				"business":          "bucket(capacity=10000 greedy(10000 per 1h0m0s) id=business, capacity=20 greedy(20 per 1s) id=burst)",
			},
		},
		{
			file:  "policies",
			order: []string{"fixed", "on_the_minute", "sliding", "log", "tokens", "leaky", "gcra", "shaper", "open", "both", "bucket"},
			want: map[string]string{
				"fixed":         "fixed_window(limit=100, interval=1h30m0s)",
				"on_the_minute": "fixed_window(limit=60, interval=1m0s, aligned)",
				"sliding":       "sliding_window(",
				"log":           "sliding_log(",
				"tokens":        "token_bucket(limit=1000000, rate=16 per 24h0m0s)",
				"leaky":         "leaky_bucket(limit=50, rate=5 per 250ms)",
				"gcra":          "gcra(",
				"shaper":        "shaper(",
				"open":          "no_limit",
				"both":          "compound(",
				"bucket":        "bucket(capacity=1000 greedy(1000 per 1h0m0s) id=hourly, capacity=10 intervally(10 per 1s) initial=0)",
			},
		},
		{
			file:  "quotas",
			order: []string{"monthly", "per_second", "api", "login_tries", "login"},
			want: map[string]string{
				"monthly":     "calendar(limit=10000, months=1, days=0, anchor=2000-01-31T00:00:00 America/New_York)",
				"per_second":  "token_bucket(limit=10, rate=10 per 1s)",
				"api":         "compound(calendar(",
				"login_tries": "fixed_window(limit=5, interval=15m0s)",
				"login":       "penalty_box(fixed_window(limit=5, interval=15m0s), penalties=[1m0s 10m0s 1h0m0s], forgive_after=24h0m0s)",
			},
		},
		{
			file:  "aligned",
			order: []string{"hourly"},
			want:  map[string]string{"hourly": "bucket(capacity=3600 intervally_aligned(3600 per 1h0m0s, first 2024-01-01T00:00:00Z, adaptive) id=hour, capacity=10 greedy(10 per 1s))"},
		},
		{
			file:  "references",
			order: []string{"api", "per_second", "per_day", "copy", "same_rate", "everything"},
			want: map[string]string{
				"api":        "compound(",
				"per_second": "token_bucket(limit=10, rate=10 per 1s)",
				"per_day":    "leaky_bucket(limit=10000, rate=10000 per 24h0m0s)",
				"copy":       "token_bucket(limit=10, rate=10 per 1s)",
				"same_rate":  "gcra(",
				"everything": "compound(",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := config.LoadFile(filepath.Join("testdata", tt.file+".good.yaml"))
			if err != nil {
				t.Fatalf("LoadFile: %v", err)
			}
			if !slices.Equal(f.Order, tt.order) {
				t.Errorf("Order = %q, want %q", f.Order, tt.order)
			}
			got := make(map[string]string, len(f.Limiters))
			for name, l := range f.Limiters {
				got[name] = l.Policy.String()
				if !strings.HasPrefix(got[name], tt.want[name]) || tt.want[name] == "" {
					t.Errorf("%s: Policy.String() = %q, want it to start with %q", name, got[name], tt.want[name])
				}
				if l.Name != name || l.Line == 0 || l.Column == 0 {
					t.Errorf("%s: Name, Line, Column = %q, %d, %d", name, l.Name, l.Line, l.Column)
				}
				if (l.Bucket != nil) != strings.HasPrefix(got[name], "bucket(") {
					t.Errorf("%s: Bucket = %v for policy %s", name, l.Bucket, got[name])
				}
			}
		})
	}
}

// Every policy Load returns is accepted by sluice.NewLimiter, except a
// bucket with aligned refill, which sluice.NewBucket takes.
func TestLoadedPoliciesBuild(t *testing.T) {
	for _, file := range []string{"symfony", "policies", "references"} {
		f, err := config.LoadFile(filepath.Join("testdata", file+".good.yaml"))
		if err != nil {
			t.Fatalf("LoadFile(%s): %v", file, err)
		}
		for _, name := range f.Order {
			if _, err := sluice.NewLimiter(f.Limiters[name].Policy); err != nil {
				t.Errorf("%s: NewLimiter(%v) = %v", name, f.Limiters[name].Policy, err)
			}
		}
	}

	f, err := config.LoadFile("testdata/aligned.good.yaml")
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	hourly := f.Limiters["hourly"]
	var ce *sluice.ConfigError
	if _, err := sluice.NewLimiter(hourly.Policy); !errors.As(err, &ce) || ce.Rule != sluice.RuleAlignedNeedsWallClock {
		t.Errorf("NewLimiter(aligned bucket) = %v, want a %s error", err, sluice.RuleAlignedNeedsWallClock)
	}
	// Half an hour before the first refill: adaptive initial tokens give
	// the tokens of half a period.
	first := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := sluicetest.NewFakeClock(first.Add(-30 * time.Minute).UnixNano())
	b, err := sluice.NewBucket(*hourly.Bucket, sluice.WithClock(clock))
	if err != nil {
		t.Fatalf("NewBucket: %v", err)
	}
	bws := b.Snapshot().Config.Bandwidths
	if len(bws) != 2 || bws[0].ID() != "hour" || bws[0].Capacity() != 3600 || bws[0].Refill().Period() != time.Hour {
		t.Errorf("Configuration() = %+v", bws)
	}
}

// TestIntegers checks the integer forms the format takes.
func TestIntegers(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"1", 1},
		{"+7", 7},
		{"1_000_000", 1000000},
		{"0x10", 16},
		{"0o17", 15},
		{"0b101", 5},
		{"9223372036854775807", 9223372036854775807},
		{"!!int 42", 42},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			f, err := config.Load([]byte("limiters:\n  a: {policy: fixed_window, interval: 1s, limit: " + tt.in + "}\n"))
			if err != nil {
				t.Fatalf("Load(limit: %s): %v", tt.in, err)
			}
			want := sluice.FixedWindow(tt.want, time.Second).String()
			if got := f.Limiters["a"].Policy.String(); got != want {
				t.Errorf("limit: %s gives %s, want %s", tt.in, got, want)
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	t.Run("bad", func(t *testing.T) {
		path := filepath.Join("testdata", "zero_limit.bad.yaml")
		_, err := config.LoadFile(path)
		var e *config.Error
		if !errors.As(err, &e) || e.File != path {
			t.Fatalf("LoadFile(%s) = %v, want a *config.Error with File %q", path, err, path)
		}
		want := "config: " + path + ": limiters.api.limit (line 6): must be positive, got 0"
		if err.Error() != want {
			t.Errorf("LoadFile(%s) error = %q, want %q", path, err, want)
		}
		if !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("errors.Is(%v, sluice.ErrInvalidConfig) = false", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		_, err := config.LoadFile(path)
		var e *config.Error
		if !errors.As(err, &e) || e.File != path || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("LoadFile(%s) = %v, want a *config.Error with File set matching fs.ErrNotExist", path, err)
		}
		want := "config: " + path + ": open: no such file or directory"
		if err.Error() != want {
			t.Errorf("LoadFile error = %q, want %q", err, want)
		}
	})
}

func TestErrorString(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name string
		err  *config.Error
		want string
	}{
		{"all", &config.Error{File: "l.yaml", Path: "limiters.a.limit", Line: 3, Column: 7, Msg: "must be positive, got 0"},
			"config: l.yaml: limiters.a.limit (line 3): must be positive, got 0"},
		{"no file", &config.Error{Path: "limiters.a.limit", Line: 3, Msg: "m"}, "config: limiters.a.limit (line 3): m"},
		{"no line", &config.Error{Path: "limiters", Msg: "m"}, "config: limiters: m"},
		{"line only", &config.Error{Line: 9, Msg: "m", Err: cause}, "config: line 9: m"},
		{"message only", &config.Error{Msg: "m"}, "config: m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
	if err := (&config.Error{Msg: "m", Err: cause}); !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause) = false, want true", err)
	}
}

// Load keeps no state: the same bytes give the same limiters.
func TestLoadPure(t *testing.T) {
	data, err := os.ReadFile("testdata/references.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, errA := config.Load(data)
	b, errB := config.Load(data)
	if errA != nil || errB != nil {
		t.Fatalf("Load: %v, %v", errA, errB)
	}
	str := func(f *config.File) map[string]string {
		m := make(map[string]string)
		for n, l := range f.Limiters {
			m[n] = l.Policy.String()
		}
		return m
	}
	if first, second := str(a), str(b); !maps.Equal(first, second) {
		t.Errorf("second Load = %v, first %v", second, first)
	}
}

// A document whose aliases repeat a long list many times is cut short.
func TestNodeBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("limiters:\n  base:\n    policy: bucket\n    limits: &limits\n")
	for range 1000 {
		b.WriteString("      - {capacity: 1, refill: {greedy: 1, per: 1s}}\n")
	}
	for i := range 200 {
		b.WriteString("  copy" + strconv.Itoa(i) + ": {policy: bucket, limits: *limits}\n")
	}
	_, err := config.Load([]byte(b.String()))
	var e *config.Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "document too large") {
		t.Fatalf("Load = %v, want a document too large error", err)
	}
}
