package timing

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestExpiring(t *testing.T) {
	ctx, expire := Expiring(context.Background())
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if ctx.Err() != nil || child.Err() != nil {
		t.Fatalf("Err before expire = %v, %v; want nil", ctx.Err(), child.Err())
	}
	expire()
	<-child.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Errorf("Err after expire = %v, child %v; want context.DeadlineExceeded", ctx.Err(), child.Err())
	}
	expire() // again: nothing

	parent, cancelParent := context.WithCancel(context.Background())
	ctx, expire = Expiring(parent)
	cancelParent()
	<-ctx.Done()
	expire()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("Err after the parent's cancel = %v, want context.Canceled", ctx.Err())
	}
}

// recorder is a testing.TB that notes what AtMost reports.
type recorder struct {
	testing.TB
	errors, logs int
}

func (*recorder) Helper()                 {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }
func (r *recorder) Logf(string, ...any)   { r.logs++ }

func TestAtMost(t *testing.T) {
	for _, tt := range []struct {
		env        string
		got        time.Duration
		wantErrors int
	}{
		{"", time.Second, 0},
		{"", time.Millisecond, 0},
		{"1", time.Second, 1},
		{"1", time.Millisecond, 0},
		{"0", time.Second, 0},
	} {
		t.Setenv(Env, tt.env)
		r := new(recorder)
		AtMost(r, "x", tt.got, 10*time.Millisecond)
		if r.errors != tt.wantErrors || r.errors+r.logs != 1 {
			t.Errorf("%s=%q: AtMost(%v, at most 10ms) reported %d errors and %d logs, want %d errors or else a log",
				Env, tt.env, tt.got, r.errors, r.logs, tt.wantErrors)
		}
	}
}
