package simulate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func arrivals(t *testing.T, spec string, d time.Duration) []int64 {
	t.Helper()
	tr, err := ParseTraffic(spec)
	if err != nil {
		t.Fatalf("ParseTraffic(%q): %v", spec, err)
	}
	a, err := tr.Arrivals(d)
	if err != nil {
		t.Fatalf("Arrivals(%q): %v", spec, err)
	}
	return a
}

func ms(v ...int64) []int64 {
	for i := range v {
		v[i] *= int64(time.Millisecond)
	}
	return v
}

func TestArrivals(t *testing.T) {
	for _, tt := range []struct {
		spec string
		d    time.Duration
		want []int64
	}{
		{"steady 4/s", time.Second, ms(0, 250, 500, 750)},
		{"steady 2 per 1s from 1s to 2s", 5 * time.Second, ms(1000, 1500)},
		{"steady 3/1s", time.Second, []int64{0, 333333333, 666666666}}, // exact, rounded down
		{"steady 1/minute", 3 * time.Minute, []int64{0, int64(time.Minute), int64(2 * time.Minute)}},
		{"steady 0/s", time.Second, nil},
		{"burst 3 at 200ms; burst 1 at 0s", time.Second, ms(0, 200, 200, 200)},
		{"burst 3 at 2s", time.Second, nil}, // after the end
		{"steady 2/s; burst 2 at 500ms", time.Second, ms(0, 500, 500, 500)},
		{"ramp 0/s to 4/s from 0s to 2s", 2 * time.Second, []int64{0, 1e9, 1414213562, 1732050808}},
		{"ramp 2/s to 2/s", time.Second, ms(0, 500)},
		{"replay testdata/access.log", time.Hour, ms(0, 50, 100, 100, 120, 500, 1000, 1250, 2999, 3000)},
		{"replay testdata/access.log", time.Second, ms(0, 50, 100, 100, 120, 500)},
		{"replay testdata/access.csv column 2", time.Hour, []int64{0, 250e6, 500e6, 1e9, 1e9 + 1, 3750e6}},
		{"replay testdata/access.csv column time", time.Hour, []int64{0, 250e6, 500e6, 1e9, 1e9 + 1, 3750e6}},
		// nginx's combined format, whole seconds in three time zones: the
		// three requests of 12:00:00 spread over their second, as the two
		// of 12:00:03 do.
		{"replay testdata/nginx.log", time.Hour, []int64{0, 333333333, 666666666, 1e9, 3e9, 3500e6}},
	} {
		if got := arrivals(t, tt.spec, tt.d); !slices.Equal(got, tt.want) {
			t.Errorf("%q over %v:\n got %v\nwant %v", tt.spec, tt.d, got, tt.want)
		}
	}
}

func TestRampIsLinear(t *testing.T) {
	// 0 to 100/s over 10s makes 500 arrivals, a quarter of them in the
	// first half.
	a := arrivals(t, "ramp 0/s to 100/s from 0s to 10s", 10*time.Second)
	if len(a) != 500 {
		t.Fatalf("%d arrivals, want 500", len(a))
	}
	half := 0
	for _, v := range a {
		if v < int64(5*time.Second) {
			half++
		}
	}
	if half != 125 {
		t.Errorf("%d arrivals in the first half, want 125", half)
	}
}

func TestPoissonIsSeededAndHasItsRate(t *testing.T) {
	a := arrivals(t, "poisson 100/s seed 42", 100*time.Second)
	b := arrivals(t, "poisson 100/s seed 42", 100*time.Second)
	c := arrivals(t, "poisson 100/s seed 43", 100*time.Second)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different arrivals")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds gave the same arrivals")
	}
	// 10000 expected, standard deviation 100: 5 sigma either side.
	if n := len(a); math.Abs(float64(n)-10000) > 500 {
		t.Errorf("%d arrivals in 100s at 100/s", n)
	}
	if !slices.IsSorted(a) {
		t.Error("arrivals are not sorted")
	}
}

