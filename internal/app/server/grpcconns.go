package server

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// grpcCap is the gRPC listener's connCap: it holds at most max
// connections open, at most perClient of one client address, and keeps
// reserved of them for connections that made a rate-limit call.
//
// gRPC multiplexes calls on a connection and says nothing of its state,
// so the server's interceptors tell the listener when a call starts and
// ends (grpcConn.begin, grpcConn.end), and whether it is a rate-limit
// call or a health check. A connection is idle when it has no call in
// progress; every connection is spared for grace after its last call
// started or ended, or after its accept, so that a new client has time
// to make its first call and a busy one is never closed between two.
//
// A connection that never made a rate-limit call (only health checks,
// or nothing) may be closed for room whatever it is doing, the one whose
// last call is the oldest first: health checks come back on a new
// connection and cost nothing to restart. A connection that made one is
// closed for room only when idle, the one idle the longest, and only
// while more than reserved such connections are open. So one client
// opening connections for health checks alone can never close one that
// serves Envoy's calls, however many it opens, and a client that
// makes calls on many idle connections gives them up to others.
//
// At each new connection, in order: a client that holds perClient
// closes one of its own (by the rules above, but with the grace of
// graceWaiting, 50 ms: a client whose connections come back as soon as
// they are closed, as gRPC clients' do, would otherwise keep all of its
// own young, and another client at the same address, such as a new
// Envoy behind the same NAT, out), or the new one is closed;
// connections that made no rate-limit call (the new one counting as
// one) holding max-reserved close one of theirs, or the new one is
// closed; max connections close one, or the new one is closed. A new
// connection closed at once is counted by refused.
type grpcCap struct {
	net.Listener
	max, perClient, reserved int
	grace                    time.Duration
	refused                  func() // may be nil

	mu      sync.Mutex
	conns   map[*grpcConn]struct{}
	clients map[netip.Addr]int // open connections by client address; none at 0
	callers int                // open connections that made a rate-limit call
}

func newGRPCCap(ln net.Listener, l GRPCLimits, grace time.Duration, refused func()) *grpcCap {
	return &grpcCap{Listener: ln, max: int(l.MaxConnections), perClient: int(l.MaxConnectionsPerClient), reserved: int(l.ReservedForCalls),
		grace: grace, refused: refused, conns: make(map[*grpcConn]struct{}), clients: make(map[netip.Addr]int)}
}

// grpcGrace is how long a gRPC connection is spared after its accept and
// after each call starts or ends: longer than a client takes to make its
// first call after a TLS and HTTP/2 handshake, even at a continent's
// round trips.
const grpcGrace = time.Second

// grpcConn is a connection of a grpcCap.
type grpcConn struct {
	net.Conn
	l      *grpcCap
	client netip.Addr

	// closed and caller are guarded by l.mu: closed once the connection
	// no longer counts, caller once it made a rate-limit call.
	closed, caller bool
	isCaller       atomic.Bool  // caller, read without the lock
	active         atomic.Int64 // calls in progress
	last           atomic.Int64 // Unix nanoseconds of the accept, or of the last health check's start or call's end
}

// Accept returns the next connection, after making room for it.
func (l *grpcCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc := &grpcConn{Conn: c, l: l, client: clientOf(c)}
		l.mu.Lock()
		victims, ok := l.admit(gc, time.Now().UnixNano())
		l.mu.Unlock()
		for _, v := range victims {
			v.Conn.Close()
		}
		if ok {
			return gc, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused()
		}
	}
}

