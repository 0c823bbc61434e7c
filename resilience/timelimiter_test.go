package resilience

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// fakeTimer is a timerFunc whose timers fire when the test says so.
type fakeTimer struct {
	started chan time.Duration // receives the duration of every timer started
	fire    chan time.Time     // the channel every timer returns
	stopped chan struct{}      // closed by the first Stop
	once    sync.Once
}

func newFakeTimer() *fakeTimer {
	return &fakeTimer{started: make(chan time.Duration, 1), fire: make(chan time.Time), stopped: make(chan struct{})}
}

func (f *fakeTimer) newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.started <- d
	return f.fire, func() bool { f.once.Do(func() { close(f.stopped) }); return true }
}

func newTestLimiter(t *testing.T, cfg TimeLimiterConfig) (*TimeLimiter, *fakeTimer) {
	t.Helper()
	ft := newFakeTimer()
	l, err := NewTimeLimiter(cfg, WithTimer(ft.newTimer))
	if err != nil {
		t.Fatalf("NewTimeLimiter(%+v) = %v", cfg, err)
	}
	return l, ft
}

func TestWithTimerNilKeepsDefault(t *testing.T) {
	l, err := NewTimeLimiter(TimeLimiterConfig{Timeout: time.Minute}, WithTimer(nil))
	if err != nil {
		t.Fatalf("NewTimeLimiter(WithTimer(nil)) = %v", err)
	}
	if l.newTimer == nil {
		t.Fatal("NewTimeLimiter(WithTimer(nil)) has no timer, want time.NewTimer")
	}
	v, err := Call(context.Background(), l, func(context.Context) (int, error) { return 5, nil })
	if v != 5 || err != nil {
		t.Errorf("Call = %d, %v; want 5, nil", v, err)
	}
}

func TestCallReturnsInTime(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		cancel  bool
		v       int
		err     error
		wantV   int
		wantErr error
	}{
		{"value", true, 42, nil, 42, nil},
		{"error as is", true, 0, errBoom, 0, errBoom},
		{"value without cancel-running", false, 7, nil, 7, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ft := newTestLimiter(t, TimeLimiterConfig{Timeout: time.Second, CancelRunning: tt.cancel})
			var runCtx context.Context
			v, err := Call(context.Background(), l, func(ctx context.Context) (int, error) {
				runCtx = ctx
				return tt.v, tt.err
			})
			if v != tt.wantV || err != tt.wantErr {
				t.Errorf("Call = %d, %v; want %d, %v", v, err, tt.wantV, tt.wantErr)
			}
			if d := <-ft.started; d != time.Second {
				t.Errorf("timer started for %v, want 1s", d)
			}
			<-ft.stopped
			if cause := context.Cause(runCtx); cause != nil && errors.Is(cause, ErrTimeout) {
				t.Errorf("fn's context cause = %v, want no timeout", cause)
			}
		})
	}
}

// timeOut runs a Call whose fn blocks until its context is done or release
// is closed, fires the timer, and checks the *TimeoutError. fn reports its
// context's cause on fnDone when it returns.
func timeOut(t *testing.T, cancelRunning bool) (release chan struct{}, fnDone chan error, te *TimeoutError) {
	t.Helper()
	l, ft := newTestLimiter(t, TimeLimiterConfig{Timeout: 2 * time.Second, CancelRunning: cancelRunning})
	release, fnDone = make(chan struct{}), make(chan error, 1)
	go func() { <-ft.started; ft.fire <- time.Time{} }()
	v, err := Call(context.Background(), l, func(ctx context.Context) (string, error) {
		select {
		case <-ctx.Done():
			fnDone <- context.Cause(ctx)
		case <-release:
			fnDone <- nil
		}
		return "late", nil
	})
	if v != "" || !errors.As(err, &te) || !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %q, %v; want \"\", a *TimeoutError", v, err)
	}
	if te.Timeout != 2*time.Second || te.Cancelled != cancelRunning {
		t.Errorf("TimeoutError = %+v, want Timeout 2s, Cancelled %v", te, cancelRunning)
	}
	if got, want := err.Error(), "resilience: call timed out after 2s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	return release, fnDone, te
}

func TestCallTimesOutCancelRunning(t *testing.T) {
	release, fnDone, te := timeOut(t, true)
	defer close(release)
	if cause := <-fnDone; cause != error(te) {
		t.Errorf("fn's context cause = %v, want the *TimeoutError", cause)
	}
}

