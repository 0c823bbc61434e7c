package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// keyBuckets returns a KeyBucket of a bucket of 10 tokens refilled 10 a
// second on clock: an in-memory Limiter's key, a stored Limiter's key, and
// the key of a stored Limiter with a policy per key.
func keyBuckets(t *testing.T, clock *sluicetest.FakeClock) map[string]*sluice.KeyBucket {
	t.Helper()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(10, time.Second)}}
	out := map[string]*sluice.KeyBucket{}
	for _, where := range []string{"memory", "limiter store", "policy per key"} {
		opts := []sluice.Option{sluice.WithClock(clock)}
		if where != "memory" {
			opts = append(opts, sluice.WithStore(newMapStore()))
		}
		if where == "policy per key" {
			opts = append(opts, sluice.WithPolicyFor(func(context.Context, string) (sluice.Policy, error) { return nil, nil }))
		}
		l, err := sluice.NewLimiter(sluice.BucketPolicy(cfg), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if out[where], err = l.Bucket("k"); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFamilyShorthands: X is XN with one token, on Bucket, KeyBucket and
// Limiter alike: two twins given the same calls, one through X and one
// through XN(1), answer the same.
func TestFamilyShorthands(t *testing.T) {
	ctx := context.Background()
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(3, time.Second)}}
	clock := sluicetest.NewFakeClock(t0)
	x := newBucket(t, clock, cfg.Bandwidths)
	xn := newBucket(t, clock, cfg.Bandwidths)
	for i := range 5 {
		got := fmt.Sprint(x.Peek(), x.Allow())
		p, perr := xn.PeekN(1)
		a, aerr := xn.AllowN(1)
		if want := fmt.Sprint(p, a); got != want || perr != nil || aerr != nil {
			t.Errorf("Bucket call %d: Peek, Allow = %s; PeekN(1), AllowN(1) = %s, %v, %v", i, got, want, perr, aerr)
		}
	}
	r, _ := x.Reserve(time.Second)
	rn, _ := xn.ReserveN(1, time.Second)
	if !sameReservation(r, rn) {
		t.Errorf("Bucket: Reserve = %+v, ReserveN(1) = %+v", r, rn)
	}
	if err, errN := x.Wait(ctx, time.Second), xn.WaitN(ctx, 1, time.Second); err != nil || errN != nil {
		t.Errorf("Bucket: Wait = %v, WaitN(1) = %v", err, errN)
	}

	kx, kxn := keyBuckets(t, clock), keyBuckets(t, clock)
	for where := range kx {
		for i := range 12 {
			p, perr := kx[where].Peek(ctx)
			a, aerr := kx[where].Allow(ctx)
			pn, pnerr := kxn[where].PeekN(ctx, 1)
			an, anerr := kxn[where].AllowN(ctx, 1)
			if got, want := fmt.Sprint(p, perr, a, aerr), fmt.Sprint(pn, pnerr, an, anerr); got != want {
				t.Errorf("KeyBucket on %s, call %d: Peek, Allow = %s; PeekN(1), AllowN(1) = %s", where, i, got, want)
			}
		}
	}

	lx, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	lxn, _ := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	for i := range 4 {
		p, perr := lx.Peek(ctx, "k")
		a, aerr := lx.Allow(ctx, "k")
		pn, pnerr := lxn.PeekN(ctx, "k", 1)
		an, anerr := lxn.AllowN(ctx, "k", 1)
		if got, want := fmt.Sprint(p, perr, a, aerr), fmt.Sprint(pn, pnerr, an, anerr); got != want {
			t.Errorf("Limiter call %d: Peek, Allow = %s; PeekN(1), AllowN(1) = %s", i, got, want)
		}
	}
}

// TestPeekTakesNothing: PeekN answers as AllowN would and stores nothing,
// not even its refill: after a peek at a later time, a call at an earlier
// time sees the bucket as it was.
func TestPeekTakesNothing(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
	b.AllowN(10)
	clock.Advance(500 * ms)
	peek, _ := b.PeekN(3)
	clock.Advance(-300 * ms)
	if got := b.AvailableTokens(); got != 2 {
		t.Errorf("AvailableTokens at 200ms after a PeekN at 500ms = %d, want 2: the peek stored its refill", got)
	}
	clock.Advance(300 * ms)
	if allow, _ := b.AllowN(3); allow != peek {
		t.Errorf("AllowN(3) = %+v after PeekN(3) = %+v, want the same", allow, peek)
	}
	for where, kb := range keyBuckets(t, sluicetest.NewFakeClock(t0)) {
		kb.AllowN(ctx, 4)
		for range 3 {
			if r, err := kb.PeekN(ctx, 6); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Errorf("%s: PeekN(6) with 6 there = %+v, %v, want allowed with 0 left", where, r, err)
			}
		}
		if n, err := kb.AvailableTokens(ctx); err != nil || n != 6 {
			t.Errorf("%s: AvailableTokens after three peeks = %d, %v, want 6", where, n, err)
		}
	}
}

