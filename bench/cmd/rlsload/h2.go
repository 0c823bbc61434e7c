package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is one HTTP/2 connection to the server, its callers as streams,
// driven by drive on one goroutine: a caller's next request goes out as
// soon as its reply is read.
type h2conn struct {
	nc      net.Conn
	bw      *bufio.Writer
	br      *bufio.Reader
	fr      *http2.Framer
	dec     *hpack.Decoder
	headers []byte   // every request's HEADERS block
	reqs    [][]byte // the request bodies, gRPC framed
	cur     *call    // whose header block dec is decoding

	sendWin   int64 // what the connection's flow control lets us send
	streamWin int64 // what a new stream's lets us send
	maxStream int64 // the server's SETTINGS_MAX_CONCURRENT_STREAMS; -1 for no bound
	unacked   int64 // DATA bytes received and not yet given back
}

// call is one caller: its stream under way, if any, and the reply so far.
type call struct {
	id      uint32 // the stream under way; 0 for none
	caller  int    // which of the run's callers
	sent    int    // how many requests it has sent
	started time.Time
	waiting bool // for flow control to send its next request
	body    []byte
	status  string // :status
	grpc    string // grpc-status
	message string // grpc-message
}

// recvWindow is the connection's receive window; replies are small and are
// read at once, so it is given back in large steps.
const recvWindow = 1 << 30

func dial(addr string, reqs [][]byte) (*h2conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2conn{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), br: bufio.NewReaderSize(nc, 64<<10),
		reqs: reqs, sendWin: 65535, streamWin: 65535, maxStream: -1}
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		switch f.Name {
		case ":status":
			c.cur.status = f.Value
		case "grpc-status":
			c.cur.grpc = f.Value
		case "grpc-message":
			c.cur.message = f.Value
		}
	})
	// Fields marked sensitive are never indexed, so the block does not
	// depend on the server's table and is encoded once.
	var hb bytesWriter
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}); err != nil {
			nc.Close()
			return nil, err
		}
	}
	c.headers = hb
	if err := c.handshake(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: HTTP/2 handshake: %w", addr, err)
	}
	return c, nil
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// handshake sends the preface and our settings, and reads up to the
// server's settings, which bound the streams.
func (c *h2conn) handshake() error {
	if err := c.nc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return err
	}
	if err := c.fr.WriteWindowUpdate(0, recvWindow-65535); err != nil {
		return err
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			return c.settings(s)
		}
		if err := c.control(f); err != nil {
			return err
		}
	}
}

func (c *h2conn) settings(s *http2.SettingsFrame) error {
	if v, ok := s.Value(http2.SettingInitialWindowSize); ok {
		c.streamWin = int64(v)
	}
	if v, ok := s.Value(http2.SettingMaxConcurrentStreams); ok {
		c.maxStream = int64(v)
	}
	return c.fr.WriteSettingsAck()
}

// control handles a frame that is not about a stream's reply.
func (c *h2conn) control(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			return c.settings(f)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.sendWin += int64(f.Increment)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		return fmt.Errorf("server sent GOAWAY (%v, %q)", f.ErrCode, f.DebugData())
	}
	return nil
}

func (c *h2conn) close() { c.nc.Close() }

