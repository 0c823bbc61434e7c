package timing

import (
	"context"
	"errors"
	"testing"
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
