// Command rlsload drives Envoy's rate-limit gRPC API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) for a fixed
// time from a number of concurrent callers and prints the decisions per
// second and the latency percentiles. It speaks only the public API, so the
// same run measures sluice serve and envoyproxy/ratelimit alike; see
// scripts/loadtest.sh.
//
// The load side shares the machine with the servers under test, so every
// microsecond it spends is one they lose. rlsload therefore speaks gRPC's
// HTTP/2 framing itself (h2conn) instead of through grpc-go's client: each
// connection is one goroutine that reads the replies and writes its
// callers' next requests, encoded ahead, with no goroutine hand-off per
// call. The servers see ordinary gRPC calls.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the server's gRPC address")
	domain := flag.String("domain", "load", "the domain of every request")
	key := flag.String("key", "client", "the descriptor entry's key; its value is one of -keys values")
	keys := flag.Int("keys", 1000, "how many distinct descriptor values to spread the load over")
	conc := flag.Int("c", 64, "concurrent callers")
	conns := flag.Int("conns", 4, "HTTP/2 connections the callers share")
	dur := flag.Duration("d", 10*time.Second, "how long to run")
	flag.Parse()
	r, err := run(*addr, *domain, *key, *keys, *conc, *conns, *dur)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
	r.print()
}

// report is what a run counted: a call is ok or over_limit by its reply's
// overall_code, an error when it failed (a gRPC status other than OK, a
// reset stream, a reply that cannot be read).
type report struct {
	ok, over, failed int64
	firstErr         error
	lat              []time.Duration // of every ok and over_limit call
	elapsed          time.Duration
}

func (r *report) add(o *report) {
	r.ok, r.over, r.failed = r.ok+o.ok, r.over+o.over, r.failed+o.failed
	r.firstErr = cmp(r.firstErr, o.firstErr)
	r.lat = append(r.lat, o.lat...)
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (r *report) print() {
	slices.Sort(r.lat)
	pct := func(p int) time.Duration { return r.lat[(len(r.lat)-1)*p/100] }
	fmt.Printf("requests %d (ok %d, over_limit %d, errors %d) in %v\n", len(r.lat), r.ok, r.over, r.failed, r.elapsed.Round(time.Millisecond))
	if r.firstErr != nil {
		fmt.Printf("first error: %v\n", r.firstErr)
	}
	fmt.Printf("decisions/s %.0f  p50 %v  p99 %v  max %v\n", float64(len(r.lat))/r.elapsed.Seconds(),
		pct(50).Round(time.Microsecond), pct(99).Round(time.Microsecond), r.lat[len(r.lat)-1].Round(time.Microsecond))
}

func run(addr, domain, key string, keys, conc, conns int, dur time.Duration) (*report, error) {
	if keys <= 0 || conc <= 0 || conns <= 0 || dur <= 0 {
		return nil, errors.New("-keys, -c, -conns and -d must be positive")
	}
	conns = min(conns, conc)
	// One request per key, encoded ahead with its gRPC message prefix.
	reqs := make([][]byte, keys)
	for i := range reqs {
		b, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: "k" + strconv.Itoa(i)}},
		}}})
		if err != nil {
			return nil, err
		}
		reqs[i] = grpcMessage(b)
	}
	cs := make([]*h2conn, conns)
	for i := range cs {
		c, err := dial(addr, reqs)
		if err != nil {
			for _, c := range cs[:i] {
				c.close()
			}
			return nil, err
		}
		cs[i] = c
	}
	start := time.Now()
	end := start.Add(dur)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all report
		err error
	)
	for i, c := range cs {
		// Caller g (of conc) is stream slot g/conns of connection g%conns.
		calls := conc / conns
		if i < conc%conns {
			calls++
		}
		wg.Go(func() {
			defer c.close()
			r, e := c.drive(i, conns, conc, calls, end)
			mu.Lock()
			defer mu.Unlock()
			all.add(r)
			err = cmp(err, e)
		})
	}
	wg.Wait()
	all.elapsed = time.Since(start)
	if err != nil {
		return nil, err
	}
	if len(all.lat) == 0 {
		return nil, fmt.Errorf("no request succeeded (%d failed; first error: %v)", all.failed, all.firstErr)
	}
	return &all, nil
}

// grpcMessage is msg in gRPC's length-prefixed framing, uncompressed.
func grpcMessage(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[1], b[2], b[3], b[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
	return append(b, msg...)
}

// reply reads a gRPC reply body, one uncompressed RateLimitResponse, for
// its overall_code.
func reply(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	if len(b) < 5 {
		return 0, fmt.Errorf("reply of %d bytes: no gRPC message", len(b))
	}
	if b[0] != 0 {
		return 0, fmt.Errorf("reply: compressed flag %d, want 0", b[0])
	}
	if n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4]); n != len(b)-5 {
		return 0, fmt.Errorf("reply: message of %d bytes announced, %d sent", n, len(b)-5)
	}
	return overallCode(b[5:])
}

// overallCode reads a RateLimitResponse's overall_code (field 1) from its
// encoding, UNKNOWN when absent, as proto3 leaves a zero value out.
func overallCode(b []byte) (rlsv3.RateLimitResponse_Code, error) {
	code := rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("reply: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, fmt.Errorf("reply: %w", protowire.ParseError(m))
			}
			code, b = rlsv3.RateLimitResponse_Code(v), b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, fmt.Errorf("reply: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return code, nil
}
