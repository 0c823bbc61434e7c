package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// ErrTimeout is matched (errors.Is) by every *TimeoutError.
var ErrTimeout = errors.New("resilience: time limit exceeded")

// TimeoutError is returned to the caller of a call that ran past its time
// limit. It matches ErrTimeout and context.DeadlineExceeded.
//
// The call may still be running, and whatever it did or goes on to do
// stands: a timeout undoes nothing.
type TimeoutError struct {
	// Timeout is the limit the call ran past.
	Timeout time.Duration
	// Cancelled reports whether the call's context was cancelled
	// (TimeLimiterConfig.CancelRunning).
	Cancelled bool
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("resilience: call timed out after %v", e.Timeout)
}

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// TimeLimiterConfig configures a TimeLimiter. The zero value is valid but
// times every call out at once; DefaultTimeLimiterConfig returns
// Resilience4j's defaults.
type TimeLimiterConfig struct {
	// Timeout is how long a call may run, ≥ 0, in nanoseconds (Resilience4j
	// truncates it to whole milliseconds; sluice does not). With 0 only a
	// function that returns without waiting has its result returned, as
	// Resilience4j returns the result of a future that is already done;
	// see Call.
	Timeout time.Duration
	// CancelRunning cancels the function's context when it times out, with
	// the *TimeoutError as the context's cause. The zero value, false,
	// leaves it running with its caller's context; Resilience4j's default
	// is true.
	CancelRunning bool
}

// DefaultTimeLimiterConfig returns Resilience4j's defaults: a 1s timeout,
// cancelling the running call.
func DefaultTimeLimiterConfig() TimeLimiterConfig {
	return TimeLimiterConfig{Timeout: time.Second, CancelRunning: true}
}

// timerFunc starts a timer of d and returns its channel and its Stop. It is
// the seam through which tests control time (WithTimer).
type timerFunc func(d time.Duration) (<-chan time.Time, func() bool)

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// TimeLimiter runs functions with a time limit: Resilience4j's TimeLimiter
// for Go functions instead of futures. Use it through Call and Do.
//
// Timing out a call does not undo it. A function that wrote something
// (sent a payment, inserted a row) may have done so, or may do so after
// the caller was told it timed out; cancelling its context only asks it to
// stop. Make writes idempotent, or check their outcome, before retrying
// after a timeout.
//
// TimeLimiter is safe for simultaneous use by multiple goroutines. Make one
// with NewTimeLimiter.
type TimeLimiter struct {
	cfg      TimeLimiterConfig
	newTimer timerFunc
}

// TimeLimiterOption configures NewTimeLimiter.
type TimeLimiterOption func(*TimeLimiter)

// WithTimer sets the timer a TimeLimiter waits on for a call's timeout:
// newTimer(d) starts a timer of d and returns the channel on which it
// fires and a function that stops it, as time.NewTimer's C and Stop do.
// The default is time.NewTimer; nil keeps the default.
//
// It is meant for tests: a timer that fires on a fake clock, when the
// test's simulated call has run for d, makes the outcome of every call
// deterministic without waiting.
func WithTimer(newTimer func(d time.Duration) (<-chan time.Time, func() bool)) TimeLimiterOption {
	return func(l *TimeLimiter) {
		if newTimer != nil {
			l.newTimer = newTimer
		}
	}
}

// NewTimeLimiter returns a time limiter with the configuration cfg. It
// returns a *sluice.ConfigError (errors.Is sluice.ErrInvalidConfig) for a
// negative Timeout, which Resilience4j accepts and treats as 0.
func NewTimeLimiter(cfg TimeLimiterConfig, opts ...TimeLimiterOption) (*TimeLimiter, error) {
	if cfg.Timeout < 0 {
		return nil, &sluice.ConfigError{Rule: RuleNegativeTimeout, Bandwidth: -1,
			Field: "Timeout", Value: cfg.Timeout.String(), Msg: "must not be negative"}
	}
	l := &TimeLimiter{cfg: cfg, newTimer: realTimer}
	for _, opt := range opts {
		opt(l)
	}
	return l, nil
}

// Config returns the limiter's configuration.
func (l *TimeLimiter) Config() TimeLimiterConfig { return l.cfg }