func TestParseTrafficErrors(t *testing.T) {
	for _, tt := range []struct{ spec, want string }{
		{"", "empty spec"},
		{" ; ", "empty spec"},
		{"trickle 5/s", `unknown pattern "trickle"`},
		{"steady", "want a rate"},
		{"steady 5", "want a rate"},
		{"steady x/s", "the count must be a whole number"},
		{"steady -1/s", "the count must be a whole number"},
		{"steady 5/fortnight", `bad period "fortnight"`},
		{"steady 5/0s", "the period must be positive"},
		{"steady 5/s from 2s", "want nothing or: from T to T"},
		{"steady 5/s from 2s to 1s", "to must be after from"},
		{"burst 5", "want: burst N at T"},
		{"burst many at 1s", "count must be a whole number"},
		{"burst 5 at -1s", "must not be negative"},
		{"ramp 1/s 5/s", "want: ramp RATE to RATE"},
		{"poisson 5/s seed x", "seed must be a whole number"},
		{"replay", "want: replay FILE"},
		{"replay testdata/nonexistent", "no such file"},
		{"replay testdata/access.csv column nope", `no column "nope"`},
		{"replay testdata/access.csv column 9", "no column 9"},
		{"replay testdata/limiters.yaml", "line 2: "},
		{"replay testdata/limiters.yaml", "or an access log line with a time such as [10/Oct/2000:13:55:36 -0700]"},
		{"steady 5/s; burst 1 at soon", `"burst 1 at soon": bad time "soon"`},
	} {
		_, err := ParseTraffic(tt.spec)
		var se *SpecError
		if !errors.As(err, &se) {
			t.Errorf("ParseTraffic(%q) = %v, want a *SpecError", tt.spec, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseTraffic(%q) = %q, want it to say %q", tt.spec, err, tt.want)
		}
	}
}

func TestTooManyRequests(t *testing.T) {
	tr, err := ParseTraffic("steady 1000000/ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Arrivals(time.Hour); !errors.As(err, new(*SpecError)) || !strings.Contains(err.Error(), "at most 50000000") {
		t.Errorf("Arrivals = %v, want a *SpecError about too many requests", err)
	}
}

// TestCountMatchesArrivals: Count, which the caps are checked on before
// any arrival is made, is the number of arrivals, exactly for every
// clause but poisson, whose mean it is.
func TestCountMatchesArrivals(t *testing.T) {
	for _, tt := range []struct {
		spec     string
		duration time.Duration
	}{
		{"steady 20/s", 10 * time.Second},
		{"steady 3/7ms", time.Second},
		{"steady 7/3s", 10*time.Second + 1},
		{"steady 1000/s from 1500ms to 2s", 10 * time.Second},
		{"steady 1000/s from 1500ms to 20s", 10 * time.Second},
		{"steady 0/s", time.Second},
		{"burst 50 at 2s; burst 7 at 10s", 10 * time.Second},
		{"ramp 1/s to 100/s", 10 * time.Second},
		{"ramp 100/s to 0/s from 1s to 3s", 10 * time.Second},
		{"ramp 3/s to 17/s", 7*time.Second + 3},
		{"replay testdata/nginx.log", 3 * time.Second},
		{"steady 5/s; burst 3 at 1s; ramp 1/s to 9/s", 4 * time.Second},
	} {
		tr, err := ParseTraffic(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		arrivals, err := tr.Arrivals(tt.duration)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Count(tt.duration); got != float64(len(arrivals)) {
			t.Errorf("%q over %v: Count = %v, want the %d arrivals", tt.spec, tt.duration, got, len(arrivals))
		}
	}
	tr, err := ParseTraffic("poisson 1000/s seed 3")
	if err != nil {
		t.Fatal(err)
	}
	arrivals, err := tr.Arrivals(10 * time.Second)
	if got := tr.Count(10 * time.Second); err != nil || got != 10_000 || len(arrivals) < 9_500 || len(arrivals) > 10_500 {
		t.Errorf("poisson 1000/s over 10s: Count = %v and %d arrivals (%v), want 10000 and about as many", got, len(arrivals), err)
	}
	// A poisson spec whose mean is within the cap may still draw more
	// arrivals than it: they are refused as they come.
	for seed := 1; ; seed++ {
		tr, err = ParseTraffic(fmt.Sprintf("poisson 100/s seed %d", seed))
		if err != nil {
			t.Fatal(err)
		}
		if arrivals, _ := tr.Arrivals(time.Second); len(arrivals) <= 100 {
			continue // a draw within the mean
		}
		if _, err := tr.requests(time.Second, 100); err == nil || !strings.Contains(err.Error(), "at least 101") {
			t.Errorf("poisson 100/s seed %d capped at 100 = %v, want an error about at least 101 requests", seed, err)
		}
		break
	}
}
