package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/sluicetest"
)

// limiterOps are the operations of keyed limiters. Every step acts on
// limiterKey.
var limiterOps = opTable{of: "a limiter", ops: map[string]opSpec{
	"consume": {
		returns: []field{flag("accepted"), num("remaining"), num("retry_after"), num("limit"), num("reset_after")},
		bind: withCount("tokens", 1, func(ctx context.Context, e *env, n int64) ([]any, error) {
			r, err := e.limiter.AllowN(ctx, limiterKey, n)
			return []any{r.Allowed, r.Remaining, int64(r.RetryAfter), r.Limit, int64(r.ResetAfter)}, err
		}),
	},
	"reserve": {returns: []field{num("wait")}, bind: bindLimiterReserve},
	"acquire": {
		returns: []field{flag("accepted"), num("remaining"), num("retry_after"), num("limit"), num("expires_in")},
		slots:   true,
		bind:    bindAcquire,
	},
	"release": {returns: []field{flag("held"), num("remaining")}, slots: true, bind: bindSlotOp(false)},
	"renew":   {returns: []field{flag("held"), num("remaining"), num("expires_in")}, slots: true, bind: bindSlotOp(true)},
	"reset": {bind: func(*stepDoc) (call, error) {
		return func(ctx context.Context, e *env) ([]any, error) {
			return nil, e.limiter.Reset(ctx, limiterKey)
		}, nil
	}},
	"charge": {
		returns: []field{flag("accepted"), num("remaining"), num("retry_after"), num("debt")},
		debts:   true,
		bind: withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
			c, err := e.debts.Charge(ctx, limiterKey, n)
			return []any{c.Allowed, c.Remaining, int64(c.RetryAfter), c.Debt}, debtError(err)
		}),
	},
	"hold":   {returns: []field{flag("accepted"), num("remaining"), num("debt")}, debts: true, bind: bindHold},
	"settle": {returns: []field{flag("settled"), num("remaining"), num("retry_after"), num("debt")}, debts: true, bind: bindSettle},
	"debt": {
		returns: []field{num("debt"), num("remaining"), num("retry_after")},
		debts:   true,
		bind: func(*stepDoc) (call, error) {
			return func(ctx context.Context, e *env) ([]any, error) {
				c, err := e.debts.Debt(ctx, limiterKey)
				return []any{c.Debt, c.Remaining, int64(c.RetryAfter)}, debtError(err)
			}, nil
		},
	},
}}

// debtUnsupported is the error of a debt operation on a policy that
// cannot owe tokens: the want_error debt_not_supported.
type debtUnsupported struct{ error }

func (e debtUnsupported) Unwrap() error { return e.error }

// debtError marks err, a debt operation's error, as debtUnsupported when
// it matches errors.ErrUnsupported.
func debtError(err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return debtUnsupported{err}
	}
	return err
}

// bindHold binds a hold of tokens for ttl (required); an accepted hold's
// ID is the case's next, which settle names by its index.
func bindHold(d *stepDoc) (call, error) {
	if d.TTL == nil {
		return nil, errors.New("ttl is missing")
	}
	ttl := time.Duration(*d.TTL)
	return withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		c, err := e.debts.Hold(ctx, limiterKey, n, ttl)
		if err == nil && c.Allowed {
			e.holds = append(e.holds, c.ID)
		}
		return []any{c.Allowed, c.Remaining, c.Debt}, debtError(err)
	})(d)
}

// bindSettle binds a settlement of the case's hold number hold (from 0,
// counting accepted holds) at the cost tokens (0 allowed).
func bindSettle(d *stepDoc) (call, error) {
	switch {
	case d.Hold == nil:
		return nil, errors.New("hold is missing")
	case *d.Hold < 0:
		return nil, fmt.Errorf("hold %d is negative", *d.Hold)
	case d.Tokens == nil:
		return nil, errors.New("tokens is missing")
	}
	i, n := int(*d.Hold), int64(*d.Tokens)
	return func(ctx context.Context, e *env) ([]any, error) {
		if i >= len(e.holds) {
			return nil, fmt.Errorf("conformance: settle of hold %d, but the case has %d", i, len(e.holds))
		}
		c, err := e.debts.Settle(ctx, e.holds[i], n)
		return []any{c.Settled, c.Remaining, int64(c.RetryAfter), c.Debt}, debtError(err)
	}, nil
}

// bindLimiterReserve binds a limiter's reserve: an absent max_wait is no
// bound (sluice.Never), and a reservation that is not OK is the error
// max_wait_exceeded.
func bindLimiterReserve(d *stepDoc) (call, error) {
	maxWait := sluice.Never
	if d.MaxWait != nil {
		maxWait = time.Duration(*d.MaxWait)
	}
	return withTokens(func(ctx context.Context, e *env, n int64) ([]any, error) {
		r, err := e.limiter.ReserveN(ctx, limiterKey, n, maxWait)
		switch {
		case err != nil:
			return []any{int64(0)}, err
		case !r.OK():
			return []any{int64(0)}, &sluice.MaxWaitError{Tokens: n, Wait: r.Result().RetryAfter, MaxWait: maxWait}
		}
		return []any{int64(r.Delay())}, nil
	})(d)
}

