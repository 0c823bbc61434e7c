package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/memstore"
)

func TestMembers(t *testing.T) {
	const sec = int64(time.Second)
	var rec []byte
	beat := func(id uint64, now int64) int64 {
		var n int64
		rec, n = members(rec, id, now)
		return n
	}
	for _, step := range []struct {
		id        uint64
		now, want int64
	}{
		{1, 0, 1},
		{2, sec / 2, 2},
		{3, sec, 3},
		{1, sec, 3},       // a beat again is one member still
		{2, 3 * sec, 3},   // 1's beat ends at 4s, 3's at 4s
		{2, 4 * sec, 1},   // theirs ended
		{3, 4 * sec, 2},   // back
		{3, 100 * sec, 1}, // the only one left
	} {
		if got := beat(step.id, step.now); got != step.want {
			t.Errorf("beat of %d at %v: %d members, want %d", step.id, time.Duration(step.now), got, step.want)
		}
	}
	if next, n := members([]byte("not a fleet record"), 9, 0); n != 1 || len(next) != 16 {
		t.Errorf("a beat over a record that is not one = %x, %d, want this one member alone", next, n)
	}
	// A full record drops the beats that end soonest.
	rec = nil
	for i := range maxMembers + 10 {
		beat(uint64(i+1), int64(i))
	}
	if got := len(rec) / 16; got != maxMembers {
		t.Fatalf("after %d members the record holds %d, want %d", maxMembers+10, got, maxMembers)
	}
	soonest := int64(math.MaxInt64)
	for i := 0; i < len(rec); i += 16 {
		soonest = min(soonest, int64(binary.BigEndian.Uint64(rec[i+8:])))
	}
	if want := policy.SatAdd(10, int64(MemberTTL)); soonest != want {
		t.Errorf("the soonest end kept is %d, want %d: the first 10 dropped", soonest, want)
	}
}

// recorder is a Backend that records the tokens it is asked for and
// answers with res.
type recorder struct {
	res    policy.Result
	tokens []int64
}

func (r *recorder) Consume(_ context.Context, _ string, n int64) (policy.Result, error) {
	r.tokens = append(r.tokens, n)
	return r.res, nil
}

func (r *recorder) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	return r.Consume(ctx, key, n)
}

func (r *recorder) Reserve(ctx context.Context, key string, n, _ int64) (policy.Result, int64, func(int64), error) {
	res, err := r.Consume(ctx, key, n)
	return res, 0, nil, err
}

func (r *recorder) Reset(context.Context, string) error { return nil }

// TestFailShare: a process that never beat fails closed; once three
// processes beat into the store, a failed call asks the local fallback
// for three times its tokens and reports a third of its Limit and
// Remaining; and a call that succeeds beats in the background.
func TestFailShare(t *testing.T) {
	st := memstore.New()
	now := int64(1_700_000_000) * int64(time.Second)
	clock := func() int64 { return now }
	fleet := func(id uint64) *Fleet { return &Fleet{store: st, now: clock, timeout: time.Second, id: id} }
	self := fleet(1)
	down := fmt.Errorf("test: %w", driver.ErrUnavailable)
	store := &backend{err: down}
	local := &recorder{res: policy.Result{Allowed: true, Remaining: 29, Limit: 30}}
	f := &Failover{Policy: FailurePolicy{Failure: FailShare}, Store: store, Local: local, Fleet: self, Limit: 30}

	_, err := f.Consume(context.Background(), "k", 1)
	var sf *StoreFailed
	if !errors.As(err, &sf) || sf.Open || !errors.Is(err, driver.ErrUnavailable) || len(local.tokens) != 0 {
		t.Fatalf("Consume before any beat = %v (local asked %v), want a closed *StoreFailed of the store's error", err, local.tokens)
	}

	for id := uint64(1); id <= 3; id++ {
		fleet(id).beat(now)
	}
	self.beat(now)
	if got := self.Size(); got != 3 {
		t.Fatalf("Size after three processes beat = %d, want 3", got)
	}
	res, err := f.Consume(context.Background(), "k", 2)
	if err != nil || res.Limit != 10 || res.Remaining != 9 || fmt.Sprint(local.tokens) != "[6]" {
		t.Errorf("Consume(2) on a failed store in a fleet of 3 = %+v, %v, local asked %v; want Limit 10, Remaining 9, 6 tokens asked",
			res, err, local.tokens)
	}
	if _, _, _, err := f.Reserve(context.Background(), "k", math.MaxInt64/2, 0); err != nil || local.tokens[1] != math.MaxInt64 {
		t.Errorf("Reserve of MaxInt64/2 asked the local fallback for %v, %v; want MaxInt64 (saturated)", local.tokens, err)
	}

	// A call that succeeds beats when a beat is due, in the background.
	store.err = nil
	beater := fleet(4)
	f.Fleet = beater
	if _, err := f.Consume(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); beater.Size() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a call that succeeded did not beat within 10s")
		}
	}
	if got := beater.Size(); got != 4 {
		t.Errorf("Size after the fourth process's beat = %d, want 4", got)
	}
}
