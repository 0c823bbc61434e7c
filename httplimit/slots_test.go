package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// slotServer serves h behind a concurrency limit of 1 slot with a lease
// of ttl on one key, on a real server: client disconnects and a
// handler's panic are the connection's.
func slotServer(t *testing.T, ttl time.Duration, h http.Handler) (*httptest.Server, *sluice.Limiter) {
	t.Helper()
	l := newLimiter(t, sluice.Concurrency(1, ttl))
	m := newMiddleware(t, []httplimit.Limit{{Name: "inflight", Limiter: l, Key: func(*http.Request) (string, error) { return "k", nil }}})
	srv := httptest.NewUnstartedServer(m.Handler(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, l
}

// free reports whether the limit's slot is free now, taking nothing.
func free(t *testing.T, l *sluice.Limiter) bool {
	t.Helper()
	r, err := l.Peek(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	return r.Allowed
}

// awaitFree waits, until a deadline far within the lease of a minute,
// for the slot to be given back: only a release frees it that soon.
func awaitFree(t *testing.T, l *sluice.Limiter, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !free(t, l); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the request's slot was not given back", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSlotReleasedAfterPanic(t *testing.T) {
	srv, l := slotServer(t, time.Minute, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	}))
	if _, err := http.Get(srv.URL); err == nil {
		t.Fatal("GET of a panicking handler = nil error, want the connection closed")
	}
	awaitFree(t, l, "after a panic")
	if resp, err := http.Get(srv.URL); err == nil && resp.StatusCode == http.StatusTooManyRequests {
		t.Fatalf("GET after the panicking request = %d, want the handler run", resp.StatusCode)
	}
}

func TestSlotReleasedAfterDisconnect(t *testing.T) {
	started := make(chan struct{})
	srv, l := slotServer(t, time.Minute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // the client went away
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	<-started
	if free(t, l) {
		t.Fatal("the slot is free while the request runs")
	}
	if resp, err := http.Get(srv.URL); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first runs = %v, %v; want 429", resp, err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the disconnected request = %v, want context.Canceled", err)
	}
	awaitFree(t, l, "after the client disconnected")
}

// TestSlotRenewedWhileStreaming: a response streamed for 2.5 leases
// keeps its slot all along (another request is refused at its end), and
// gives it back when it ends.
func TestSlotRenewedWhileStreaming(t *testing.T) {
	const lease = time.Second
	srv, l := slotServer(t, lease, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 25 {
			w.Write([]byte("chunk\n"))
			w.(http.Flusher).Flush()
			time.Sleep(lease / 10)
		}
	}))
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for n := 0; sc.Scan(); n++ {
		if n == 22 { // 2.2 leases in: the slot must still be held
			if free(t, l) {
				t.Fatalf("chunk %d, %v into a stream, the slot lapsed", n, time.Duration(n)*lease/10)
			}
		}
	}
	awaitFree(t, l, "after the stream ended")
}
