package rollout_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestLazyBucketsOnStores: two processes' LazyBuckets share a store; each
// key's configuration is supplied once, by whichever process first finds
// it without state, and both then decide under the stored one.
func TestLazyBucketsOnStores(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			var supplied atomic.Int32
			supply := func(_ context.Context, key string) (sluice.BucketConfig, error) {
				supplied.Add(1)
				limit := int64(4)
				if strings.HasPrefix(key, "paid:") {
					limit = 40
				}
				return sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(limit, time.Hour)}}, nil
			}
			clock := sluicetest.NewFakeClock(t0)
			var procs [2]*sluice.LazyBuckets
			for i := range procs {
				p, err := sluice.NewLazyBuckets(s, supply, sluice.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				procs[i] = p
			}
			for _, key := range []string{"bob", "paid:acme"} {
				limit := int64(4)
				if key != "bob" {
					limit = 40
				}
				for i := range 6 {
					r, err := procs[i%2].Bucket(key).Allow(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					if want := int64(i) < limit; r.Allowed != want || r.Limit != limit {
						t.Errorf("%s Allow #%d = %+v, want allowed %v under limit %d", key, i, r, want, limit)
					}
				}
			}
			if n := supplied.Load(); n != 2 {
				t.Errorf("configurations supplied %d times for 2 keys, want 2", n)
			}
		})
	}
}
