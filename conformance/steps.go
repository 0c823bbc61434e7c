package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/smooth"
)

// call runs a step's operation on e and returns its values, one per field
// of the operation: a bool, an int64 or a string each.
type call func(ctx context.Context, e *env) ([]any, error)

// step is one decoded step of a case.
type step struct {
	op       string // the operation, or "advance" / "set_clock"
	blocking bool   // run needs env.blocking
	debts    bool   // run needs env.debts
	slots    bool   // run needs env.slots
	run      call
	returns  []field  // the shape of run's values
	want     []expect // the values compared, in field order; nil when none are
	wantErr  string   // the error code the call must fail with, or ""
}

// env is what a case's steps act on: the clock, and the one subject the
// case built (the other fields are nil).
type env struct {
	clock     *sluicetest.FakeClock
	bucket    Bucket
	blocking  BlockingBucket // bucket, when it implements BlockingBucket
	limiter   Limiter
	debts     DebtLimiter            // limiter, when it implements DebtLimiter
	holds     []string               // the IDs of the case's holds, in order
	slots     SlotLimiter            // limiter, when it implements SlotLimiter
	held      map[string]sluice.Slot // the slots acquired, by the names the steps give them
	rate      *resilience.RateLimiter
	timeLimit *timeLimit
	smooth    *smooth.RateLimiter
}

// field is one value an operation returns. A scalar result is a single
// field named "".
type field struct {
	name   string
	kind   kind
	values []string // the values a text field may take
}

type kind uint8

const (
	boolean kind = iota + 1
	number
	text
)

// flag, num and oneOf make a field of kind boolean, number and text.
func flag(name string) field { return field{name: name, kind: boolean} }
func num(name string) field  { return field{name: name, kind: number} }
func oneOf(name string, values ...string) field {
	return field{name: name, kind: text, values: values}
}

// expect is one wanted value: a bool, an int64 or a string, of
// returns[field].
type expect struct {
	field int
	value any
}

// errorCodes are the want_error codes of the format.
var errorCodes = []string{"invalid_argument", "max_wait_exceeded", "reserve_not_supported", "invalid_interval", "debt_not_supported"}

// errorCode is the want_error code of err, or "" when it has none. sluice
// has no error for invalid_interval: it accepts intervals under 1s.
func errorCode(err error) string {
	var du debtUnsupported
	switch {
	case errors.As(err, &du):
		return "debt_not_supported"
	case errors.Is(err, sluice.ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, sluice.ErrMaxWaitExceeded):
		return "max_wait_exceeded"
	case errors.Is(err, errors.ErrUnsupported):
		return "reserve_not_supported"
	}
	return ""
}

// invalidInterval explains why a step wanting invalid_interval fails.
const invalidInterval = "sluice accepts intervals under 1s: Symfony's invalid_interval is a quirk it deliberately does not reproduce"

type stepDoc struct {
	Advance   *duration       `json:"advance"`
	SetClock  *integer        `json:"set_clock"`
	Op        *string         `json:"op"`
	Tokens    *integer        `json:"tokens"`
	Permits   *integer        `json:"permits"`
	Limit     *integer        `json:"limit"`
	MaxWait   *duration       `json:"max_wait"`
	Timeout   *duration       `json:"timeout"`
	Task      *duration       `json:"task"`
	Outcome   *string         `json:"outcome"`
	Bucket    json.RawMessage `json:"bucket"`
	Strategy  *string         `json:"strategy"`
	TTL       *duration       `json:"ttl"`
	Hold      *integer        `json:"hold"`
	Slot      *string         `json:"slot"`
	Want      json.RawMessage `json:"want"`
	WantError *string         `json:"want_error"`
}

// opTable is the operations of one kind of case, by name.
type opTable struct {
	of  string // what the operations act on, for messages: "a bucket"
	ops map[string]opSpec
}

