package server

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connCap is a net.Listener that holds at most max connections open, so
// that clients that open connections and do nothing with them (or too
// slowly) cannot exhaust the process's file descriptors and memory.
//
// At the bound, a new connection first makes room, when evict is set, by
// closing the connection that has been idle between two requests the
// longest, else the one that has waited the longest for its first
// request (but not one whose request has arrived unread): a health check or a client that asks at once always gets in,
// at the expense of connections that hold a slot without asking.
// Connections in the middle of a request are never closed. When none can
// be closed, the new connection is closed at once. Accept never fails
// for being full, which would make http.Server back off.
//
// evict needs the connections' states, which http.Server reports through
// its ConnState hook (connCap.track); without it (gRPC), a full listener
// refuses new connections.
type connCap struct {
	net.Listener
	max     int
	evict   bool
	refused func() // counts a connection closed at once; may be nil

	mu    sync.Mutex
	n     int        // open connections
	idle  *list.List // of *cappedConn between two requests, oldest first
	fresh *list.List // of *cappedConn before their first request, oldest first
}

func newConnCap(ln net.Listener, max int, evict bool, refused func()) *connCap {
	return &connCap{Listener: ln, max: max, evict: evict, refused: refused, idle: list.New(), fresh: list.New()}
}

// cappedConn is a connection of a connCap.
type cappedConn struct {
	net.Conn
	l *connCap
	// in is the list the connection waits in (fresh or idle) and el its
	// element there; nil while a request is in progress and once closed.
	// closed is set once it no longer counts. Both are guarded by l.mu.
	in     *list.List
	el     *list.Element
	closed bool
	since  time.Time // when it joined its list

	lastRead atomic.Int64 // when a Read last returned bytes, Unix nanoseconds
}

// Read reads from the connection, noting when bytes came: a connection
// whose request is being read is not closed for room (connCap.victim).
func (c *cappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

// graceWaiting is how long a new connection is spared:
// a client that asks at once has sent its request by then (loopback or
// not, the request follows the handshake), so it is not closed for room
// in the instant between its accept and its first bytes.
const graceWaiting = 50 * time.Millisecond

// Accept returns the next connection, after making room for it.
func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim *cappedConn
		if l.n >= l.max && l.evict {
			victim = l.makeRoom()
		}
		if l.n >= l.max {
			l.mu.Unlock()
			c.Close()
			if l.refused != nil {
				l.refused()
			}
			continue
		}
		cc := &cappedConn{Conn: c, l: l}
		l.n++
		cc.wait(l.fresh)
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
		}
		return cc, nil
	}
}

// makeRoom finds a victim and stops counting it. When every waiting
// connection is still in its grace, it waits (unlocking l.mu) until the
// oldest has passed it, at most twice graceWaiting in all: so a new
// connection is delayed by at most that, rather than refused, when a
// flood of connections has filled the listener with young ones. It
// returns nil when none can be closed. makeRoom requires that l.mu is
// held.
func (l *connCap) makeRoom() *cappedConn {
	deadline := time.Now().Add(2 * graceWaiting)
	for {
		if v := l.victim(); v != nil {
			v.forget()
			return v
		}
		if l.n < l.max {
			return nil // room was made meanwhile
		}
		e := l.fresh.Front()
		now := time.Now()
		if e == nil || !now.Before(deadline) {
			return nil
		}
		wait := min(graceWaiting-now.Sub(e.Value.(*cappedConn).since), deadline.Sub(now))
		l.mu.Unlock()
		time.Sleep(max(wait, time.Millisecond))
		l.mu.Lock()
	}
}

// victim returns the connection to close for room: the one idle the
// longest, else the one that has waited the longest for its first
// request, passing over those whose request has arrived but not been
// read yet (pending), those accepted or read from in the last
// graceWaiting: under a flood of new connections the server may
// accept several before it reads one, and closing the oldest of those
// would close a health check that asked at once. It looks at a bounded
// number of each list, so Accept stays cheap. victim requires that l.mu
// is held.
func (l *connCap) victim() *cappedConn {
	const look = 16
	now := time.Now()
	for _, q := range []*list.List{l.idle, l.fresh} {
		i := 0
		for e := q.Front(); e != nil && i < look; e, i = e.Next(), i+1 {
			c := e.Value.(*cappedConn)
			if q == l.idle {
				return c // answered: its client's next request may open another
			}
			if now.Sub(c.since) < graceWaiting {
				break // the rest of the list is younger still
			}
			if now.UnixNano()-c.lastRead.Load() >= int64(graceWaiting) && !pending(c.Conn) {
				return c
			}
		}
	}
	return nil
}

// CloseWrite half-closes a TCP connection, as http.Server does before it
// closes one: the client then sees the end of the answer at once.
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection, making room for another.
func (c *cappedConn) Close() error {
	c.l.mu.Lock()
	c.forget()
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// forget stops counting c. It requires that c.l.mu is held.
func (c *cappedConn) forget() {
	if c.closed {
		return
	}
	c.closed = true
	c.wait(nil)
	c.l.n--
}

// wait moves c to the back of q (nil: no list, a request in progress). It
// requires that c.l.mu is held.
func (c *cappedConn) wait(q *list.List) {
	if c.in != nil {
		c.in.Remove(c.el)
		c.in, c.el = nil, nil
	}
	if q != nil && !c.closed {
		c.in, c.el, c.since = q, q.PushBack(c), time.Now()
	}
}

// track is http.Server's ConnState hook: it tells the listener which
// connections are idle and which are in a request.
func (l *connCap) track(nc net.Conn, st http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*cappedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateActive:
		c.wait(nil)
	case http.StateIdle:
		c.wait(l.idle)
	case http.StateHijacked, http.StateClosed:
		c.forget()
	}
}

// connKey is the context key of a request's connection (Server.conn).
type connKey struct{}

// condemn makes the connection of a request that will be closed after
// its answer the first to close for room: http.Server lingers up to half
// a second before it closes a connection whose request it did not read.
func condemn(r *http.Request) {
	nc, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*cappedConn)
	if !ok {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if !c.closed {
		c.wait(nil)
		c.in, c.el = c.l.idle, c.l.idle.PushFront(c)
	}
}

// open returns the connections the listener holds.
func (l *connCap) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// admission counts the HTTP requests in progress other than the health
// checks (Server.admit).
type admission struct {
	inFlight atomic.Int64
}

// extendDeadlines gives the request of w up to d more to finish than the
// server's timeouts, from now: for a consume that waits up to max_wait_ms
// for its tokens. The request's body has been read, so the read deadline
// only bounds the server's watch for the client going away.
func extendDeadlines(w http.ResponseWriter, l HTTPLimits, d time.Duration) {
	rc := http.NewResponseController(w)
	now := time.Now()
	_ = rc.SetReadDeadline(now.Add(d + l.ReadTimeout))
	_ = rc.SetWriteDeadline(now.Add(d + l.WriteTimeout))
}
