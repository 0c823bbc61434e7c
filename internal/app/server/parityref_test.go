//go:build parityref

package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testserver"
)

// TestParityReference runs the parity suite against envoyproxy/ratelimit
// itself, to check the expected answers: build its service_cmd into a
// temporary directory (never into the repository) and run
//
//	SLUICE_RATELIMIT_BIN=/tmp/rlbin/service_cmd go test -tags parityref -run TestParityReference ./internal/app/server/
//
// The reference runs on the wall clock, so the steps of a case must share
// one time; durations and reset headers are checked to lie within the
// unit, and stats are not checked (the reference writes them to statsd).
// Cases that change files mid-way are skipped.
func TestParityReference(t *testing.T) {
	bin := os.Getenv("SLUICE_RATELIMIT_BIN")
	if bin == "" {
		t.Skip("SLUICE_RATELIMIT_BIN names no envoyproxy/ratelimit binary")
	}
	url := testserver.SharedRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	var passed, total int
	for name, c := range parityCases(t) {
		t.Run(name, func(t *testing.T) {
			if reason := unreplayable(c); reason != "" {
				t.Skip(reason)
			}
			if err := rc.FlushDB(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			// A slow start may cross a window's end: such a case gets one
			// more try, in a subtest whose failures are its own.
			p, n := 0, 0
			for try := 0; try < 2 && (try == 0 || p < n); try++ {
				ok := t.Run(fmt.Sprintf("try%d", try), func(t *testing.T) {
					if err := rc.FlushDB(t.Context()).Err(); err != nil {
						t.Fatal(err)
					}
					p, n = runReference(t, bin, opt.Addr, c)
				})
				if ok {
					break
				}
			}
			passed, total = passed+p, total+n
		})
	}
	t.Logf("envoyproxy/ratelimit answers %d of %d replayable steps as the suite expects", passed, total)
}

func unreplayable(c parityCase) string {
	at := int64(-1)
	for _, s := range c.Steps {
		if len(s.Write) > 0 || len(s.Remove) > 0 {
			return "changes files mid-way"
		}
		if s.At != 0 && at >= 0 && s.At != at {
			return "steps at different times"
		}
		if s.At != 0 {
			at = s.At
		}
	}
	return ""
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

func runReference(t *testing.T, bin, redisAddr string, c parityCase) (passed, total int) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range c.Files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	grpcPort := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "HOST=127.0.0.1", "PORT="+freePort(t),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+freePort(t), "EXPIRATION_JITTER_MAX_SECONDS=0")
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs testserver.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cc, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.Dial("tcp", "127.0.0.1:"+grpcPort)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit did not listen:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.LoadError != "" {
		_, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "test-domain",
			Descriptors: (parityStep{Descriptors: []parityDesc{{Entries: [][2]string{{"k", "v"}}}}}).protoDescs()})
		if err == nil || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
			t.Errorf("envoyproxy/ratelimit answered %v with a config that should not load (%s)", err, c.LoadError)
			return 0, 1
		}
		return 1, 1
	}
	// Start at the beginning of a second, so that a case's windows do not
	// turn under it.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	for i, step := range c.Steps {
		if step.Want.Kind == 0 && step.Error == nil {
			continue
		}
		total++
		req := &rlsv3.RateLimitRequest{Domain: step.Domain, HitsAddend: step.HitsAddend, Descriptors: step.protoDescs()}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		name := fmt.Sprintf("step %d (%s)", i, step.Name)
		if step.Error != nil {
			st, _ := status.FromError(err)
			if err == nil || st.Code().String() != step.Error.Code || !strings.Contains(st.Message(), step.Error.Message) {
				t.Errorf("%s: envoyproxy/ratelimit = %v, %v; want error %s %q", name, resp, err, step.Error.Code, step.Error.Message)
				continue
			}
			passed++
			continue
		}
		if err != nil {
			t.Errorf("%s: envoyproxy/ratelimit error %v", name, err)
			continue
		}
		want, err := wantResponse(step.Want)
		if err != nil {
			t.Fatal(err)
		}
		got := proto.Clone(resp).(*rlsv3.RateLimitResponse)
		blurTimes(got)
		blurTimes(want)
		if !proto.Equal(got, want) {
			t.Errorf("%s: envoyproxy/ratelimit =\n  %s\nthe suite expects\n  %s", name, protojson.Format(resp), protojson.Format(want))
			continue
		}
		passed++
	}
	return passed, total
}

// blurTimes replaces the durations and reset headers of r, which depend
// on the wall clock, by whether they are set.
func blurTimes(r *rlsv3.RateLimitResponse) {
	for _, s := range r.GetStatuses() {
		if s.DurationUntilReset != nil {
			s.DurationUntilReset.Seconds, s.DurationUntilReset.Nanos = 1, 0
		}
	}
	for _, h := range r.GetResponseHeadersToAdd() {
		if strings.HasSuffix(strings.ToLower(h.GetKey()), "reset") {
			h.Value = "set"
		}
	}
}
