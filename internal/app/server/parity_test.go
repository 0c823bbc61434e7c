package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testserver"
	"github.com/sluicehq/sluice/sluicetest"
)

// The parity suite: cases taken from envoyproxy/ratelimit's own tests,
// one file per test function under internal/app/envoyrls/testdata/parity,
// each with the reference's config files, the requests and the answers
// the reference gives. Each case runs against sluice serve, over gRPC, on
// the in-memory store and on Redis; docs/envoy.md describes the format.

// parityCase is one file of the suite.
type parityCase struct {
	// Source names the reference's test function the case comes from.
	Source string `yaml:"source"`
	// Env are envoyproxy/ratelimit's environment variables.
	Env map[string]string `yaml:"env"`
	// Files are the config files, by name, under
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
	Files map[string]string `yaml:"files"`
	// LoadError, when set, is part of the error loading the files must
	// give; the case has no steps then.
	LoadError string       `yaml:"load_error"`
	Steps     []parityStep `yaml:"steps"`
}

// parityStep is one request and the answer to it.
type parityStep struct {
	Name string `yaml:"name"`
	// Write and Remove change the config files before the step; the
	// server then looks at them, as its watcher does each second. A step
	// with neither want nor error sends no request.
	Write  map[string]string `yaml:"write"`
	Remove []string          `yaml:"remove"`
	// At is the request's time, Unix seconds; 0 keeps the previous
	// step's, and the first step's default is 1000000.
	At          int64        `yaml:"at"`
	Domain      string       `yaml:"domain"`
	HitsAddend  uint32       `yaml:"hits_addend"`
	Descriptors []parityDesc `yaml:"descriptors"`
	// Want is the response in protojson form; Error the gRPC status
	// code and part of the message instead.
	Want  yaml.Node `yaml:"want"`
	Error *struct {
		Code    string `yaml:"code"`
		Message string `yaml:"message"`
	} `yaml:"error"`
	// Stats are counters expected after the step, by stat key and stat
	// (total_hits, over_limit, near_limit, within_limit, shadow_mode,
	// over_limit_with_local_cache).
	Stats map[string]map[string]uint64 `yaml:"stats"`
}

type parityDesc struct {
	Entries    [][2]string `yaml:"entries"`
	HitsAddend *uint64     `yaml:"hits_addend"`
	Limit      *struct {
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
		Unit            string `yaml:"unit"`
	} `yaml:"limit"`
}

func (d parityDesc) proto() *ratelimitv3.RateLimitDescriptor {
	out := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range d.Entries {
		out.Entries = append(out.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	if d.HitsAddend != nil {
		out.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
	}
	if d.Limit != nil {
		out.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
			RequestsPerUnit: d.Limit.RequestsPerUnit,
			Unit:            typev3.RateLimitUnit(typev3.RateLimitUnit_value[d.Limit.Unit]),
		}
	}
	return out
}

func (s parityStep) protoDescs() []*ratelimitv3.RateLimitDescriptor {
	var out []*ratelimitv3.RateLimitDescriptor
	for _, d := range s.Descriptors {
		out = append(out, d.proto())
	}
	return out
}

// parityCases reads every case of the suite.
func parityCases(t *testing.T) map[string]parityCase {
	t.Helper()
	files, err := filepath.Glob("../envoyrls/testdata/parity/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no parity cases: %v", err)
	}
	cases := make(map[string]parityCase, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c parityCase
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if c.Source == "" || (c.LoadError == "") == (len(c.Steps) == 0) {
			t.Fatalf("%s: a case names its source and has either a load_error or steps", f)
		}
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = c
	}
	return cases
}

// TestParity runs the parity suite on the in-memory store and on Redis,
// and reports the share of steps that answer as the reference.
func TestParity(t *testing.T) {
	cases := parityCases(t)
	stores := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "mem://" }},
		{"redis", func(t *testing.T) string {
			url := testserver.SharedRedis(t)
			opt, err := redis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(opt)
			defer c.Close()
			if err := c.FlushDB(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			return url
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			var passed, total int
			for name, c := range cases {
				t.Run(name, func(t *testing.T) {
					p, n := runParity(t, c, st.url(t))
					passed, total = passed+p, total+n
				})
			}
			t.Logf("parity on %s: %d of %d steps and load checks answer as envoyproxy/ratelimit (%.1f%%)",
				st.name, passed, total, 100*float64(passed)/float64(max(total, 1)))
		})
	}
}

