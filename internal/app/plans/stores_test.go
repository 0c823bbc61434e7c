package plans

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app/storeurl"
	"github.com/sluicehq/sluice/internal/testserver"
)

// TestStores runs two catalogs on each store: a put, a prefix and a
// delete through one are seen by the other after its Sync, and a third
// catalog loads what is left.
func TestStores(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "sluice")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sluice")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	stores := map[string]func(t testing.TB) string{
		"redis":    testserver.SharedRedis,
		"postgres": testserver.SharedPostgres,
		"mariadb": func(t testing.TB) string {
			dsn := testserver.SharedMariaDB(t)
			return "mysql://root@" + strings.TrimSuffix(strings.TrimPrefix(dsn, "root@tcp("), ")/sluice") + "/sluice"
		},
		"dynamodb": func(t testing.TB) string {
			return "dynamodb://?region=us-east-1&table=sluice_plans&endpoint=" + testserver.SharedDynamo(t)
		},
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st, err := storeurl.Open(ctx, url(t))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.Check(ctx); err != nil {
				t.Fatal(err)
			}
			var id [6]byte
			rand.Read(id[:])
			store := prefixed{st.Store, "plans-test-" + hex.EncodeToString(id[:]) + "/"}
			a, b := New(store, time.Now, nil), New(store, time.Now, nil)
			for _, c := range []*Catalog{a, b} {
				if _, err := c.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range []Plan{
				{Limiter: "api", Key: "tenant-7", Spec: three},
				{Limiter: "api", Key: "paid:", Prefix: true, Spec: fifty},
				{Limiter: "api", Key: "gone", Spec: fifty},
			} {
				if _, err := a.Put(ctx, p, nil); err != nil {
					t.Fatalf("Put %v = %v", p, err)
				}
			}
			if _, err := a.Delete(ctx, "api", "gone", false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			c := New(store, time.Now, nil)
			if _, err := c.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, cat := range []*Catalog{b, c} {
				for key, want := range map[string]int64{"tenant-7": 3, "paid:x": 50, "gone": 0} {
					if got := limitOf(t, cat, key); got != want {
						t.Errorf("limit of %s = %d, want %d", key, got, want)
					}
				}
			}
		})
	}
}
