package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The address of sluice's gRPC Service when the chart is installed as
// docs/kubernetes.md says: release sluice in namespace sluice.
const (
	grpcHost = "sluice-grpc.sluice.svc.cluster.local"
	grpcPort = 8081
)

// strictJSON decodes YAML into v as the API server would, refusing
// unknown and duplicate fields.
func strictJSON(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return strict[0]
	}
	return nil
}

// xds decodes v, an Envoy resource as JSON or a YAML value, into m as
// Envoy Gateway and Istio do (protojson, unknown fields refused), and
// validates it by Envoy's rules, those of the typed configs inside
// included.
func xds(t *testing.T, v any, m proto.Message) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("not a %T: %v\n%s", m, err, js)
	}
	if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
		t.Fatalf("invalid %T: %v", m, err)
	}
}

// rateLimitFilter unpacks the rate limit filter of an HTTP filter and
// checks it calls cluster.
func rateLimitFilter(t *testing.T, f *hcmv3.HttpFilter, cluster string) *ratelimitv3.RateLimit {
	t.Helper()
	var rl ratelimitv3.RateLimit
	if f.GetName() != "envoy.filters.http.ratelimit" || f.GetTypedConfig().UnmarshalTo(&rl) != nil {
		t.Fatalf("filter %v, want envoy.filters.http.ratelimit", f)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	svc := rl.GetRateLimitService()
	if got := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster || svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("rate limit service %v, want cluster %s over the v3 API", svc, cluster)
	}
	if len(rl.GetRateLimits()) == 0 {
		t.Error("the filter has no rate_limits: it would send no descriptor")
	}
	return &rl
}

// docs splits a multi-document YAML file.
func docs(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// TestIstioExample: the EnvoyFilter decodes as Istio's API type, its
// filter is valid by Envoy's rules and calls sluice's gRPC Service, and
// sluice, serving the ConfigMap of envoyproxy/ratelimit's files as the
// chart mounts it, limits the descriptors that the filter's actions make.
func TestIstioExample(t *testing.T) {
	const dir = "examples/istio"
	var ef networkingv1alpha3.EnvoyFilter
	for _, doc := range docs(t, filepath.Join(dir, "envoyfilter.yaml")) {
		var obj struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
			Spec       json.RawMessage   `json:"spec"`
		}
		if err := strictJSON(doc, &obj); err != nil || obj.APIVersion != "networking.istio.io/v1alpha3" || obj.Kind != "EnvoyFilter" {
			t.Fatalf("%s: %v %s %s, want an EnvoyFilter", dir, err, obj.APIVersion, obj.Kind)
		}
		if err := protojson.Unmarshal(obj.Spec, &ef); err != nil {
			t.Fatalf("EnvoyFilter %s: not Istio's EnvoyFilter: %v", obj.Metadata.Name, err)
		}
	}
	var filter *ratelimitv3.RateLimit
	for _, p := range ef.GetConfigPatches() {
		if p.GetApplyTo() != networkingv1alpha3.EnvoyFilter_HTTP_FILTER {
			t.Fatalf("patch %v: want HTTP_FILTER patches only", p)
		}
		if p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
			p.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
			t.Errorf("patch %v: want the filter inserted before the router", p)
		}
		var f hcmv3.HttpFilter
		xds(t, p.GetPatch().GetValue().AsMap(), &f)
		filter = rateLimitFilter(t, &f, fmt.Sprintf("outbound|%d||%s", grpcPort, grpcHost))
	}
	if filter == nil {
		t.Fatal("no rate limit filter in the EnvoyFilter")
	}

	var cm corev1.ConfigMap
	if err := strictJSON(docs(t, filepath.Join(dir, "ratelimit-config.yaml"))[0], &cm); err != nil {
		t.Fatal(err)
	}
	var values struct {
		ExistingRatelimitConfigMap string `json:"existingRatelimitConfigMap"`
		Config                     string `json:"config"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if values.ExistingRatelimitConfigMap != cm.Name {
		t.Errorf("values.yaml mounts ConfigMap %q, want %q", values.ExistingRatelimitConfigMap, cm.Name)
	}
	if testing.Short() {
		t.Skip("-short (make check): the rest runs sluice serve; make test runs it")
	}
	// As the chart mounts and names them (TestChart checks the chart).
	runtime := t.TempDir()
	files := filepath.Join(runtime, "ratelimit", "config")
	if err := os.MkdirAll(files, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(files, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := serveExample(t, values.Config, "RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true")
	checkLimits(t, addr, filter, 5) // /login: 5 a minute
}

// envoyPatchPolicy is Envoy Gateway's EnvoyPatchPolicy, as its CRD has it
// (gateway.envoyproxy.io/v1alpha1), for the fields the example uses;
// unknown fields are refused.
type envoyPatchPolicy struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		TargetRef struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
			Name  string `json:"name"`
		} `json:"targetRef"`
		Type        string `json:"type"`
		JSONPatches []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Operation struct {
				Op    string `json:"op"`
				Path  string `json:"path"`
				Value any    `json:"value"`
			} `json:"operation"`
		} `json:"jsonPatches"`
	} `json:"spec"`
}

// TestEnvoyGatewayExample: the EnvoyPatchPolicy adds a valid cluster for
// sluice's gRPC Service and a valid rate limit filter that calls it, and
// sluice, on the example's config, limits the descriptors that the
// filter's actions make.
func TestEnvoyGatewayExample(t *testing.T) {
	const dir = "examples/envoy-gateway"
	var p envoyPatchPolicy
	if err := strictJSON(docs(t, filepath.Join(dir, "envoypatchpolicy.yaml"))[0], &p); err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "gateway.envoyproxy.io/v1alpha1" || p.Kind != "EnvoyPatchPolicy" || p.Spec.Type != "JSONPatch" ||
		p.Spec.TargetRef.Kind != "Gateway" || p.Spec.TargetRef.Group != "gateway.networking.k8s.io" {
		t.Fatalf("%+v, want a JSONPatch EnvoyPatchPolicy of a Gateway", p)
	}
	var cluster string
	var filter *ratelimitv3.RateLimit
	for _, jp := range p.Spec.JSONPatches {
		op := jp.Operation
		switch {
		case jp.Type == "type.googleapis.com/envoy.config.cluster.v3.Cluster" && op.Op == "add" && op.Path == "":
			var c clusterv3.Cluster
			xds(t, op.Value, &c)
			sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			if c.GetName() != jp.Name || sa.GetAddress() != grpcHost || sa.GetPortValue() != grpcPort {
				t.Errorf("cluster %s at %s:%d, want %s at %s:%d", c.GetName(), sa.GetAddress(), sa.GetPortValue(), jp.Name, grpcHost, grpcPort)
			}
			if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
				t.Error("the cluster does not speak HTTP/2, which gRPC needs")
			}
			cluster = c.GetName()
		case jp.Type == "type.googleapis.com/envoy.config.listener.v3.Listener" && op.Op == "add" &&
			op.Path == "/default_filter_chain/filters/0/typed_config/http_filters/0":
			var f hcmv3.HttpFilter
			xds(t, op.Value, &f)
			filter = rateLimitFilter(t, &f, "sluice")
		default:
			t.Fatalf("patch %+v: want the cluster added and the filter put first on the listener", jp)
		}
	}
	if cluster == "" || filter == nil {
		t.Fatal("the policy does not add both the cluster and the filter")
	}
	if testing.Short() {
		t.Skip("-short (make check): the rest runs sluice serve; make test runs it")
	}
	var values struct {
		Config string `json:"config"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	checkLimits(t, serveExample(t, values.Config), filter, 5) // login: 5 a minute
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serveExample runs sluice serve on config, its store made mem:// (the
// stores have their own tests), with env, and returns its gRPC address.
func serveExample(t *testing.T, config string, env ...string) string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(config), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["store"] = "mem://"
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sluiceBinary(t), "serve", "--config", path, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	re := regexp.MustCompile(`gRPC on (\S+)\n`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("sluice serve on the example's config: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve printed no gRPC address in 60s:\n%s%s", stdout.String(), stderr.String())
		}
	}
}