// runParity runs case c on the store at url and returns the steps (and
// load check) that passed, and how many there were.
func runParity(t *testing.T, c parityCase, url string) (passed, total int) {
	for k, v := range c.Env {
		t.Setenv(k, v)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	for name, data := range c.Files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Files) == 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("RUNTIME_ROOT", root)
	t.Setenv("RUNTIME_SUBDIRECTORY", "ratelimit")
	t.Setenv("SLUICE_ALLOW_REQUEST_LIMITS", "true") // envoyproxy/ratelimit honours limit overrides
	// envoyproxy/ratelimit publishes every stat key, request values
	// included (detailed_metric, value_to_metric, overrides).
	cfg, err := LoadConfig([]byte("store: " + url + "\nserver: {auth: {open_metrics_with_request_values: true}}\n"))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	clock := fakeTime{sluicetest.NewFakeClock(time.Unix(1000000, 0).UnixNano())}
	s, err := New(t.Context(), cfg, withClock(clock, clock.now))
	if c.LoadError != "" {
		total = 1
		var ce *config.Error
		switch {
		case err == nil:
			s.Close()
			t.Errorf("the config loaded; want an error with %q", c.LoadError)
		case !strings.Contains(err.Error(), c.LoadError):
			t.Errorf("load error = %v; want it to contain %q", err, c.LoadError)
		case !errorsAs(err, &ce) || ce.File == "":
			t.Errorf("load error %v does not name the file", err)
		default:
			passed = 1
		}
		return passed, total
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	client := serveGRPC(t, s)
	for i, step := range c.Steps {
		if len(step.Write) > 0 || len(step.Remove) > 0 {
			for name, data := range step.Write {
				if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range step.Remove {
				if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
					t.Fatal(err)
				}
			}
			s.reloadEnvoyFiles()
		}
		if step.Want.Kind == 0 && step.Error == nil {
			continue
		}
		total++
		if step.At != 0 {
			clock.Set(time.Unix(step.At, 0).UnixNano())
		}
		name := fmt.Sprintf("step %d", i)
		if step.Name != "" {
			name += " (" + step.Name + ")"
		}
		if checkStep(t, name, client, s, step) {
			passed++
		}
	}
	return passed, total
}

func errorsAs(err error, ce **config.Error) bool {
	e, ok := err.(*config.Error)
	*ce = e
	return ok
}

// serveGRPC serves s's gRPC on a loopback port until the test ends and
// returns a client of Envoy's service.
func serveGRPC(t *testing.T, s *Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lns[0], lns[1]) }()
	cc, err := grpc.NewClient(lns[1].Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		cancel()
		<-done
	})
	return rlsv3.NewRateLimitServiceClient(cc)
}

// checkStep sends step's request and compares the answer.
func checkStep(t *testing.T, name string, client rlsv3.RateLimitServiceClient, s *Server, step parityStep) bool {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: step.Domain, HitsAddend: step.HitsAddend, Descriptors: step.protoDescs()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, req)
	if step.Error != nil {
		st, _ := status.FromError(err)
		if err == nil || st.Code().String() != step.Error.Code || !strings.Contains(st.Message(), step.Error.Message) {
			t.Errorf("%s: ShouldRateLimit = %v, %v; want error %s %q", name, resp, err, step.Error.Code, step.Error.Message)
			return false
		}
		return true
	}
	if err != nil {
		t.Errorf("%s: ShouldRateLimit error %v", name, err)
		return false
	}
	want, err := wantResponse(step.Want)
	if err != nil {
		t.Fatalf("%s: want: %v", name, err)
	}
	ok := true
	if !proto.Equal(resp, want) {
		t.Errorf("%s: ShouldRateLimit =\n  %s\nwant\n  %s", name, protojson.Format(resp), protojson.Format(want))
		ok = false
	}
	for key, stats := range step.Stats {
		for stat, n := range stats {
			if got := statValue(t, s, key, stat); got != n {
				t.Errorf("%s: stat %s.%s = %d, want %d", name, key, stat, got, n)
				ok = false
			}
		}
	}
	return ok
}

// wantResponse decodes a response written in YAML in protojson form.
func wantResponse(n yaml.Node) (*rlsv3.RateLimitResponse, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := &rlsv3.RateLimitResponse{}
	return out, protojson.Unmarshal(data, out)
}

// statValue is the counter of stat for the stat key, as /metrics shows
// it: domain, then key1 and key2, the rest of the key split at its first
// dot.
func statValue(t *testing.T, s *Server, statKey, stat string) uint64 {
	t.Helper()
	domain, rest, _ := strings.Cut(statKey, ".")
	key1, key2, _ := strings.Cut(rest, ".")
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_"+stat {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m) == [3]string{domain, key1, key2} {
				return uint64(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

func labels(m *dto.Metric) [3]string {
	var out [3]string
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "domain":
			out[0] = l.GetValue()
		case "key1":
			out[1] = l.GetValue()
		case "key2":
			out[2] = l.GetValue()
		}
	}
	return out
}

// TestEnvoyFilesSymlinkSwap: a new directory swapped in at RUNTIME_ROOT,
// as envoyproxy/ratelimit's deployments publish configs, is reloaded at
// the watcher's next look; a broken one is refused once and the old
// config stays.
func TestEnvoyFilesSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	version := func(name, rpu string) string {
		dir := filepath.Join(base, name, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		data := "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: " + rpu + "}}\n"
		if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(base, name)
	}
	current := filepath.Join(base, "current")
	swap := func(target string) {
		tmp := current + ".tmp"
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, current); err != nil {
			t.Fatal(err)
		}
	}
	swap(version("v1", "1"))
	cfg, err := LoadConfig([]byte("ratelimit: {runtime_root: " + current + ", runtime_subdirectory: ratelimit}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeTime{sluicetest.NewFakeClock(time.Unix(1000000, 0).UnixNano())}
	s, err := New(t.Context(), cfg, withClock(clock, clock.now))
	if err != nil {
		t.Fatal(err)
	}
	client := serveGRPC(t, s)
	limit := func() uint32 {
		t.Helper()
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limit(); got != 1 {
		t.Fatalf("limit %d, want 1 from v1", got)
	}
	swap(version("v2", "2"))
	s.reloadEnvoyFiles()
	if got := limit(); got != 2 {
		t.Errorf("after the swap to v2: limit %d, want 2", got)
	}
	swap(version("v3", "fortnight"))
	s.reloadEnvoyFiles()
	if got := limit(); got != 2 {
		t.Errorf("after the swap to a broken v3: limit %d, want 2 from v2", got)
	}
}
