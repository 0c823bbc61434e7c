package outage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// clock is a fake clock, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// storeErr is an error as a store and a limiter make it: the key quoted
// twice on the way to the store's own error.
func storeErr(key string) error {
	dial := &netError{"dial tcp 10.0.0.5:6379: connect: connection refused"}
	return &sluice.StoreError{Op: "Limiter.AllowN", Key: key,
		Err: fmt.Errorf("redisstore: update %s: %w: %w", driver.QuoteKey("api:"+key), driver.ErrUnavailable, dial)}
}

type netError struct{ msg string }

func (e *netError) Error() string { return e.msg }

// TestLogAggregates: an outage of 5 s at 2,800 failed decisions a second
// is one line, with the cause and no key; the counts come every Every
// while it lasts; its end is one line once the store has answered for
// Settle.
func TestLogAggregates(t *testing.T) {
	var buf bytes.Buffer
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &clock{start}
	o := New(slog.New(slog.NewTextHandler(&buf, nil)), c.now)
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	o.Success() // healthy: nothing to say
	for i := range 14_000 {
		o.Failure("limiter api", storeErr(fmt.Sprintf("user-%d-secret", i)))
		c.t = c.t.Add(5 * time.Second / 14_000)
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "first=\"limiter api\"") || !strings.Contains(got[0], "kind=unavailable") ||
		!strings.Contains(got[0], "connection refused") {
		t.Fatalf("5 s of 14,000 failed decisions logged:\n%s\nwant one line with the limiter, the kind and the cause", buf.String())
	}
	c.t = start.Add(Every)
	o.Failure("limiter api", context.DeadlineExceeded)
	o.Tick()
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "failed_decisions=14000") || !strings.Contains(got[1], "since_start=14001") ||
		!strings.Contains(got[1], "timeout=1 unavailable=13999") {
		t.Fatalf("after 10 s of outage:\n%s\nwant a second line with the interval's counts by kind", buf.String())
	}
	o.Tick()
	c.t = c.t.Add(time.Millisecond)
	o.Success() // a probe answered at once: not yet over
	if got := lines(); len(got) != 2 {
		t.Fatalf("a success right after a failure ended the outage:\n%s", buf.String())
	}
	c.t = c.t.Add(Settle)
	o.Tick()
	if got := lines(); len(got) != 3 || !strings.Contains(got[2], "the store answers again") || !strings.Contains(got[2], "failed_decisions=14001") {
		t.Fatalf("after the store answered for %v:\n%s\nwant a last line with the total", Settle, buf.String())
	}
	if strings.Contains(buf.String(), "secret") {
		t.Errorf("a key is in the log:\n%s", buf.String())
	}
	// A second outage soon after is counted, and said at the next interval.
	c.t = c.t.Add(time.Second)
	o.Failure("domain edge", errors.New("boom"))
	o.Failure("domain edge", errors.New("boom"))
	if got := lines(); len(got) != 3 {
		t.Fatalf("an outage 1 s after a line logged at once:\n%s", buf.String())
	}
	c.t = c.t.Add(Every)
	o.Tick()
	if got := lines(); len(got) != 4 || !strings.Contains(got[3], "first=\"domain edge\"") || !strings.Contains(got[3], "failed_decisions=2") {
		t.Fatalf("the second outage at the next interval:\n%s", buf.String())
	}
}

func TestCause(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{storeErr("k"), "dial tcp 10.0.0.5:6379: connect: connection refused"},
		{fmt.Errorf("redisstore: update %s: %w: %w", driver.QuoteKey("k"), driver.ErrIndeterminate, context.DeadlineExceeded), "context deadline exceeded"},
		{&sluice.StoreError{Key: "k", Err: sluice.ErrCircuitOpen}, sluice.ErrCircuitOpen.Error()},
		{errors.New(`no row for key "k"`), ""},
	} {
		if got := Cause(tt.err); got != tt.want {
			t.Errorf("Cause(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
