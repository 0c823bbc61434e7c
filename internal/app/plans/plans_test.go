package plans

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

const (
	three = `{"policy": "fixed_window", "limit": 3, "interval": "1s"}`
	fifty = `{"policy": "fixed_window", "limit": 50, "interval": "1s"}`
)

func limitOf(t *testing.T, c *Catalog, key string) int64 {
	t.Helper()
	p, ok := c.Exact("api", key)
	if !ok {
		if p, _, ok = c.Prefix("api", key); !ok {
			return 0
		}
	}
	l, err := sluice.NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Limit
}

func newPair(t *testing.T) (a, b *Catalog, st driver.Store) {
	st = memstore.New()
	now := time.Now
	a, b = New(st, now, nil), New(st, now, nil)
	for _, c := range []*Catalog{a, b} {
		if _, err := c.Sync(t.Context()); err != nil {
			t.Fatalf("Sync = %v", err)
		}
	}
	return a, b, st
}

// TestPropagation writes through one catalog and reads through another
// after its Sync: puts, a prefix, a change and a delete.
func TestPropagation(t *testing.T) {
	ctx := t.Context()
	a, b, _ := newPair(t)
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "tenant-7", Spec: three}, nil); err != nil {
		t.Fatalf("Put = %v", err)
	}
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "paid:", Prefix: true, Spec: fifty}, nil); err != nil {
		t.Fatalf("Put prefix = %v", err)
	}
	if got := limitOf(t, b, "tenant-7"); got != 0 {
		t.Errorf("limit of tenant-7 before Sync = %d, want none", got)
	}
	if _, err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int64{"tenant-7": 3, "paid:x": 50, "paid": 0, "tenant-8": 0} {
		if got := limitOf(t, b, key); got != want {
			t.Errorf("limit of %s after Sync = %d, want %d", key, got, want)
		}
	}
	if _, err := a.Delete(ctx, "api", "tenant-7", false, nil); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(t, b, "tenant-7"); got != 0 {
		t.Errorf("limit of tenant-7 after Delete and Sync = %d, want none", got)
	}
	if got := b.Counts()["api"]; got != 1 {
		t.Errorf("Counts()[api] = %d, want 1", got)
	}
}

// TestLongestPrefix checks the precedence of prefixes.
func TestLongestPrefix(t *testing.T) {
	ctx := t.Context()
	a, _, _ := newPair(t)
	for _, p := range []Plan{
		{Limiter: "api", Key: "paid:", Prefix: true, Spec: fifty},
		{Limiter: "api", Key: "paid:trial:", Prefix: true, Spec: three},
	} {
		if _, err := a.Put(ctx, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]int{"paid:trial:bob": len("paid:trial:"), "paid:bob": len("paid:"), "bob": 0} {
		_, n, _ := a.Prefix("api", key)
		if n != want {
			t.Errorf("Prefix(api, %q) = length %d, want %d", key, n, want)
		}
	}
}

// TestVersions checks idempotent writes and If-Match.
func TestVersions(t *testing.T) {
	ctx := t.Context()
	a, _, _ := newPair(t)
	ch, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: three}, new(uint64)) // 0: must not exist
	if err != nil || ch.Old != nil || ch.New == nil {
		t.Fatalf("Put new = %+v, %v", ch, err)
	}
	v := ch.New.Version
	again, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: `{"interval":"1s","limit":3,"policy":"fixed_window"}`}, nil)
	if err != nil || again.New.Version != v {
		t.Errorf("Put of the same policy again = %+v, %v; want version %d kept", again, err, v)
	}
	stale := v - 1
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: fifty}, &stale); !errors.Is(err, ErrPrecondition) {
		t.Errorf("Put with a stale If-Match = %v, want ErrPrecondition", err)
	}
	ch, err = a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: fifty}, &v)
	if err != nil || ch.Old.Version != v || ch.New.Version <= v {
		t.Fatalf("Put with If-Match %d = %+v, %v", v, ch, err)
	}
	got, err := a.Get(ctx, "api", "k", false)
	if err != nil || got.Version != ch.New.Version || got.Spec != ch.New.Spec {
		t.Errorf("Get = %+v, %v; want %+v", got, err, *ch.New)
	}
	if _, err := a.Delete(ctx, "api", "k", false, &v); !errors.Is(err, ErrPrecondition) {
		t.Errorf("Delete with a stale If-Match = %v, want ErrPrecondition", err)
	}
	if _, err := a.Delete(ctx, "api", "nope", false, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of no plan = %v, want ErrNotFound", err)
	}
	var se *SpecError
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: `{"policy": "fixed_window", "limit": 0, "interval": "1s"}`}, nil); !errors.As(err, &se) {
		t.Errorf("Put of an invalid policy = %v, want a *SpecError", err)
	}
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: `{"policy": "compound", "limiters": ["other"]}`}, nil); !errors.As(err, &se) {
		t.Errorf("Put of a compound naming a limiter = %v, want a *SpecError", err)
	}
}