// sluiceBinary builds the sluice command once per test binary, into
// binDir.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	return sluiceBuild.get(t, "..", "./cmd/sluice", "sluice")
}

// helmBinary is the Helm of deploy/go.mod's tool directive, which go
// tool builds and caches: found once per test binary, as go tool helm
// would check that it is up to date at each of the tests' many runs.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if out, err := exec.Command("go", "tool", "helm", "version", "--short").CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("go tool helm: %w\n%s", err, out)
			return
		}
		out, err := exec.Command("go", "tool", "-n", "helm").Output()
		helmPath = strings.TrimSpace(string(out))
		if fi, serr := os.Stat(helmPath); err != nil || serr != nil || fi.Mode()&0o111 == 0 {
			helmErr = fmt.Errorf("go tool -n helm = %q, %v: want the cached helm binary", out, err)
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// build is a command built once per test binary.
type build struct {
	once sync.Once
	err  error
}

func (b *build) get(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	path := filepath.Join(binDir, name)
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", path, pkg)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return path
}

var (
	binDir      string
	sluiceBuild build

	helmOnce sync.Once
	helmPath string
	helmErr  error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "sluice-deploy-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// checkLimits sends sluice what Envoy's filter sends for GET /login from
// one client, limit+1 times: the descriptors of the filter's actions
// (those the examples use). The last is over the limit.
func checkLimits(t *testing.T, addr string, filter *ratelimitv3.RateLimit, limit int) {
	t.Helper()
	headers := map[string]string{":path": "/login"}
	var descriptors []*commonrl.RateLimitDescriptor
	for _, rl := range filter.GetRateLimits() {
		d := &commonrl.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			switch x := a.GetActionSpecifier().(type) {
			case *routev3.RateLimit_Action_RequestHeaders_:
				d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{
					Key: x.RequestHeaders.GetDescriptorKey(), Value: headers[x.RequestHeaders.GetHeaderName()]})
			case *routev3.RateLimit_Action_RemoteAddress_:
				d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: "remote_address", Value: "192.0.2.7"})
			default:
				t.Fatalf("action %v: the test makes only request_headers and remote_address descriptors", a)
			}
		}
		descriptors = append(descriptors, d)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var codes []string
	for range limit + 1 {
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: filter.GetDomain(), Descriptors: descriptors})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		codes = append(codes, resp.GetOverallCode().String())
	}
	want := strings.Repeat("OK ", limit) + "OVER_LIMIT"
	if got := strings.Join(codes, " "); got != want {
		t.Errorf("GET /login %d times: %s, want %s", limit+1, got, want)
	}
}