// TestKeyBucketViews: a KeyBucket's blocking calls and snapshots behave as
// a Bucket's, wherever its state lives.
func TestKeyBucketViews(t *testing.T) {
	ctx := context.Background()
	for where, kb := range keyBuckets(t, sluicetest.NewFakeClock(t0)) {
		t.Run(where, func(t *testing.T) {
			r, err := kb.AllowN(ctx, 7)
			s, serr := kb.Snapshot(ctx)
			if err != nil || serr != nil || !r.Allowed || r.Remaining != 3 || s.AvailableTokens != 3 || s.TimeToFullRefill != 700*ms {
				t.Errorf("AllowN(7), Snapshot() = %+v, %v, %+v, %v; want allowed, 3 left, full in 700ms", r, err, s, serr)
			}
			if ok, err := block(kb).TryConsume(ctx, 5, time.Second); err != nil || !ok {
				t.Errorf("blocking TryConsume(5, 1s) = %v, %v, want true after a wait", ok, err)
			}
			if err := block(kb).Consume(ctx, 1); err != nil {
				t.Errorf("blocking Consume(1) = %v", err)
			}
			n, err := kb.AvailableTokens(ctx)
			a, serr := kb.Snapshot(ctx)
			if err != nil || serr != nil || n != a.AvailableTokens || len(a.Bandwidths) != 1 {
				t.Errorf("AvailableTokens(), Snapshot() = %d, %v, %+v, %v", n, err, a, serr)
			}
			if where == "memory" {
				return // an in-memory key follows its limiter's policy (TestInMemoryReplaceConfiguration)
			}
			cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(100, time.Second)}}
			err = kb.ReplaceConfiguration(ctx, cfg, sluice.InheritAdditive)
			s, serr = kb.Snapshot(ctx)
			if err != nil || serr != nil || s.Config.Bandwidths[0].Capacity() != 100 || s.AvailableTokens != n+90 {
				t.Errorf("ReplaceConfiguration(100, additive), Snapshot() = %v, %+v, %v; want capacity 100 and %d tokens", err, s, serr, n+90)
			}
		})
	}
}

// TestWaitN: Bucket and KeyBucket have Limiter's WaitN: tokens due within
// maxWait are waited for, later ones are a *MaxWaitError at once.
func TestWaitN(t *testing.T) {
	ctx := context.Background()
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(10, time.Second)})
	b.AllowN(10)
	var mw *sluice.MaxWaitError
	if err := b.WaitN(ctx, 5, 400*ms); !errors.As(err, &mw) || clock.Slept() != 0 {
		t.Errorf("WaitN(5, 400ms) with 500ms to wait = %v after sleeping %v, want a *MaxWaitError at once", err, clock.Slept())
	}
	if err := b.WaitN(ctx, 5, 500*ms); err != nil || clock.Slept() != 500*ms {
		t.Errorf("WaitN(5, 500ms) = %v after sleeping %v, want nil after 500ms", err, clock.Slept())
	}
	for where, kb := range keyBuckets(t, sluicetest.NewFakeClock(t0)) {
		kb.AllowN(ctx, 10)
		if err := kb.WaitN(ctx, 5, 400*ms); !errors.As(err, &mw) {
			t.Errorf("%s: WaitN(5, 400ms) = %v, want a *MaxWaitError", where, err)
		}
		if err := kb.WaitN(ctx, 5, 500*ms); err != nil {
			t.Errorf("%s: WaitN(5, 500ms) = %v", where, err)
		}
	}
}

// sameReservation reports whether a and b decided alike.
func sameReservation(a, b *sluice.Reservation) bool {
	return a.OK() == b.OK() && a.Tokens() == b.Tokens() && a.Delay() == b.Delay() && a.Result() == b.Result()
}
