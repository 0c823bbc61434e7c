package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/examples/gateway"
	"github.com/sluicehq/sluice/sluicetest"
)

// backend streams as many tokens as its answer query parameter says.
func backend(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("answer"))
		for i := range n {
			fmt.Fprintf(w, "token%d\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestGateway: a tenant of 1,000 tokens a minute; each request holds its
// max_tokens and is settled with the tokens streamed.
func TestGateway(t *testing.T) {
	clock := sluicetest.NewFakeClock(1_700_000_000_000_000_000)
	tokens, err := sluice.NewLimiter(sluice.TokenBucket(1000, 1000, time.Minute), sluice.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(backend(t).URL, tokens, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	ask := func(tenant string, maxTokens, answer int) (status, streamed int) {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/?max_tokens=%d&answer=%d", front.URL, maxTokens, answer), nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		for s := bufio.NewScanner(resp.Body); s.Scan(); {
			streamed++
		}
		return resp.StatusCode, streamed
	}
	left := func(tenant string) sluice.Cost {
		t.Helper()
		c, err := tokens.Debt(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Estimated 200, streamed 150: 150 taken.
	if status, n := ask("acme", 200, 150); status != 200 || n != 150 {
		t.Fatalf("first request = %d, %d tokens streamed", status, n)
	}
	if c := left("acme"); c.Remaining != 850 {
		t.Fatalf("after 150 tokens: %d left, want 850", c.Remaining)
	}
	// Estimated 100, streamed 1,000: the answer is not cut, and the 150
	// beyond what was left are owed.
	if status, n := ask("acme", 100, 1000); status != 200 || n != 1000 {
		t.Fatalf("second request = %d, %d tokens streamed", status, n)
	}
	if c := left("acme"); c.Remaining != 0 || c.Debt != 150 {
		t.Fatalf("after 1,150 tokens: %+v, want nothing left and 150 owed", c)
	}
	// Owing, the tenant is refused until the refill at 1m pays the debt;
	// another tenant is not.
	if status, _ := ask("acme", 1, 1); status != http.StatusTooManyRequests {
		t.Fatalf("a request in debt = %d, want 429", status)
	}
	if status, n := ask("other", 10, 10); status != 200 || n != 10 {
		t.Fatalf("another tenant = %d, %d", status, n)
	}
	clock.Advance(time.Minute)
	if status, n := ask("acme", 10, 10); status != 200 || n != 10 {
		t.Fatalf("after the refill = %d, %d", status, n)
	}
	if c := left("acme"); c.Remaining != 840 {
		t.Fatalf("after the refill of 1,000 paid 150 and 10 more were used: %d left, want 840", c.Remaining)
	}
}
