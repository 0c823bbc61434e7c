// Command rlsload drives Envoy's rate-limit gRPC API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) for a fixed
// time from a number of concurrent callers and prints the decisions per
// second and the latency percentiles. It speaks only the public API, so the
// same run measures sluice serve and envoyproxy/ratelimit alike; see
// scripts/loadtest.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
	conns := flag.Int("conns", 4, "gRPC connections the callers share")
	dur := flag.Duration("d", 10*time.Second, "how long to run")
	flag.Parse()
	if err := run(*addr, *domain, *key, *keys, *conc, *conns, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

func run(addr, domain, key string, keys, conc, conns int, dur time.Duration) error {
	if keys <= 0 || conc <= 0 || conns <= 0 || dur <= 0 {
		return fmt.Errorf("-keys, -c, -conns and -d must be positive")
	}
	clients := make([]*grpc.ClientConn, conns)
	for i := range clients {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			return err
		}
		defer cc.Close()
		clients[i] = cc
	}
	// One request per key, encoded ahead so the loop measures the server.
	reqs := make([]frame, keys)
	for i := range reqs {
		b, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: "k" + strconv.Itoa(i)}},
		}}})
		if err != nil {
			return err
		}
		reqs[i] = frame{b}
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var ok, over, failed int64
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Go(func() {
			c := clients[g%len(clients)]
			var mine []time.Duration
			var o, v, f int64
			var ferr error
			var resp frame
			for i := g; ctx.Err() == nil; i += conc {
				t0 := time.Now()
				err := c.Invoke(ctx, method, &reqs[i%len(reqs)], &resp)
				var code rlsv3.RateLimitResponse_Code
				if err == nil {
					code, err = overallCode(resp.b)
				}
				if err != nil {
					// The run's own deadline ends calls in flight; gRPC may
					// report it a moment before ctx does.
					if c := status.Code(err); ctx.Err() == nil && c != codes.DeadlineExceeded && c != codes.Canceled {
						f++
						if ferr == nil {
							ferr = err
						}
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				if code == rlsv3.RateLimitResponse_OVER_LIMIT {
					v++
				} else {
					o++
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			ok, over, failed = ok+o, over+v, failed+f
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		return fmt.Errorf("no request succeeded (%d failed)", failed)
	}
	slices.Sort(lat)
	pct := func(p int) time.Duration { return lat[(len(lat)-1)*p/100] }
	fmt.Printf("requests %d (ok %d, over_limit %d, errors %d) in %v\n", len(lat), ok, over, failed, elapsed.Round(time.Millisecond))
	if firstErr != nil {
		fmt.Printf("first error: %v\n", firstErr)
	}
	fmt.Printf("decisions/s %.0f  p50 %v  p99 %v  max %v\n", float64(len(lat))/elapsed.Seconds(),
		pct(50).Round(time.Microsecond), pct(99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	return nil
}

// frame is a message as its encoding. rawCodec sends a request's bytes as
// they are and keeps a reply's, so the load generator spends no CPU on
// protobuf, which on a loaded machine would be CPU taken from the server
// under test's neighbours; the server sees the same bytes on the wire.
type frame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*frame).b, nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	f := v.(*frame)
	f.b = append(f.b[:0], data...) // data is gRPC's, valid during the call only
	return nil
}

func (rawCodec) Name() string { return "proto" }

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
