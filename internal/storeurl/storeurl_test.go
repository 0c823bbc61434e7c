package storeurl

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/testserver"
)

func TestOpenBadURLs(t *testing.T) {
	for _, u := range []string{
		"ftp://x",
		"redis+sentinel://127.0.0.1:1",
		"postgres://127.0.0.1:1/db?strategy=optimistic",
		"mysql://127.0.0.1:1/db?strategy=advisory_lock",
		"postgres://127.0.0.1:1/db?table=x;drop",
	} {
		s, err := Open(context.Background(), u)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Open(%q) = %v, %v, want an *Error", u, s, err)
		}
	}
	if _, err := Open(context.Background(), "redis://user:secret@127.0.0.1:1/x"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open with a bad database = %v, want an error without the password", err)
	}
}

// TestServerKilled stops a store's server in the middle of a run: calls
// keep returning within the store timeout, with the configured failure
// policy, and nothing panics.
func TestServerKilled(t *testing.T) {
	starts := map[string]func(context.Context) (string, func() error, error){
		"redis":    testserver.StartRedis,
		"postgres": testserver.StartPostgres,
	}
	for name, start := range starts {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			url, stop, err := start(ctx)
			if err != nil {
				var missing *testserver.MissingError
				if errors.As(err, &missing) && os.Getenv("CI") != "true" {
					t.Skip(err)
				}
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = stop()
				}
			})
			store, err := Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			counts := new(sluice.CountingListener)
			local, err := sluice.NewLimiter(sluice.FixedWindow(30, time.Hour), sluice.WithStore(store),
				sluice.WithStoreFailure(sluice.FailLocal), sluice.WithListener(counts), sluice.WithStoreTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			closed, err := sluice.NewLimiter(sluice.FixedWindow(30, time.Hour), sluice.WithStore(store),
				sluice.WithStoreTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if r, err := local.Allow(ctx, "k"); err != nil || !r.Allowed {
					t.Fatalf("call %d with the server up = %+v, %v", i, r, err)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			stopped = true
			allowed := 0
			for i := range 40 {
				start := time.Now()
				r, err := local.Allow(ctx, "k")
				if err != nil {
					t.Fatalf("call %d after the kill, failing to local = %v", i, err)
				}
				if r.Allowed {
					allowed++
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("call %d took %v, past the store timeout", i, d)
				}
			}
			// The local fallback starts the key afresh: 30 of its 40 calls pass.
			if allowed != 30 || counts.StoreFailures(sluice.FailLocal) != 40 {
				t.Errorf("local fallback allowed %d with %d failures seen, want 30 and 40", allowed, counts.StoreFailures(sluice.FailLocal))
			}
			_, err = closed.Allow(ctx, "k")
			var se *sluice.StoreError
			if !errors.As(err, &se) || !(errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrIndeterminate) || errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("failing closed after the kill = %v, want a *StoreError of an unavailable store", err)
			}
		})
	}
}