// decodeStep decodes one step of a case whose operations are ops. On error
// the returned step still names its op when that much could be read.
func decodeStep(raw json.RawMessage, ops opTable) (step, error) {
	var d stepDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		var s step
		var named struct{ Op string }
		if json.Unmarshal(raw, &named) == nil {
			s.op = named.Op
		}
		return s, err
	}
	given := 0
	for _, ok := range []bool{d.Advance != nil, d.SetClock != nil, d.Op != nil} {
		if ok {
			given++
		}
	}
	if given != 1 {
		return step{}, errors.New("a step has exactly one of advance, set_clock and op")
	}
	if d.Op == nil {
		s := clockStep(&d)
		if present(d.Want) || d.WantError != nil {
			return s, fmt.Errorf("%s takes no want or want_error", s.op)
		}
		return s, nil
	}
	s := step{op: *d.Op}
	spec, ok := ops.ops[s.op]
	if !ok {
		return s, fmt.Errorf("unknown op %q for %s", s.op, ops.of)
	}
	s.returns, s.blocking, s.debts = spec.returns, spec.blocking, spec.debts
	s.returns, s.blocking, s.slots = spec.returns, spec.blocking, spec.slots
	var err error
	if s.run, err = spec.bind(&d); err != nil {
		return s, err
	}
	if d.WantError != nil {
		if present(d.Want) {
			return s, errors.New("a step has want or want_error, not both")
		}
		if !slices.Contains(errorCodes, *d.WantError) {
			return s, fmt.Errorf("want_error %q is none of %s", *d.WantError, strings.Join(errorCodes, ", "))
		}
		s.wantErr = *d.WantError
		return s, nil
	}
	if present(d.Want) {
		if s.want, err = decodeWant(d.Want, s.returns); err != nil {
			return s, fmt.Errorf("want: %w", err)
		}
	}
	return s, nil
}

func clockStep(d *stepDoc) step {
	if d.Advance != nil {
		dt := time.Duration(*d.Advance)
		return step{op: "advance", run: func(_ context.Context, e *env) ([]any, error) {
			e.clock.Advance(dt)
			return nil, nil
		}}
	}
	t := int64(*d.SetClock)
	return step{op: "set_clock", run: func(_ context.Context, e *env) ([]any, error) {
		e.clock.Set(t)
		return nil, nil
	}}
}

// opSpec describes an operation of the format.
type opSpec struct {
	returns  []field // nil for an operation that returns nothing
	blocking bool
	debts    bool
	slots    bool // it needs a SlotLimiter
	// bind checks the step's arguments and returns the call.
	bind func(d *stepDoc) (call, error)
}

var (
	scalarBool   = []field{flag("")}
	scalarNumber = []field{num("")}
)

// bucketOps are the operations of bucket cases.
var bucketOps = opTable{of: "a bucket", ops: map[string]opSpec{
	"try_consume": {returns: scalarBool, bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		ok, err := e.bucket.TryConsume(ctx, n)
		return []any{ok}, err
	})},
	"try_consume_and_return_remaining": {
		returns: []field{flag("consumed"), num("remaining"), num("nanos_to_wait_for_refill"), num("nanos_to_wait_for_reset")},
		bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
			r, err := e.bucket.AllowN(ctx, n)
			return []any{r.Allowed, r.Remaining, int64(r.RetryAfter), int64(r.ResetAfter)}, err
		}),
	},
	"estimate_ability_to_consume": {
		returns: []field{flag("can_be_consumed"), num("remaining"), num("nanos_to_wait_for_refill")},
		bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
			r, err := e.bucket.PeekN(ctx, n)
			remaining := r.Remaining // Bucket4j's estimate reports the tokens there now
			if r.Allowed {
				remaining += n
			}
			return []any{r.Allowed, remaining, int64(r.RetryAfter)}, err
		}),
	},
	"try_consume_as_much_as_possible": {returns: scalarNumber, bind: bindConsumeAsMuchAsPossible},
	"consume_ignoring_rate_limits": {returns: scalarNumber, bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		d, err := e.bucket.ConsumeIgnoringRateLimits(ctx, n)
		return []any{int64(d)}, err
	})},
	"add_tokens": {bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		return nil, e.bucket.AddTokens(ctx, n)
	})},
	"force_add_tokens": {bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		return nil, e.bucket.ForceAddTokens(ctx, n)
	})},
	"reset": {bind: func(*stepDoc) (call, error) {
		return func(ctx context.Context, e *env) ([]any, error) { return nil, e.bucket.Reset(ctx) }, nil
	}},
	"available": {returns: scalarNumber, bind: func(*stepDoc) (call, error) {
		return func(ctx context.Context, e *env) ([]any, error) {
			n, err := e.bucket.AvailableTokens(ctx)
			return []any{n}, err
		}, nil
	}},
	"replace_configuration": {bind: bindReplaceConfiguration},
	"blocking_try_consume": {
		returns:  []field{flag("consumed"), num("slept")},
		blocking: true,
		bind:     bindBlockingTryConsume,
	},
	"blocking_consume": {
		returns:  []field{num("slept")},
		blocking: true,
		bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
			before := e.clock.Slept()
			err := e.blocking.WaitN(ctx, n, sluice.Never)
			return []any{int64(e.clock.Slept() - before)}, err
		}),
	},
}}