// bindAcquire binds a slot's acquisition: ttl absent is the lease,
// max_wait absent is 0, and slot names the slot for the steps that
// release or renew it. expires_in is the time from the call's end until
// the slot lapses, 0 when none was acquired.
func bindAcquire(d *stepDoc) (call, error) {
	var ttl, maxWait time.Duration
	if d.TTL != nil {
		ttl = time.Duration(*d.TTL)
	}
	if d.MaxWait != nil {
		maxWait = time.Duration(*d.MaxWait)
	}
	name := ""
	if d.Slot != nil {
		name = *d.Slot
	}
	return func(ctx context.Context, e *env) ([]any, error) {
		s, err := e.slots.Acquire(ctx, limiterKey, ttl, maxWait)
		if err == nil && s.Allowed && name != "" {
			e.held[name] = s
		}
		return []any{s.Allowed, s.Remaining, int64(s.RetryAfter), s.Limit, expiresIn(e, s)}, err
	}, nil
}

// expiresIn is the time from now on e's clock until s lapses, 0 when
// it is not held.
func expiresIn(e *env, s sluice.Slot) int64 {
	if !s.Allowed || s.Expires.IsZero() {
		return 0
	}
	return s.Expires.UnixNano() - e.clock.Now()
}

// bindSlotOp binds the release (renew false) or renewal of the slot a
// step names, which an earlier acquire step must have named; a renewal's
// ttl absent is the one the slot was acquired with.
func bindSlotOp(renew bool) func(*stepDoc) (call, error) {
	return func(d *stepDoc) (call, error) {
		if d.Slot == nil {
			return nil, errors.New("slot is missing")
		}
		name := *d.Slot
		var ttl time.Duration
		if d.TTL != nil {
			ttl = time.Duration(*d.TTL)
		}
		return func(ctx context.Context, e *env) ([]any, error) {
			s, ok := e.held[name]
			if !ok {
				return nil, fmt.Errorf("conformance: no slot %q was acquired before", name)
			}
			if !renew {
				r, err := e.slots.Release(ctx, s)
				return []any{r.Allowed, r.Remaining}, err
			}
			if ttl != 0 {
				s.TTL = ttl
			}
			r, err := e.slots.Renew(ctx, s)
			if err == nil && r.Allowed {
				e.held[name] = r
			}
			return []any{r.Allowed, r.Remaining, expiresIn(e, r)}, err
		}, nil
	}
}

// rateLimiterOps are the operations of the resilience4j policy. acquire
// sleeps on the case's fake clock, which records what it waited.
var rateLimiterOps = opTable{of: "a resilience4j limiter", ops: map[string]opSpec{
	"acquire": {
		returns: []field{flag("acquired"), num("waited")},
		bind: withCount("permits", 1, func(ctx context.Context, e *env, n int64) ([]any, error) {
			before := e.clock.Slept()
			ok, err := e.rate.AcquirePermission(ctx, n)
			return []any{ok, int64(e.clock.Slept() - before)}, err
		}),
	},
	"reserve": {
		returns: []field{num("wait")},
		bind: withCount("permits", 0, func(_ context.Context, e *env, n int64) ([]any, error) {
			w, err := e.rate.ReservePermission(n)
			return []any{int64(w)}, err
		}),
	},
	"available": {returns: scalarNumber, bind: func(*stepDoc) (call, error) {
		return func(_ context.Context, e *env) ([]any, error) {
			return []any{e.rate.AvailablePermissions()}, nil
		}, nil
	}},
	"nanos_to_wait": {returns: scalarNumber, bind: func(*stepDoc) (call, error) {
		return func(_ context.Context, e *env) ([]any, error) {
			return []any{int64(e.rate.NanosToWait())}, nil
		}, nil
	}},
	"drain": {bind: func(*stepDoc) (call, error) {
		return func(_ context.Context, e *env) ([]any, error) { e.rate.Drain(); return nil, nil }, nil
	}},
	"change_limit_for_period": {bind: func(d *stepDoc) (call, error) {
		if d.Limit == nil {
			return nil, errors.New("limit is missing")
		}
		n := int64(*d.Limit)
		return func(_ context.Context, e *env) ([]any, error) {
			return nil, e.rate.ChangeLimitForPeriod(n)
		}, nil
	}},
	"change_timeout": {bind: func(d *stepDoc) (call, error) {
		if d.Timeout == nil {
			return nil, errors.New("timeout is missing")
		}
		t := time.Duration(*d.Timeout)
		return func(_ context.Context, e *env) ([]any, error) {
			return nil, e.rate.ChangeTimeout(t)
		}, nil
	}},
}}

