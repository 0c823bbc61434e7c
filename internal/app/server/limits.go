package server

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connCap is a net.Listener that holds at most max connections open, and
// at most perClient of one client address, so that clients that open
// connections and do nothing with them (or too slowly) cannot exhaust the
// process's file descriptors and memory, nor one client every connection.
//
// A new connection of a client that holds perClient first closes one of
// that client's own by the rules below, else it is closed at once.
//
// At the bound, a new connection first makes room by closing the
// connection that has been idle between two requests the longest, else
// the one that has waited the longest for its first request (but not one
// whose request has arrived unread): a health check or a client that
// asks at once always gets in, at the expense of connections that hold a
// slot without asking.
// Connections in the middle of a request are never closed. When none can
// be closed, the new connection is closed at once. Accept never fails
// for being full, which would make http.Server back off.
//
// Eviction needs the connections' states, which http.Server reports
// through its ConnState hook (connCap.track). The gRPC listener is a
// grpcCap.
type connCap struct {
	net.Listener
	max, perClient int
	refused        func() // counts a connection closed at once; may be nil

	mu      sync.Mutex
	n       int                // open connections
	clients map[netip.Addr]int // open connections by client address; none at 0
	idle    *list.List         // of *cappedConn between two requests, oldest first
	fresh   *list.List         // of *cappedConn before their first request, oldest first
}

func newConnCap(ln net.Listener, max, perClient int, refused func()) *connCap {
	return &connCap{Listener: ln, max: max, perClient: perClient, refused: refused,
		clients: make(map[netip.Addr]int), idle: list.New(), fresh: list.New()}
}

// clientOf is the address of c's client, the zero Addr when c is not
// TCP. An IPv4 client over IPv6 counts as its IPv4 address.
func clientOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// cappedConn is a connection of a connCap.
type cappedConn struct {
	net.Conn
	l      *connCap
	client netip.Addr
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
		client := clientOf(c)
		l.mu.Lock()
		var victims [2]*cappedConn
		if l.full(&client) {
			victims[0] = l.makeRoom(&client)
		}
		if l.full(nil) && !l.full(&client) {
			victims[1] = l.makeRoom(nil)
		}
		if l.full(nil) || l.full(&client) {
			l.mu.Unlock()
			c.Close()
			closeAll(victims[:])
			if l.refused != nil {
				l.refused()
			}
			continue
		}
		cc := &cappedConn{Conn: c, l: l, client: client}
		l.n++
		l.clients[client]++
		cc.wait(l.fresh)
		l.mu.Unlock()
		closeAll(victims[:])
		return cc, nil
	}
}

// makeRoom finds a victim among the connections of client (nil: all)
// and stops counting it. When every waiting connection is still in its
// grace and the listener is full, it waits (unlocking l.mu) until the
// oldest has passed it, at most twice graceWaiting in all: so a new
// connection is delayed by at most that, rather than refused, when a
// flood of connections has filled the listener with young ones. A client
// at its own bound in a listener that is not full does not wait: its
// flood would hold up every other client's accept. It returns nil when
// none can be closed, or when room was made meanwhile. makeRoom requires
// that l.mu is held.
func (l *connCap) makeRoom(client *netip.Addr) *cappedConn {
	deadline := time.Now().Add(2 * graceWaiting)
	for {
		if v := l.victim(client); v != nil {
			v.forget()
			return v
		}
		if !l.full(client) {
			return nil // room was made meanwhile
		}
		oldest := l.first(l.fresh, client)
		now := time.Now()
		if oldest == nil || !now.Before(deadline) || !l.full(nil) {
			return nil
		}
		wait := min(graceWaiting-now.Sub(oldest.since), deadline.Sub(now))
		l.mu.Unlock()
		time.Sleep(max(wait, time.Millisecond))
		l.mu.Lock()
	}
}

// full reports whether the listener, or client when not nil, holds all
// the connections it may. It requires that l.mu is held.
func (l *connCap) full(client *netip.Addr) bool {
	if client == nil {
		return l.n >= l.max
	}
	return l.clients[*client] >= l.perClient
}

// look bounds the connections of each list that victim looks at, so
// that Accept stays cheap: more for one client's, which may be anywhere
// in the lists.
const (
	look       = 16
	lookClient = 64
)

// first returns the first connection of q of client (nil: any), of the
// first lookClient. It requires that l.mu is held.
func (l *connCap) first(q *list.List, client *netip.Addr) *cappedConn {
	i := 0
	for e := q.Front(); e != nil && i < lookClient; e, i = e.Next(), i+1 {
		if c := e.Value.(*cappedConn); client == nil || c.client == *client {
			return c
		}
	}
	return nil
}

// victim returns the connection of client (nil: any) to close for room:
// the one idle the longest, else the one that has waited the longest for
// its first request, passing over those whose request has arrived but
// not been read yet (pending), those accepted or read from in the last
// graceWaiting: under a flood of new connections the server may accept
// several before it reads one, and closing the oldest of those would
// close a health check that asked at once. It looks at a bounded number
// of each list. victim requires that l.mu is held.
func (l *connCap) victim(client *netip.Addr) *cappedConn {
	n := look
	if client != nil {
		n = lookClient
	}
	now := time.Now()
	for _, q := range []*list.List{l.idle, l.fresh} {
		i := 0
	scan:
		for e := q.Front(); e != nil && i < n; e, i = e.Next(), i+1 {
			c := e.Value.(*cappedConn)
			switch {
			case client != nil && c.client != *client:
			case q == l.idle:
				return c // answered: its client's next request may open another
			case now.Sub(c.since) < graceWaiting:
				break scan // the rest of the list is younger still
			case now.UnixNano()-c.lastRead.Load() >= int64(graceWaiting) && !pending(c.Conn):
				return c
			}
		}
	}
	return nil
}

// closeAll closes the connections of cs that are not nil.
func closeAll(cs []*cappedConn) {
	for _, c := range cs {
		if c != nil {
			c.Conn.Close()
		}
	}
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
	if c.l.clients[c.client]--; c.l.clients[c.client] == 0 {
		delete(c.l.clients, c.client)
	}
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