// withTokens binds an operation whose argument is tokens.
func withTokens(f func(ctx context.Context, e *env, n int64) ([]any, error)) func(*stepDoc) (call, error) {
	return withCount("tokens", 0, f)
}

// withCount binds an operation whose argument is a count: tokens or
// permits, as arg names it. An absent count is def, or an error when def
// is 0.
func withCount(arg string, def int64, f func(ctx context.Context, e *env, n int64) ([]any, error)) func(*stepDoc) (call, error) {
	return func(d *stepDoc) (call, error) {
		v := d.Tokens
		if arg == "permits" {
			v = d.Permits
		}
		n := def
		switch {
		case v != nil:
			n = int64(*v)
		case def == 0:
			return nil, fmt.Errorf("%s is missing", arg)
		}
		return func(ctx context.Context, e *env) ([]any, error) { return f(ctx, e, n) }, nil
	}
}

func bindConsumeAsMuchAsPossible(d *stepDoc) (call, error) {
	if d.Limit == nil {
		return func(ctx context.Context, e *env) ([]any, error) {
			n, err := e.bucket.TryConsumeAsMuchAsPossible(ctx)
			return []any{n}, err
		}, nil
	}
	limit := int64(*d.Limit)
	return func(ctx context.Context, e *env) ([]any, error) {
		n, err := e.bucket.TryConsumeUpTo(ctx, limit)
		return []any{n}, err
	}, nil
}

var strategies = map[string]sluice.Inheritance{
	"proportionally": sluice.InheritProportionally,
	"as_is":          sluice.InheritAsIs,
	"reset":          sluice.InheritReset,
	"additive":       sluice.InheritAdditive,
}

// bindReplaceConfiguration binds replace_configuration. The bucket's
// precision is ignored: the clock stays the one the case's bucket was
// built with.
func bindReplaceConfiguration(d *stepDoc) (call, error) {
	if !present(d.Bucket) {
		return nil, errors.New("bucket is missing")
	}
	cfg, _, err := decodeBucket(d.Bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket: %w", err)
	}
	if d.Strategy == nil {
		return nil, errors.New("strategy is missing")
	}
	strategy, ok := strategies[*d.Strategy]
	if !ok {
		return nil, fmt.Errorf("strategy %q is none of proportionally, as_is, reset and additive", *d.Strategy)
	}
	return func(ctx context.Context, e *env) ([]any, error) {
		return nil, e.bucket.ReplaceConfiguration(ctx, cfg, strategy)
	}, nil
}

func bindBlockingTryConsume(d *stepDoc) (call, error) {
	if d.Tokens == nil {
		return nil, errors.New("tokens is missing")
	}
	if d.MaxWait == nil {
		return nil, errors.New("max_wait is missing")
	}
	n, maxWait := int64(*d.Tokens), time.Duration(*d.MaxWait)
	return func(ctx context.Context, e *env) ([]any, error) {
		before := e.clock.Slept()
		err := e.blocking.WaitN(ctx, n, maxWait)
		var mw *sluice.MaxWaitError
		if errors.As(err, &mw) { // Bucket4j's tryConsume(n, maxWait) returns false
			return []any{false, int64(e.clock.Slept() - before)}, nil
		}
		return []any{err == nil, int64(e.clock.Slept() - before)}, err
	}, nil
}

