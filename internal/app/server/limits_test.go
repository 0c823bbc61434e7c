package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
)

// serving is a Server serving HTTP on a loopback port.
type serving struct {
	*Server
	addr string
}

// serve starts a server of yaml with opts on a loopback port (and gRPC on
// another when grpc is set), stopped at the test's end.
func serve(t *testing.T, yaml string, grpc bool, opts ...Option) (*serving, string) {
	t.Helper()
	cfg, err := LoadConfig([]byte(yaml))
	if err != nil {
		t.Fatalf("LoadConfig = %v", err)
	}
	s, err := New(t.Context(), cfg, opts...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var gln net.Listener
	var gaddr string
	if grpc {
		if gln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		gaddr = gln.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, gln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return &serving{s, ln.Addr().String()}, gaddr
}

// closedWithin reads c until the server closes it, for at most d: it
// reports whether the server closed it, and the bytes it sent meanwhile.
func closedWithin(c net.Conn, d time.Duration) (bool, string) {
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false, string(b)
	}
	return true, string(b)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const limitsYAML = `
limiters:
  three: {policy: fixed_window, limit: 3, interval: 1 minute}
  slow: {policy: bucket, limits: [{capacity: 1, refill: {greedy: 1, per: 1500ms}}]}
`

// TestStalledBodyClosed: a request whose body stops coming after its
// headers is closed by the read timeout; so is one whose headers never
// end, by the header timeout.
func TestStalledBodyClosed(t *testing.T) {
	s, _ := serve(t, limitsYAML+"server:\n  limits:\n    http: {read_header_timeout: 500ms, read_timeout: 1s}\n", false)
	body := dial(t, s.addr)
	fmt.Fprint(body, "POST /api/v1/consume HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"limiter\": ")
	header := dial(t, s.addr)
	fmt.Fprint(header, "POST /api/v1/consume HTTP/1.1\r\nHost: x\r\nContent-Le")
	for name, c := range map[string]net.Conn{"stalled body": body, "stalled headers": header} {
		if closed, got := closedWithin(c, 30*time.Second); !closed { // a deadline, not a bound
			t.Errorf("%s: still open after 30s with a read timeout of 1s (got %q)", name, got)
		}
	}
}

// TestIdleClosed: a kept-alive connection with no next request is closed
// at the idle timeout.
func TestIdleClosed(t *testing.T) {
	s, _ := serve(t, limitsYAML+"server:\n  limits:\n    http: {idle_timeout: 500ms}\n", false)
	c := dial(t, s.addr)
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz = %v, %v", resp, err)
	}
	if closed, _ := closedWithin(c, 30*time.Second); !closed { // a deadline, not a bound
		t.Error("an idle connection is still open after 30s with an idle timeout of 500ms")
	}
}

// TestMaxHeaderBytes: headers past the bound are refused.
func TestMaxHeaderBytes(t *testing.T) {
	s, _ := serve(t, limitsYAML+"server:\n  limits:\n    http: {max_header_bytes: 4096}\n", false)
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET with 64 KiB of headers = %d, want 431", resp.StatusCode)
	}
}