// admit decides on c, a new connection, at now (Unix nanoseconds): it
// counts c when it may be held, after making room for it by the rules of
// grpcCap, and returns the connections to close for that room, which it
// no longer counts (it may close some and still refuse c). admit requires
// that l.mu is held.
func (l *grpcCap) admit(c *grpcConn, now int64) (victims []*grpcConn, ok bool) {
	room := func(of func(*grpcConn) bool, callers bool, grace time.Duration) bool {
		v := l.victim(now, of, callers, grace)
		if v != nil {
			v.forget()
			victims = append(victims, v)
		}
		return v != nil
	}
	own := func(v *grpcConn) bool { return v.client == c.client }
	ok = l.clients[c.client] < l.perClient || room(own, true, min(l.grace, graceWaiting))
	ok = ok && (l.len()-l.callers < l.max-l.reserved || room(nil, false, l.grace))
	ok = ok && (l.len() < l.max || room(nil, true, l.grace))
	if ok {
		c.last.Store(now)
		l.conns[c] = struct{}{}
		l.clients[c.client]++
	}
	return victims, ok
}

// len is the number of open connections. It requires that l.mu is held.
func (l *grpcCap) len() int { return len(l.conns) }

// victim returns the connection to close for room among those of (nil:
// all), by the rules of grpcCap: of those past grace, the one that never
// made a rate-limit call whose last call is the oldest, else, when
// callers is set, the idle one that made one and is idle the longest.
// It looks at every connection, at most max. victim requires that l.mu
// is held.
func (l *grpcCap) victim(now int64, of func(*grpcConn) bool, callers bool, grace time.Duration) *grpcConn {
	var quiet, idle *grpcConn
	for c := range l.conns {
		last := c.last.Load()
		if now-last < int64(grace) || of != nil && !of(c) {
			continue
		}
		switch {
		case !c.caller:
			if quiet == nil || last < quiet.last.Load() {
				quiet = c
			}
		case callers && c.active.Load() == 0:
			if idle == nil || last < idle.last.Load() {
				idle = c
			}
		}
	}
	if quiet != nil {
		return quiet
	}
	return idle
}

// begin tells c's listener that a call starts on c, a rate-limit call
// when call is set; end that it ended. A rate-limit call needs no time
// at its start: its connection is a caller in a call, which is never
// closed for room, until end.
func (c *grpcConn) begin(call bool) {
	c.active.Add(1)
	if !call {
		c.last.Store(time.Now().UnixNano())
		return
	}
	if !c.isCaller.Load() {
		c.l.mu.Lock()
		if !c.closed && !c.caller {
			c.caller = true
			c.l.callers++
		}
		c.l.mu.Unlock()
		c.isCaller.Store(true)
	}
}

func (c *grpcConn) end() {
	c.last.Store(time.Now().UnixNano())
	c.active.Add(-1)
}

// Close closes the connection, making room for another.
func (c *grpcConn) Close() error {
	c.l.mu.Lock()
	c.forget()
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// forget stops counting c. It requires that c.l.mu is held.
func (c *grpcConn) forget() {
	if c.closed {
		return
	}
	c.closed = true
	l := c.l
	delete(l.conns, c)
	if l.clients[c.client]--; l.clients[c.client] == 0 {
		delete(l.clients, c.client)
	}
	if c.caller {
		l.callers--
	}
}

// open returns the connections the listener holds.
func (l *grpcCap) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.len()
}

// connCreds are the gRPC server's transport credentials (TLS, or none)
// with the connection of a call in its peer's AuthInfo, where the
// interceptors find it (grpcConnOf): gRPC hands a call no other link to
// the net.Conn the listener accepted.
type connCreds struct {
	credentials.TransportCredentials
}

// connInfo is a connection's AuthInfo: the credentials' own, and the
// connection.
type connInfo struct {
	credentials.AuthInfo
	conn *grpcConn
}

func (c connCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	gc, _ := raw.(*grpcConn)
	return conn, connInfo{info, gc}, nil
}

func (c connCreds) Clone() credentials.TransportCredentials {
	return connCreds{c.TransportCredentials.Clone()}
}

// grpcConnOf returns the connection of the call of ctx and the AuthInfo
// of its credentials; the connection is nil when the listener is no
// grpcCap.
func grpcConnOf(ctx context.Context) (*grpcConn, credentials.AuthInfo) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil
	}
	if ci, ok := p.AuthInfo.(connInfo); ok {
		return ci.conn, ci.AuthInfo
	}
	return nil, p.AuthInfo
}
