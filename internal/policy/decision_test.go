package policy_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// TestDecisionFitsRegisters: a Decision, and the Verdict inside it, stay
// at most four fields and 32 bytes, the most Go's compiler keeps in
// registers (ssa.CanSSA in cmd/compile): one field more and every
// Consume's answer is copied through memory again, at a third of a keyed
// decision (docs/benchmarks.md, "A four-word decision, written plainly").
func TestDecisionFitsRegisters(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[policy.Decision](), reflect.TypeFor[policy.Verdict]()} {
		if typ.NumField() > 4 || typ.Size() > 32 {
			t.Errorf("%v has %d fields of %d bytes, want at most 4 and 32", typ, typ.NumField(), typ.Size())
		}
	}
}

// TestDecisionResult: a Decision's Result takes the limit of its bound
// for a decision and for tokens above the limit, and none for another
// argument error, as Refusal does.
func TestDecisionResult(t *testing.T) {
	limits := []int64{10, 3}
	for _, tt := range []struct {
		d    policy.Decision
		want policy.Result
	}{
		{policy.Decision{Verdict: policy.Verdict{Allowed: true, Bound: 1}, Remaining: 2, ResetAfter: 5},
			policy.Result{Allowed: true, Remaining: 2, ResetAfter: 5, Limit: 3}},
		{policy.Decision{Remaining: 0, RetryAfter: 4, ResetAfter: 9},
			policy.Result{RetryAfter: 4, ResetAfter: 9, Limit: 10}},
		{policy.Decision{Verdict: policy.Verdict{Code: policy.TokensAboveLimit, Bound: 1}}, policy.Refusal(policy.TokensAboveLimit, 3)},
		{policy.Decision{Verdict: policy.Verdict{Code: policy.NonPositiveTokens, Bound: 1}}, policy.Refusal(policy.NonPositiveTokens, 3)},
	} {
		if got := tt.d.Result(limits[tt.d.Bound]); got != tt.want {
			t.Errorf("%+v.Result = %+v, want %+v", tt.d, got, tt.want)
		}
		if got := tt.want.Decision(tt.d.Bound); got != tt.d {
			t.Errorf("%+v.Decision(%d) = %+v, want %+v", tt.want, tt.d.Bound, got, tt.d)
		}
	}
	if got := policy.BoundOf(limits, 3); got != 1 {
		t.Errorf("BoundOf(%v, 3) = %d, want 1", limits, got)
	}
	if got := policy.BoundOf(limits, 7); got != 0 {
		t.Errorf("BoundOf(%v, 7) = %d, want 0 (none)", limits, got)
	}
}