// TestWaitOutlastsTimeouts: a consume may wait for its tokens up to its
// max_wait_ms, longer than the read and write timeouts, and still answer.
func TestWaitOutlastsTimeouts(t *testing.T) {
	s, _ := serve(t, limitsYAML+"server:\n  limits:\n    http: {read_timeout: 300ms, write_timeout: 300ms}\n", false)
	post := func(body string) (int, string) {
		resp, err := http.Post("http://"+s.addr+"/api/v1/consume", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, got := post(`{"limiter": "slow", "key": "k"}`); code != 200 || !strings.Contains(got, `"allowed":true`) {
		t.Fatalf("first consume = %d %s", code, got)
	}
	// The next token is 1.5s away: five times the timeouts.
	code, got := post(`{"limiter": "slow", "key": "k", "max_wait_ms": 5000}`)
	if code != 200 || !strings.Contains(got, `"allowed":true`) || !strings.Contains(got, `"waited_ms"`) {
		t.Errorf("consume waiting 1.5s with timeouts of 300ms = %d %s, want allowed after a wait", code, got)
	}
}

// TestConnectionCap fills a server's connections with clients that hold
// them without asking (headers that never end), idle ones and ones whose
// body stalls: health checks still get in, at once, by closing the
// connections that wait; slow requests hold at most what the health
// checks' reserve leaves, and the others are told the server is busy.
func TestConnectionCap(t *testing.T) {
	const max, reserve = 24, 4
	s, _ := serve(t, limitsYAML+fmt.Sprintf(`server:
  limits:
    http: {max_connections: %d, reserved_for_health: %d, read_header_timeout: 1m, read_timeout: 1m, idle_timeout: 1m}
`, max, reserve), false)
	var hostile []net.Conn
	open := func(n int, start string) {
		for range n {
			c := dial(t, s.addr)
			fmt.Fprint(c, start)
			hostile = append(hostile, c)
		}
	}
	// Slow bodies first: past max-reserve in progress, they are answered
	// 503 busy and closed, or closed before their headers were read to
	// make room for the next.
	open(2*max, "POST /api/v1/consume HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	var held atomic.Int64
	var wg sync.WaitGroup
	for _, c := range hostile {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			b, err := io.ReadAll(c)
			switch {
			case strings.HasPrefix(string(b), "HTTP/1.1 503") && strings.Contains(string(b), `"busy"`):
			case len(b) == 0 && (err == nil || errors.Is(err, syscall.ECONNRESET)): // closed for room
			case len(b) == 0 && err.(net.Error).Timeout():
				held.Add(1)
			default:
				t.Errorf("a slow body got %q, %v; want 503 busy, a close or nothing", b, err)
			}
		})
	}
	wg.Wait()
	if n := held.Load(); n > max-reserve {
		t.Errorf("%d slow bodies held, want at most max_connections less reserved_for_health, %d", n, max-reserve)
	}
	idle := make([]net.Conn, 0, max)
	for range max {
		c := dial(t, s.addr)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /healthz to make an idle connection = %v, %v", resp, err)
		}
		idle = append(idle, c)
	}
	open(2*max, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ") // headers that never end
	if n := s.httpCap.Load().open(); n > max {
		t.Errorf("%d connections open, more than max_connections %d", n, max)
	}

	// A health check that waited for a connection to be freed would wait
	// for the hostile ones' timeouts, a minute: the client gives up at
	// half that, a deadline far from how long an answer takes, not a
	// bound on it.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for _, path := range []string{"/healthz", "/readyz", "/healthz/limiters"} {
		for range 3 {
			resp, err := client.Get("http://" + s.addr + path)
			if err != nil {
				t.Fatalf("GET %s with the connections full: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("GET %s with the connections full = %d, want 200", path, resp.StatusCode)
			}
		}
	}
	resp, err := client.Post("http://"+s.addr+"/api/v1/consume", "application/json", strings.NewReader(`{"limiter": "three", "key": "k"}`))
	if err != nil {
		t.Fatalf("consume with the requests full: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("consume with %d slow bodies in progress = %d, want 503 busy with Retry-After", max-reserve, resp.StatusCode)
	}
	// The idle connections were closed first, to make room.
	closed := 0
	var mu sync.Mutex
	for _, c := range idle {
		wg.Go(func() {
			if ok, _ := closedWithin(c, 5*time.Second); ok {
				mu.Lock()
				closed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if closed == 0 {
		t.Error("no idle connection was closed to make room")
	}
}

// TestSimulateLimits: the endpoint can be turned off, its simulations are
// bounded in size before they are made, and in number at once.
func TestSimulateLimits(t *testing.T) {
	get := func(s *Server, query string) (int, string) {
		r := httptest.NewRequest("GET", "/api/v1/simulate?"+query, nil)
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	off, _ := testServer(t, limitsYAML+"server:\n  simulate: {enabled: false}\n")
	if code, body := get(off, "limiter=three&traffic=steady+1/s"); code != 404 || !strings.Contains(body, "server.simulate.enabled") {
		t.Errorf("simulate turned off = %d %s, want 404 naming server.simulate.enabled", code, body)
	}

	s, _ := testServer(t, limitsYAML+"server:\n  simulate: {max_requests: 1000, max_concurrent: 2}\n")
	if code, body := get(s, "limiter=three&traffic=steady+2000/s&duration=1s"); code != 400 || !strings.Contains(body, "at most 1000") {
		t.Errorf("simulate of 2000 requests with max_requests 1000 = %d %s, want 400", code, body)
	}
	if code, body := get(s, "limiter=three&traffic=steady+999/s&duration=1s"); code != 200 {
		t.Errorf("simulate of 999 requests with max_requests 1000 = %d %.200s, want 200", code, body)
	}
	// Both slots taken: a third waits, then is told the server is busy.
	s.simQueue = 50 * time.Millisecond
	s.simSlots <- struct{}{}
	s.simSlots <- struct{}{}
	code, body := get(s, "limiter=three&traffic=steady+1/s")
	if code != 503 || !strings.Contains(body, `"busy"`) {
		t.Errorf("simulate with max_concurrent running = %d %s, want 503 busy", code, body)
	}
	<-s.simSlots
	if code, _ := get(s, "limiter=three&traffic=steady+1/s"); code != 200 {
		t.Errorf("simulate with a slot free = %d, want 200", code)
	}
}

// TestInspectCreatesNoState: looking at keys stores nothing, and the
// in-memory store holds at most max_keys keys.
func TestInspectCreatesNoState(t *testing.T) {
	s, _ := testServer(t, fixedYAML+"server:\n  limits: {max_keys: 100}\n")
	mem := s.store.Store.(*memstore.Store)
	for i := range 1000 {
		for _, l := range []string{"tb", "three", "slide"} {
			if code, out := call(t, s, "POST", "/api/v1/inspect", fmt.Sprintf(`{"limiter": %q, "key": "k%d"}`, l, i)); code != 200 {
				t.Fatalf("inspect = %d %v", code, out)
			}
		}
	}
	if n := mem.Len(); n != 0 {
		t.Errorf("3000 inspects of keys without state left %d keys in the store, want 0", n)
	}
	for i := range 1000 {
		call(t, s, "POST", "/api/v1/consume", fmt.Sprintf(`{"limiter": "three", "key": "k%d"}`, i))
	}
	if n := mem.Len(); n != 100 {
		t.Errorf("1000 keys consumed with max_keys 100 left %d keys, want 100", n)
	}
}

// TestCrossOrigin: browsers' cross-origin requests that change state are
// refused unless their origin is allowed; clients that are not browsers
// (curl, services), same-origin pages and reads pass.
func TestCrossOrigin(t *testing.T) {
	s, _ := testServer(t, fixedYAML+"server:\n  allowed_origins: [\"https://app.example.com\"]\n")
	const consume = `{"limiter": "three", "key": "k"}`
	for _, tt := range []struct {
		name, method, path string
		header             []string
		want               int
	}{
		{"curl", "POST", "/api/v1/consume", nil, 200},
		{"text/plain from another site", "POST", "/api/v1/consume", []string{"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}, 403},
		{"reset from another site", "POST", "/api/v1/reset", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"an old browser's Origin", "POST", "/api/v1/consume", []string{"Origin", "https://evil.example"}, 403},
		{"same origin", "POST", "/api/v1/consume", []string{"Sec-Fetch-Site", "same-origin"}, 200},
		{"the user typed it", "POST", "/api/v1/consume", []string{"Sec-Fetch-Site", "none"}, 200},
		{"an allowed origin", "POST", "/api/v1/consume", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://app.example.com"}, 200},
		{"a read from another site", "GET", "/api/v1/limiters", []string{"Sec-Fetch-Site", "cross-site"}, 200},
	} {
		code, out := call(t, s, tt.method, tt.path, consume, tt.header...)
		if e, _ := out["error"].(map[string]any); code != tt.want || (code == 403 && e["code"] != codeCrossOrigin) {
			t.Errorf("%s: %s %s = %d %v, want %d", tt.name, tt.method, tt.path, code, out, tt.want)
		}
	}
}

// TestHTTPPerClientCap: one client address that opens connections and
// stalls their bodies holds at most max_connections_per_client of them,
// so another client's consume is answered, where before such bodies held
// every connection not reserved for health checks and every API request
// was answered 503 busy until the read timeout.
func TestHTTPPerClientCap(t *testing.T) {
	const max, reserve, perClient = 64, 4, 8
	s, _ := serve(t, limitsYAML+fmt.Sprintf(`server:
  limits:
    http: {max_connections: %d, reserved_for_health: %d, max_connections_per_client: %d, read_header_timeout: 1m, read_timeout: 1m}
`, max, reserve, perClient), false)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for range 2 * max {
		c, err := d.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "POST /api/v1/consume HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+s.addr+"/api/v1/consume", "application/json", strings.NewReader(`{"limiter": "three", "key": "k"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("consume of another client beside %d stalled bodies of 127.0.0.2 = %d, want 200", 2*max, resp.StatusCode)
	}
	l := s.httpCap.Load()
	l.mu.Lock()
	held := l.clients[netip.MustParseAddr("127.0.0.2")]
	l.mu.Unlock()
	if held > perClient {
		t.Errorf("127.0.0.2 holds %d connections, want at most max_connections_per_client %d", held, perClient)
	}
}