// decodeWant decodes a want into the values it compares: a bare value for a
// scalar result, else an object of some of the result's fields. A field the
// operation does not return is an error rather than ignored, so that a
// misspelt expectation cannot pass unchecked.
func decodeWant(raw json.RawMessage, returns []field) ([]expect, error) {
	switch {
	case len(returns) == 0:
		return nil, errors.New("the operation returns nothing to compare")
	case returns[0].name == "":
		v, err := decodeValue(raw, returns[0])
		if err != nil {
			return nil, err
		}
		return []expect{{0, v}}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("want an object with some of the fields %s, got %s", fieldNames(returns), raw)
	}
	var want []expect
	for name, raw := range obj {
		i := slices.IndexFunc(returns, func(f field) bool { return f.name == name })
		if i < 0 {
			return nil, fmt.Errorf("%q is not one of the fields %s", name, fieldNames(returns))
		}
		v, err := decodeValue(raw, returns[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		want = append(want, expect{i, v})
	}
	slices.SortFunc(want, func(a, b expect) int { return a.field - b.field })
	return want, nil
}

func decodeValue(raw json.RawMessage, f field) (any, error) {
	switch f.kind {
	case boolean:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil || !present(raw) {
			return nil, fmt.Errorf("%s is not true or false", raw)
		}
		return b, nil
	case text:
		var v string
		if err := json.Unmarshal(raw, &v); err != nil || !slices.Contains(f.values, v) {
			return nil, fmt.Errorf("%s is none of %s", raw, strings.Join(f.values, ", "))
		}
		return v, nil
	}
	var n integer
	if err := n.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	return int64(n), nil
}

func fieldNames(fs []field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// check runs s and returns what went wrong, or nil. The failure's file,
// case and step are left for the caller to fill in.
func (s *step) check(ctx context.Context, e *env) *Failure {
	got, err := s.run(ctx, e)
	switch {
	case s.wantErr != "" && err == nil:
		gotStr := "no error"
		if len(got) > 0 {
			gotStr += ", " + format(s.returns, got, nil)
		}
		f := &Failure{Want: "error " + s.wantErr, Got: gotStr}
		if s.wantErr == "invalid_interval" {
			f.Msg = invalidInterval
		}
		return f
	case s.wantErr != "":
		if code := errorCode(err); code != s.wantErr {
			return &Failure{Want: "error " + s.wantErr, Got: describeError(err)}
		}
		return nil
	case err != nil:
		want := "no error"
		if s.want != nil {
			want = s.formatWant()
		}
		return &Failure{Want: want, Got: describeError(err)}
	}
	for _, w := range s.want {
		if got[w.field] != w.value {
			return &Failure{Want: s.formatWant(), Got: format(s.returns, got, nil)}
		}
	}
	return nil
}

func (s *step) formatWant() string {
	values := make([]any, len(s.returns))
	only := make([]bool, len(s.returns))
	for _, w := range s.want {
		values[w.field], only[w.field] = w.value, true
	}
	return format(s.returns, values, only)
}

// format writes values of the shape returns as they are written in a
// vector: a bare value, or an object of the fields where only is true (all
// of them when only is nil).
func format(returns []field, values []any, only []bool) string {
	if len(returns) == 1 && returns[0].name == "" {
		return formatValue(values[0])
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range returns {
		if only != nil && !only[i] {
			continue
		}
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s", f.name, formatValue(values[i]))
	}
	b.WriteByte('}')
	return b.String()
}

func formatValue(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case bool:
		return strconv.FormatBool(v)
	case string:
		return strconv.Quote(v)
	}
	return fmt.Sprint(v)
}

func describeError(err error) string {
	if code := errorCode(err); code != "" {
		return fmt.Sprintf("error %s (%v)", code, err)
	}
	return fmt.Sprintf("error (%v)", err)
}