// smoothOps are the operations of the smooth policies. Both sleep on the
// case's fake clock, which records what they waited.
var smoothOps = opTable{of: "a smooth limiter", ops: map[string]opSpec{
	"acquire": {
		returns: []field{num("waited")},
		bind: withCount("permits", 1, func(ctx context.Context, e *env, n int64) ([]any, error) {
			before := e.clock.Slept()
			d, err := e.smooth.Acquire(ctx, n)
			slept := e.clock.Slept() - before
			if err == nil && d != slept {
				err = fmt.Errorf("conformance: smooth acquire returned %v but slept %v", d, slept)
			}
			return []any{int64(slept)}, err
		}),
	},
	"try_acquire": {returns: scalarBool, bind: func(d *stepDoc) (call, error) {
		if d.Timeout == nil {
			return nil, errors.New("timeout is missing")
		}
		timeout := time.Duration(*d.Timeout)
		return withCount("permits", 0, func(ctx context.Context, e *env, n int64) ([]any, error) {
			ok, err := e.smooth.TryAcquire(ctx, n, timeout)
			return []any{ok}, err
		})(d)
	}},
}}

// timeLimiterOps are the operations of the time_limiter policy.
var timeLimiterOps = opTable{of: "a time_limiter", ops: map[string]opSpec{
	"call": {
		returns: []field{oneOf("result", "success", "timeout", "error"), num("waited"), flag("cancelled")},
		bind:    bindCall,
	},
}}

func bindCall(d *stepDoc) (call, error) {
	switch {
	case d.Task == nil:
		return nil, errors.New("task is missing")
	case *d.Task < 0:
		return nil, fmt.Errorf("task %v is negative", time.Duration(*d.Task))
	case d.Outcome == nil:
		return nil, errors.New("outcome is missing")
	case *d.Outcome != "value" && *d.Outcome != "error":
		return nil, fmt.Errorf("outcome %q is neither value nor error", *d.Outcome)
	}
	task, fails := time.Duration(*d.Task), *d.Outcome == "error"
	return func(ctx context.Context, e *env) ([]any, error) {
		return e.timeLimit.call(ctx, e.clock, task, fails)
	}, nil
}

// errTask is the error of a simulated call whose outcome is "error".
var errTask = errors.New("conformance: the call failed")

// timeLimit is a case's time limiter, whose timer fires on the case's fake
// clock: a call is simulated by a function that runs for its task's
// duration on the fake clock, or, when that is longer than the timeout,
// runs until the timeout, fires the timer and then waits to be cancelled
// or abandoned. So every call's outcome is decided by the durations alone,
// whatever the scheduler does: a task of at most the timeout succeeds
// (or fails) after its duration, a longer one times out after exactly the
// timeout.
type timeLimit struct {
	l *resilience.TimeLimiter
	// fire is the current call's timer channel. Calls of a case run one at
	// a time; the call sets it before Call starts the timer.
	fire chan time.Time
}

// newTimer is the time limiter's timer: resilience.WithTimer(newTimer).
func (t *timeLimit) newTimer(time.Duration) (<-chan time.Time, func() bool) {
	return t.fire, func() bool { return true }
}

// call runs one simulated call of task on clock, failing when fails, and
// returns the result ("success", "timeout" or "error"), the fake time the
// caller waited and whether the task's context was cancelled while it
// ran. A task of 0 returns without waiting on anything, as a future that
// is already done; a task cut short by its context returns the context's
// error, as a call that heeds it does.
func (t *timeLimit) call(ctx context.Context, clock *sluicetest.FakeClock, task time.Duration, fails bool) ([]any, error) {
	timeout := t.l.Config().Timeout
	fire := make(chan time.Time, 1)
	t.fire = fire
	release := make(chan struct{}) // closed once Call has returned
	cancelled := make(chan bool, 1)
	var fired atomic.Bool
	start := clock.Now()
	_, err := resilience.Call(ctx, t.l, func(ctx context.Context) (struct{}, error) {
		if task <= timeout {
			if task == 0 {
				if fails {
					return struct{}{}, errTask
				}
				return struct{}{}, nil
			}
			if err := clock.Sleep(ctx, task); err != nil {
				return struct{}{}, err
			}
			if fails {
				return struct{}{}, errTask
			}
			return struct{}{}, nil
		}
		_ = clock.Sleep(ctx, timeout)
		fired.Store(true)
		fire <- time.Time{}
		select {
		case <-ctx.Done():
		case <-release:
		}
		// Call cancels ctx, if it does, before it returns.
		cancelled <- ctx.Err() != nil
		return struct{}{}, ctx.Err()
	})
	waited := clock.Now() - start
	close(release)
	result := "success"
	switch {
	case err == nil:
	case errors.Is(err, errTask):
		result = "error"
	case errors.Is(err, resilience.ErrTimeout):
		result = "timeout"
	default:
		return nil, err
	}
	wasCancelled := false
	if result == "timeout" && fired.Load() {
		wasCancelled = <-cancelled
	}
	return []any{result, waited, wasCancelled}, nil
}