// TestImportAndReload imports plans in bulk; a catalog behind by more
// than the log's ring reads every shard again, and a new one loads them.
func TestImportAndReload(t *testing.T) {
	ctx := t.Context()
	a, b, st := newPair(t)
	var ps []Plan
	for i := range 3 * logSlots {
		ps = append(ps, Plan{Limiter: "api", Key: fmt.Sprintf("tenant-%d", i), Spec: three})
	}
	n, err := a.Import(ctx, ps, 4)
	if err != nil || n != len(ps) {
		t.Fatalf("Import = %d, %v; want %d", n, err, len(ps))
	}
	if n, err := a.Import(ctx, ps, 4); err != nil || n != 0 {
		t.Errorf("Import again = %d, %v; want 0 changed", n, err)
	}
	for _, c := range []*Catalog{b, New(st, time.Now, nil)} {
		if _, err := c.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.Counts()["api"]; got != len(ps) {
			t.Errorf("Counts()[api] after Sync = %d, want %d", got, len(ps))
		}
	}
	page := b.List("api", nil, 2)
	if len(page) != 2 || page[0].Key != "tenant-0" || page[1].Key != "tenant-1" {
		t.Fatalf("List first page = %v, want tenant-0, tenant-1", page)
	}
	if next := b.List("api", &page[1], 1); len(next) != 1 || next[0].Key != "tenant-10" {
		t.Errorf("List after %q = %v, want tenant-10", page[1].Key, next)
	}
}

// TestPendingChange: a change numbered but not yet logged holds the
// others' cursor, which moves on once it is logged.
func TestPendingChange(t *testing.T) {
	ctx := context.Background()
	a, b, _ := newPair(t)
	n, err := a.next(ctx) // a writer that took a number and stalls
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, Plan{Limiter: "api", Key: "k", Spec: three}, nil); err != nil {
		t.Fatal(err)
	}
	if cur, err := b.Sync(ctx); err != nil || cur != n-1 {
		t.Errorf("Sync with change %d pending = %d, %v; want %d", n, cur, err, n-1)
	}
	if err := a.log(ctx, slot{seq: n, shard: noShard}); err != nil {
		t.Fatal(err)
	}
	if cur, err := b.Sync(ctx); err != nil || cur != n+1 || limitOf(t, b, "k") != 3 {
		t.Errorf("Sync after change %d logged = %d, %v, limit %d; want %d and 3", n, cur, err, limitOf(t, b, "k"), n+1)
	}
}

func FuzzDecodeShard(f *testing.F) {
	f.Add(appendShard(nil, []Plan{{Limiter: "api", Key: "k", Spec: three, Version: 7}, {Limiter: "api", Key: "p", Prefix: true, Spec: three, Version: 9}}))
	f.Add([]byte{shardFormat, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := decodeShard(b, map[string]string{})
		if err != nil {
			return
		}
		if len(b) == 0 {
			return
		}
		// What decodes encodes back to a record that decodes alike.
		again, err := decodeShard(appendShard(nil, ps), nil)
		if err != nil || !reflect.DeepEqual(ps, again) {
			t.Errorf("round trip of %x = %v, %v; want %v", b, again, err, ps)
		}
	})
}

// TestConcurrentLookups looks plans up while another catalog writes and
// this one syncs, for the race detector: a lookup sees a shard before or
// after a change, never half of one.
func TestConcurrentLookups(t *testing.T) {
	ctx := t.Context()
	a, b, _ := newPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			spec := three
			if i%2 == 1 {
				spec = fifty
			}
			if _, err := a.Put(ctx, Plan{Limiter: "api", Key: fmt.Sprintf("k%d", i%5), Spec: spec}, nil); err != nil {
				t.Error(err)
				return
			}
			if _, err := a.Put(ctx, Plan{Limiter: "api", Key: fmt.Sprintf("p%d:", i%3), Prefix: true, Spec: spec}, nil); err != nil {
				t.Error(err)
				return
			}
			if _, err := b.Sync(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		for i := range 5 {
			b.Exact("api", fmt.Sprintf("k%d", i))
			b.Prefix("api", fmt.Sprintf("p%d:x", i%3))
		}
		b.List("api", nil, 10)
		b.Counts()
	}
}