// Do is Call for a function that returns only an error.
func (l *TimeLimiter) Do(ctx context.Context, fn func(context.Context) error) error {
	_, err := Call(ctx, l, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	return err
}

// Call runs fn in a new goroutine and waits for it for at most l's
// timeout. If fn returns in time, Call returns its result and error as
// they are. Otherwise, after exactly the timeout, Call returns a
// *TimeoutError, cancelling fn's context first when CancelRunning is set;
// fn's late result is discarded. A call that finishes just as the timer
// fires may return its result instead.
//
// Timing out does not undo what fn did or goes on to do; see TimeLimiter.
//
// When ctx ends first, Call returns ctx.Err() (fn's context, derived from
// ctx, is cancelled too). When ctx is already done, Call returns ctx.Err()
// without running fn. A panic in fn is raised again in the caller while it
// waits, and after that crashes the program as any goroutine's panic does.
//
// With a zero timeout there is no time to wait for fn, and no time to
// leave it running either: fn runs in the caller's goroutine with a
// context that is already done, its cause the *TimeoutError, whatever
// CancelRunning says. A function that returns without waiting has its
// result returned, as Resilience4j returns the result of a future that
// was already done; one that returns its context's error gets the
// *TimeoutError (Cancelled true). A function that ignores its context
// runs to its end.
func Call[T any](ctx context.Context, l *TimeLimiter, fn func(context.Context) (T, error)) (T, error) {
	return call(ctx, l.cfg.Timeout, l.cfg.CancelRunning, l.newTimer, fn)
}

// TimeLimit runs fn with a time limit of timeout, cancelling fn's context
// when it runs past it: Call with a TimeLimiter of that timeout and
// CancelRunning set. It returns an *sluice.ArgumentError for a negative
// timeout, without running fn.
//
// Timing out does not undo what fn did or goes on to do; see TimeLimiter.
func TimeLimit[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	if timeout < 0 {
		var zero T
		return zero, &sluice.ArgumentError{Op: "resilience.TimeLimit", Arg: "timeout", Value: timeout, Want: "must not be negative"}
	}
	return call(ctx, timeout, true, realTimer, fn)
}

// outcome is what fn's goroutine hands back.
type outcome[T any] struct {
	v        T
	err      error
	panicked bool
	panicVal any
}

func (o outcome[T]) result() (T, error) {
	if o.panicked {
		panic(o.panicVal)
	}
	return o.v, o.err
}

// handoff passes fn's outcome to the caller unless the caller has gone.
type handoff[T any] struct {
	mu        sync.Mutex
	abandoned bool            // the caller returned without the outcome
	done      chan outcome[T] // capacity 1, so the goroutine never blocks
}

// deliver hands o to the caller and reports whether the caller will get it.
func (h *handoff[T]) deliver(o outcome[T]) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.abandoned {
		return false
	}
	h.done <- o
	return true
}

// abandon marks the caller gone and returns an outcome delivered before
// that, if there is one.
func (h *handoff[T]) abandon() (outcome[T], bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.abandoned = true
	select {
	case o := <-h.done:
		return o, true
	default:
		return outcome[T]{}, false
	}
}

func call[T any](ctx context.Context, timeout time.Duration, cancelRunning bool, newTimer timerFunc, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if timeout == 0 {
		return callNow(ctx, fn)
	}
	runCtx, cancel := ctx, context.CancelCauseFunc(func(error) {})
	if cancelRunning {
		runCtx, cancel = context.WithCancelCause(ctx)
	}
	h := &handoff[T]{done: make(chan outcome[T], 1)}
	go func() {
		var o outcome[T]
		returned := false
		defer func() {
			if !returned {
				o.panicked, o.panicVal = true, recover()
			}
			if !h.deliver(o) && o.panicked {
				panic(o.panicVal)
			}
		}()
		o.v, o.err = fn(runCtx)
		returned = true
	}()
	timer, stop := newTimer(timeout)
	select {
	case o := <-h.done:
		stop()
		cancel(nil)
		return o.result()
	case <-timer:
		if o, ok := h.abandon(); ok {
			cancel(nil)
			return o.result()
		}
		terr := &TimeoutError{Timeout: timeout, Cancelled: cancelRunning}
		cancel(terr)
		return zero, terr
	case <-ctx.Done():
		stop()
		if o, ok := h.abandon(); ok {
			cancel(nil)
			return o.result()
		}
		cancel(nil)
		return zero, ctx.Err()
	}
}

// callNow is call with a zero timeout: fn gets a context that is already
// done, and its result counts unless it is that context's error.
func callNow[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	terr := &TimeoutError{Timeout: 0, Cancelled: true}
	runCtx, cancel := context.WithCancelCause(ctx)
	cancel(terr)
	v, err := fn(runCtx)
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout)) {
		var zero T
		return zero, terr
	}
	return v, err
}