// drive runs the callers of connection conn (of conns; conc callers in
// all) until end, then waits for the calls under way, and reports them.
func (c *h2conn) drive(conn, conns, conc, callers int, end time.Time) (*report, error) {
	r := &report{}
	if c.maxStream >= 0 && int64(callers) > c.maxStream {
		return r, fmt.Errorf("the server allows %d concurrent streams a connection and %d callers share one: raise -conns", c.maxStream, callers)
	}
	// Bounds a server that stops answering: the run ends anyway.
	if err := c.nc.SetDeadline(end.Add(10 * time.Second)); err != nil {
		return r, err
	}
	calls := make([]call, callers)
	nextID := uint32(1)
	active, waiting := 0, 0 // calls under way, and callers waiting for flow control
	start := func(cl *call, now time.Time) error {
		req := c.reqs[(cl.caller+cl.sent*conc)%len(c.reqs)]
		if int64(len(req)) > c.streamWin {
			return fmt.Errorf("a request of %d bytes exceeds the server's stream window of %d", len(req), c.streamWin)
		}
		if int64(len(req)) > c.sendWin {
			if !cl.waiting {
				cl.waiting = true
				waiting++
			}
			return nil
		}
		if cl.waiting {
			cl.waiting = false
			waiting--
		}
		if nextID > 1<<31-1 {
			return errors.New("stream ids exhausted on one connection: raise -conns or shorten -d")
		}
		*cl = call{id: nextID, caller: cl.caller, sent: cl.sent + 1, started: now, body: cl.body[:0]}
		nextID += 2
		c.sendWin -= int64(len(req))
		active++
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: cl.id, BlockFragment: c.headers, EndHeaders: true}); err != nil {
			return err
		}
		return c.fr.WriteData(cl.id, true, req)
	}
	now := time.Now()
	for i := range calls {
		calls[i].caller = i*conns + conn
		if err := start(&calls[i], now); err != nil {
			return r, err
		}
	}
	find := func(id uint32) *call {
		for i := range calls {
			if calls[i].id == id {
				return &calls[i]
			}
		}
		return nil
	}
	// finish counts cl's call and sends its next request, unless the run
	// is over.
	finish := func(cl *call, failure error) error {
		now := time.Now()
		if failure == nil {
			failure = c.verdict(cl, r, now)
		}
		if failure != nil {
			r.failed++
			r.firstErr = cmp(r.firstErr, fmt.Errorf("caller %d, call %d: %w", cl.caller, cl.sent, failure))
		}
		cl.id = 0
		active--
		if now.Before(end) {
			return start(cl, now)
		}
		return nil
	}
	for active > 0 || waiting > 0 {
		if c.br.Buffered() == 0 {
			if err := c.bw.Flush(); err != nil {
				return r, err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return r, err
		}
		id := f.Header().StreamID
		if id == 0 {
			if err := c.control(f); err != nil {
				return r, err
			}
			if waiting > 0 {
				for i := range calls {
					if !calls[i].waiting {
						continue
					}
					if !time.Now().Before(end) { // the run is over: it need not send
						calls[i].waiting = false
						waiting--
					} else if err := start(&calls[i], time.Now()); err != nil {
						return r, err
					}
				}
			}
			continue
		}
		cl := find(id)
		if cl == nil {
			continue // a frame for a stream we no longer track (WINDOW_UPDATE, say)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if err := c.header(cl, f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return r, err
			}
			if f.StreamEnded() {
				err = finish(cl, nil)
			}
		case *http2.ContinuationFrame:
			if err := c.header(cl, f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return r, err
			}
		case *http2.DataFrame:
			cl.body = append(cl.body, f.Data()...)
			if c.unacked += int64(f.Header().Length); c.unacked >= recvWindow/2 {
				if err := c.fr.WriteWindowUpdate(0, uint32(c.unacked)); err != nil {
					return r, err
				}
				c.unacked = 0
			}
			if f.StreamEnded() {
				err = finish(cl, nil)
			}
		case *http2.RSTStreamFrame:
			err = finish(cl, fmt.Errorf("stream reset by the server: %v", f.ErrCode))
		}
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// header decodes a fragment of cl's reply headers (or trailers).
func (c *h2conn) header(cl *call, frag []byte, ended bool) error {
	c.cur = cl
	if _, err := c.dec.Write(frag); err != nil {
		return fmt.Errorf("reply headers: %w", err)
	}
	if ended {
		if err := c.dec.Close(); err != nil {
			return fmt.Errorf("reply headers: %w", err)
		}
	}
	return nil
}

// verdict counts cl's finished call as ok or over_limit, or returns why
// it failed.
func (c *h2conn) verdict(cl *call, r *report, now time.Time) error {
	if cl.status != "200" {
		return fmt.Errorf("HTTP status %q", cl.status)
	}
	if cl.grpc != "0" {
		if cl.grpc == "" {
			return errors.New("reply without a grpc-status")
		}
		return fmt.Errorf("grpc-status %s: %s", cl.grpc, cl.message)
	}
	code, err := reply(cl.body)
	if err != nil {
		return err
	}
	r.lat = append(r.lat, now.Sub(cl.started))
	if code == rlsv3.RateLimitResponse_OVER_LIMIT {
		r.over++
	} else {
		r.ok++
	}
	return nil
}
