package rollout_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// plans is a mutable table of keys' plans, as a customer database.
type plans struct {
	mu sync.Mutex
	m  map[string]sluice.Policy
}

func (p *plans) set(key string, pol sluice.Policy) {
	p.mu.Lock()
	p.m[key] = pol
	p.mu.Unlock()
}

func (p *plans) policyFor(_ context.Context, key string) (sluice.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pol, ok := p.m[key]; ok {
		return pol, nil
	}
	if strings.HasPrefix(key, "paid:") {
		return p.m["paid:"], nil
	}
	return nil, nil
}

// TestPolicyPerKey: two processes share a store, each with a limiter whose
// policy depends on the key. Each key is limited by its plan; a key whose
// plan changes migrates once, by the inheritance, when the processes'
// caches see the change, and the two processes then agree on it.
func TestPolicyPerKey(t *testing.T) {
	const day = 24 * time.Hour
	free, pro := sluice.TokenBucket(5, 5, day), sluice.TokenBucket(50, 50, day)
	window := sluice.FixedWindow(3, day)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			clock := sluicetest.NewFakeClock(t0)
			table := &plans{m: map[string]sluice.Policy{"paid:": pro, "w": window}}
			var procs [2]*sluice.Limiter
			for i := range procs {
				l, err := sluice.NewLimiter(free, sluice.WithStore(s), sluice.WithClock(clock),
					sluice.WithPolicyFor(table.policyFor), sluice.WithPolicyCache(100, time.Minute), sluice.WithConfigVersion(7))
				if err != nil {
					t.Fatal(err)
				}
				procs[i] = l
			}
			ctx := t.Context()
			allow := func(i int, key string, n int64) sluice.Result {
				t.Helper()
				r, err := procs[i%2].AllowN(ctx, key, n)
				if err != nil {
					t.Fatalf("process %d AllowN(%q, %d) = %v", i%2, key, n, err)
				}
				return r
			}
			for key, limit := range map[string]int64{"alice": 5, "paid:bob": 50, "w": 3} {
				for i := range int(limit) {
					if r := allow(i, key, 1); !r.Allowed || r.Limit != limit || r.Remaining != limit-int64(i)-1 {
						t.Fatalf("AllowN(%q) #%d = %+v, want %d of %d left", key, i, r, limit-int64(i)-1, limit)
					}
				}
				if r := allow(0, key, 1); r.Allowed {
					t.Errorf("AllowN(%q) past its plan's limit %d = %+v, want refused", key, limit, r)
				}
			}
			// carol takes 3 of her 5 on both processes, then upgrades:
			// within their caches' TTL both keep her plan; then her 1 of 5
			// left becomes 10 of 50, exactly once.
			allow(0, "carol", 2)
			allow(1, "carol", 1)
			table.set("carol", pro)
			if r := allow(1, "carol", 1); r.Limit != 5 || r.Remaining != 1 {
				t.Errorf("AllowN(carol) within the cache TTL = %+v, want the cached plan: 1 of 5 left", r)
			}
			clock.Advance(2 * time.Minute) // refills nothing: 5 a day
			for i := range 10 {
				if r := allow(i, "carol", 1); !r.Allowed || r.Limit != 50 || r.Remaining != 10-int64(i)-1 {
					t.Fatalf("AllowN(carol) #%d after the upgrade = %+v, want %d of 50 left", i, r, 10-int64(i)-1)
				}
			}
			if r := allow(0, "carol", 1); r.Allowed {
				t.Errorf("AllowN(carol) past what the migration left = %+v, want refused", r)
			}
		})
	}
}