func TestCallTimesOutKeepRunning(t *testing.T) {
	release, fnDone, _ := timeOut(t, false)
	close(release)
	if cause := <-fnDone; cause != nil {
		t.Errorf("fn's context was cancelled (%v), want it left running", cause)
	}
}

func TestCallCallerContext(t *testing.T) {
	l, ft := newTestLimiter(t, TimeLimiterConfig{Timeout: time.Hour, CancelRunning: true})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-ft.started; cancel() }()
	_, err := Call(ctx, l, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Call with a cancelled caller = %v, want context.Canceled", err)
	}

	ran := false
	_, err = Call(ctx, l, func(ctx context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Call with a done context = %v, ran %v; want context.Canceled without running", err, ran)
	}
}

// TestCallZeroTimeout: with no time at all, a function that returns
// without waiting has its result returned, as Resilience4j returns an
// already completed future's; one that waits for its context times out.
func TestCallZeroTimeout(t *testing.T) {
	for _, cancelRunning := range []bool{false, true} {
		l, _ := newTestLimiter(t, TimeLimiterConfig{CancelRunning: cancelRunning})
		v, err := Call(context.Background(), l, func(context.Context) (int, error) { return 42, nil })
		if v != 42 || err != nil {
			t.Errorf("CancelRunning %v: Call of a function done at once = %d, %v; want 42, nil", cancelRunning, v, err)
		}
		failed := errors.New("failed")
		if err := l.Do(context.Background(), func(context.Context) error { return failed }); err != failed {
			t.Errorf("CancelRunning %v: Do of a function failing at once = %v, want its error", cancelRunning, err)
		}
		_, err = Call(context.Background(), l, func(ctx context.Context) (int, error) {
			<-ctx.Done() // a call that would wait
			return 0, ctx.Err()
		})
		var te *TimeoutError
		if !errors.As(err, &te) || te.Timeout != 0 || !te.Cancelled {
			t.Errorf("CancelRunning %v: Call of a waiting function = %v, want a *TimeoutError, cancelled", cancelRunning, err)
		}
	}
}

func TestCallPanicReachesCaller(t *testing.T) {
	l, _ := newTestLimiter(t, TimeLimiterConfig{Timeout: time.Hour})
	defer func() {
		if r := recover(); r != "oops" {
			t.Errorf("recovered %v, want \"oops\"", r)
		}
	}()
	_, _ = Call(context.Background(), l, func(context.Context) (int, error) { panic("oops") })
	t.Error("Call returned, want a panic")
}

func TestNegativeTimeout(t *testing.T) {
	_, err := NewTimeLimiter(TimeLimiterConfig{Timeout: -1})
	var ce *sluice.ConfigError
	if !errors.As(err, &ce) || ce.Rule != RuleNegativeTimeout || !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Errorf("NewTimeLimiter(-1ns) = %v, want a *sluice.ConfigError", err)
	}
	ran := false
	_, err = TimeLimit(context.Background(), -time.Second, func(context.Context) (int, error) { ran = true; return 0, nil })
	var ae *sluice.ArgumentError
	if !errors.As(err, &ae) || !errors.Is(err, sluice.ErrInvalidArgument) || ran {
		t.Errorf("TimeLimit(-1s) = %v, ran %v; want an *sluice.ArgumentError without running", err, ran)
	}
}

// TestTimeLimitRealTimer is the only test on the real timer; it waits a few
// milliseconds.
func TestTimeLimitRealTimer(t *testing.T) {
	v, err := TimeLimit(context.Background(), time.Minute, func(context.Context) (int, error) { return 3, nil })
	if v != 3 || err != nil {
		t.Errorf("TimeLimit(fast) = %d, %v; want 3, nil", v, err)
	}
	start := time.Now()
	_, err = TimeLimit(context.Background(), 5*time.Millisecond, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("TimeLimit(slow) = %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el < 5*time.Millisecond {
		t.Errorf("TimeLimit(slow) returned after %v, before its 5ms timeout", el)
	}
}

func TestConcurrentCalls(t *testing.T) {
	l, err := NewTimeLimiter(DefaultTimeLimiterConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			v, err := Call(context.Background(), l, func(context.Context) (int, error) { return i, nil })
			if v != i || err != nil {
				t.Errorf("Call = %d, %v; want %d, nil", v, err, i)
			}
		})
	}
	wg.Wait()
}
