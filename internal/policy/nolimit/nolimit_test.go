package nolimit

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/policytest"
)

const never = policy.Never

// unlimitedResult is the vector format's no_limit
// (conformance/vectors/limiter-compound.json): accepted, remaining = limit
// = 2^63−1, wait 0.
var unlimitedResult = policy.Result{Allowed: true, Remaining: 1<<63 - 1, Limit: 1<<63 - 1}

func TestDecisions(t *testing.T) {
	tests := []struct {
		name    string
		reserve bool
		exists  bool
		now, n  int64
		maxWait int64
		want    policy.Result
	}{
		{name: "consume 1", now: 1_700_000_000_000_000_000, n: 1, want: unlimitedResult},
		{name: "consume MaxInt64", exists: true, now: math.MinInt64, n: math.MaxInt64, want: unlimitedResult},
		{name: "consume 0", n: 0, want: policy.Result{Code: policy.NonPositiveTokens}},
		{name: "consume -1", n: -1, want: policy.Result{Code: policy.NonPositiveTokens}},
		{name: "reserve waits 0", reserve: true, n: 5, maxWait: 0, want: unlimitedResult},
		{name: "reserve MaxInt64", reserve: true, now: math.MaxInt64, n: math.MaxInt64, maxWait: never, want: unlimitedResult},
		{name: "reserve 0", reserve: true, n: 0, want: policy.Result{Code: policy.NonPositiveTokens}},
		{name: "reserve with a negative bound", reserve: true, n: 1, maxWait: -1, want: policy.Result{Code: policy.NonPositiveMaxWait}},
	}
	var c Config
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s State
			var got policy.Result
			var changed bool
			if tt.reserve {
				got, changed = c.Reserve(&s, tt.exists, tt.now, tt.n, tt.maxWait)
			} else {
				got, changed = policytest.Decide(t, c, &s, tt.exists, tt.now, tt.n)
				if peek := c.Peek(&s, tt.exists, tt.now, tt.n); peek != got {
					t.Errorf("Peek(%d) = %+v, want %+v as Consume", tt.n, peek, got)
				}
			}
			if got != tt.want || changed {
				t.Errorf("got %+v, %v, want %+v, false", got, changed, tt.want)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	var c Config
	var s State
	if got := c.Quota(); got != math.MaxInt64 {
		t.Errorf("Quota() = %d, want MaxInt64", got)
	}
	if got := c.ExpiresAt(&s); got != math.MinInt64 {
		t.Errorf("ExpiresAt() = %d, want MinInt64", got)
	}
	b := c.AppendState([]byte("x"), &s)
	if want := "x\x01\x08"; string(b) != want {
		t.Errorf("AppendState = %q, want %q", b, want)
	}
	if err := c.DecodeState(b[1:], &s); err != nil {
		t.Errorf("DecodeState(AppendState) = %v", err)
	}
}

// TestContract runs the contract's suite.
func TestContract(t *testing.T) { policytest.Run(t, Config{}) }

// FuzzDecodeState: policytest's checks of a decoder, and the header alone
// is the one state.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte{1, 8})
	f.Add([]byte{1, 8, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, src []byte) {
		s := policytest.DecodeState(t, Config{}, src)
		if ok := len(src) == 2 && src[0] == policy.Version && src[1] == byte(policy.TagNoLimit); ok != (s != nil) {
			t.Fatalf("DecodeState(%x) = %v, want a state only for the header", src, s)
		}
	})
}

func FuzzDecisions(f *testing.F) {
	f.Add(int64(0), int64(1), int64(0), false)
	f.Add(int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64), true)
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(-1), true)
	f.Fuzz(func(t *testing.T, now, n, maxWait int64, exists bool) {
		var c Config
		var s State
		want := unlimitedResult
		if n <= 0 {
			want = policy.Result{Code: policy.NonPositiveTokens}
		}
		if got, changed := policytest.Decide(t, c, &s, exists, now, n); got != want || changed {
			t.Fatalf("Consume(%d) at %d = %+v, %v, want %+v, false", n, now, got, changed, want)
		}
		if got := c.Peek(&s, exists, now, n); got != want {
			t.Fatalf("Peek(%d) at %d = %+v, want %+v", n, now, got, want)
		}
		if n > 0 && maxWait < 0 {
			want = policy.Result{Code: policy.NonPositiveMaxWait}
		}
		if got, changed := c.Reserve(&s, exists, now, n, maxWait); got != want || changed {
			t.Fatalf("Reserve(%d, %d) at %d = %+v, %v, want %+v, false", n, maxWait, now, got, changed, want)
		}
	})
}

func BenchmarkConsume(b *testing.B) {
	var c Config
	var s State
	b.ReportAllocs()
	for b.Loop() {
		c.Consume(&s, true, 1, 1)
	}
}
