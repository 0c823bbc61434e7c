package deploy

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "write kubernetes/sluice.yaml from the chart (make manifests)")

const (
	chart     = "helm/sluice"
	manifests = "kubernetes/sluice.yaml"
	// manifestsHeader starts kubernetes/sluice.yaml.
	manifestsHeader = `# sluice's plain Kubernetes manifests: the chart deploy/helm/sluice
# rendered with its default values, as release sluice. Do not edit: change
# the chart and run make manifests (a test checks that they agree).
# kubectl apply -n sluice -f deploy/kubernetes/sluice.yaml; docs/kubernetes.md.
`
)

// helm runs the Helm of deploy/go.mod's tool directive, the pinned version.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// object is a decoded Kubernetes object.
type object struct {
	kind, name string
	v          any
}

// objects is what a render holds, by kind.
type objects struct {
	all             []object
	configMaps      map[string]*corev1.ConfigMap
	services        map[string]*corev1.Service
	deployments     []*appsv1.Deployment
	pdbs            []*policyv1.PodDisruptionBudget
	serviceMonitors []*monitoringv1.ServiceMonitor
}

// decode decodes every document of a multi-document YAML stream into
// the Go type of its apiVersion and kind, strictly: a field the type does
// not have, a field twice, or a kind not in the table fails the test.
func decode(t *testing.T, where string, stream []byte) *objects {
	t.Helper()
	o := &objects{configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{}}
	for i, doc := range bytes.Split(stream, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		v, kind, err := decodeDoc(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", where, i, err)
		}
		var name string
		switch x := v.(type) {
		case *corev1.ConfigMap:
			name, o.configMaps[x.Name] = x.Name, x
		case *corev1.Service:
			name, o.services[x.Name] = x.Name, x
		case *corev1.ServiceAccount:
			name = x.Name
		case *appsv1.Deployment:
			name, o.deployments = x.Name, append(o.deployments, x)
		case *policyv1.PodDisruptionBudget:
			name, o.pdbs = x.Name, append(o.pdbs, x)
		case *monitoringv1.ServiceMonitor:
			name, o.serviceMonitors = x.Name, append(o.serviceMonitors, x)
		}
		if name == "" {
			t.Errorf("%s: document %d (%s) has no name", where, i, kind)
		}
		o.all = append(o.all, object{kind, name, v})
	}
	return o
}

// decodeDoc decodes one YAML document into the Go type of its
// apiVersion and kind, strictly, as the API server does.
func decodeDoc(doc []byte) (v any, kind string, err error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, "", err
	}
	switch meta.APIVersion + "/" + meta.Kind {
	case "v1/ConfigMap":
		v = new(corev1.ConfigMap)
	case "v1/Service":
		v = new(corev1.Service)
	case "v1/ServiceAccount":
		v = new(corev1.ServiceAccount)
	case "apps/v1/Deployment":
		v = new(appsv1.Deployment)
	case "policy/v1/PodDisruptionBudget":
		v = new(policyv1.PodDisruptionBudget)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		v = new(monitoringv1.ServiceMonitor)
	default:
		return nil, "", fmt.Errorf("%s %s is not a kind the test knows", meta.APIVersion, meta.Kind)
	}
	// As the API server reads what kubectl sends: YAML made JSON as it
	// is (a number stays a number), then decoded case-sensitively, with
	// unknown and duplicate fields refused.
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, "", err
	}
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err = errors.Join(append(strict, err)...); err != nil {
		return nil, "", fmt.Errorf("%s: %w", meta.Kind, err)
	}
	return v, meta.Kind, nil
}

// TestDecodeIsStrict: what the API server would refuse or drop fails the
// decoding, so that the tests above can fail.
func TestDecodeIsStrict(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",                    // a misspelled field
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 80, targetport: http}]}\n", // case matters
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, name: y}\n",                                     // a field twice
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: 1}\n",                                // not a string
		"apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: x}\n",                                   // a version the test does not know
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{port: http, scrapeInterval: 1s}]}\n",
	} {
		if _, _, err := decodeDoc([]byte(doc)); err == nil {
			t.Errorf("decodeDoc(%q) = nil error, want one", doc)
		}
	}
	if _, _, err := decodeDoc([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 2}\n")); err != nil {
		t.Errorf("decodeDoc of a good Deployment = %v", err)
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// valuesFiles are the chart's documented sets of values: the defaults
// (""), each file of its ci/ directory, and the examples'.
func valuesFiles(t *testing.T) []string {
	t.Helper()
	ci, err := filepath.Glob(filepath.Join(chart, "ci", "*.yaml"))
	if err != nil || len(ci) == 0 {
		t.Fatalf("no values files in %s/ci: %v", chart, err)
	}
	examples, err := filepath.Glob(filepath.Join("examples", "*", "values.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no values files in examples/*: %v", err)
	}
	return append(append([]string{""}, ci...), examples...)
}

// TestChart renders the chart with each documented set of values, decodes
// every object strictly into the Kubernetes API types, and checks what
// docs/kubernetes.md promises of them.
func TestChart(t *testing.T) {
	helm(t, "lint", "--strict", chart)
	for _, values := range valuesFiles(t) {
		name := "defaults"
		args := []string{"template", "sluice", chart, "--namespace", "sluice"}
		if values != "" {
			name, args = values, append(args, "--values", values)
		}
		t.Run(name, func(t *testing.T) {
			check(t, decode(t, name, helm(t, args...)))
		})
	}
}

// TestManifests decodes the plain manifests strictly and checks them as
// the chart's, and that they are the chart rendered with its defaults.
func TestManifests(t *testing.T) {
	want := append([]byte(manifestsHeader), helm(t, "template", "sluice", chart)...)
	if *update {
		if err := os.WriteFile(manifests, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	check(t, decode(t, manifests, got))
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart rendered with its default values: run make manifests", manifests)
	}
}

// check checks the objects of one render.
func check(t *testing.T, o *objects) {
	t.Helper()
	if len(o.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(o.deployments))
	}
	d := o.deployments[0]
	pod := d.Spec.Template
	for k, v := range d.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not select its pods (%v)", k, v, pod.Labels)
		}
	}
	ps := pod.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and user 65532, the image's", ps)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext = %+v, want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 || len(ports) != 2 {
		t.Errorf("container ports = %v, want http 8080 and grpc 8081, the image's", ports)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe = %+v, want GET %s on port http", name, p, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("startup", c.StartupProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("resources = %+v, want a memory limit, GOMEMLIMIT's", c.Resources)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	gml := env["GOMEMLIMIT"].ValueFrom
	if gml == nil || gml.ResourceFieldRef == nil || gml.ResourceFieldRef.Resource != "limits.memory" ||
		gml.ResourceFieldRef.ContainerName != c.Name || !gml.ResourceFieldRef.Divisor.Equal(resource.MustParse("1")) {
		t.Errorf("GOMEMLIMIT = %+v, want the container's limits.memory in bytes (divisor 1)", env["GOMEMLIMIT"])
	}
	if !slices.Equal(c.Args[:2], []string{"--config", "/etc/sluice/sluice.yaml"}) {
		t.Errorf("args = %q, want --config /etc/sluice/sluice.yaml first", c.Args)
	}

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("volume %s is mounted with a subPath: the kubelet never updates it, so reloads stop", m.Name)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	if m := mounts["config"]; m.MountPath != "/etc/sluice" || !m.ReadOnly {
		t.Errorf("config mount = %+v, want the directory /etc/sluice, read-only", m)
	}
	cmName := ""
	if v := volumes["config"]; v.ConfigMap != nil {
		cmName = v.ConfigMap.Name
	}
	cm := o.configMaps[cmName]
	if cm == nil || cm.Data["sluice.yaml"] == "" {
		t.Fatalf("the config volume's ConfigMap %q is not rendered with a sluice.yaml", cmName)
	}
	var cfg struct {
		Server struct {
			DrainTimeout string `json:"drain_timeout"`
		} `json:"server"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["sluice.yaml"]), &cfg); err != nil {
		t.Fatalf("ConfigMap %s: sluice.yaml: %v", cmName, err)
	}
	drain := 10 * time.Second // server.drain_timeout's default
	if cfg.Server.DrainTimeout != "" {
		var err error
		if drain, err = time.ParseDuration(cfg.Server.DrainTimeout); err != nil {
			t.Fatalf("server.drain_timeout: %v", err)
		}
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than server.drain_timeout %v, so that a drain is not killed", g, drain)
	}

	// envoyproxy/ratelimit's files: mounted as that server reads them,
	// without the config map's dot directories.
	if _, ok := env["RUNTIME_ROOT"]; ok {
		dir := env["RUNTIME_ROOT"].Value + "/" + env["RUNTIME_SUBDIRECTORY"].Value + "/config"
		if m := mounts["ratelimit"]; m.MountPath != dir || env["RUNTIME_IGNOREDOTFILES"].Value != "true" {
			t.Errorf("ratelimit mount %+v, RUNTIME_IGNOREDOTFILES %q; want the files at %s and dot files ignored",
				m, env["RUNTIME_IGNOREDOTFILES"].Value, dir)
		}
		if v := volumes["ratelimit"]; v.ConfigMap == nil {
			t.Errorf("ratelimit volume = %+v, want a ConfigMap", v)
		} else if _, rendered := o.configMaps[v.ConfigMap.Name]; !rendered && v.ConfigMap.Name != "ratelimit-config" {
			t.Errorf("ratelimit volume names ConfigMap %s, which is neither rendered nor the one the values name", v.ConfigMap.Name)
		}
	}

	// The store's Secret: mounted read-only as a directory (no subPath,
	// above), which the kubelet updates, and the Secret of the variables
	// that come from a Secret.
	secret := ""
	if v, ok := volumes["store-secret"]; ok {
		if v.Secret == nil || v.Secret.SecretName == "" {
			t.Errorf("store-secret volume = %+v, want a Secret", v)
		} else {
			secret = v.Secret.SecretName
		}
		if m := mounts["store-secret"]; m.MountPath == "" || !m.ReadOnly {
			t.Errorf("store-secret mount = %+v, want a directory, read-only", m)
		}
	}
	for _, e := range c.Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name != secret {
			t.Errorf("variable %s comes from Secret %s, want the store's Secret %q", e.Name, r.SecretKeyRef.Name, secret)
		}
	}

	// Services: one for HTTP, one for gRPC, both selecting the pods.
	byPort := map[string]*corev1.Service{}
	for _, s := range o.services {
		for k, v := range s.Spec.Selector {
			if pod.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, not the pods (%v)", s.Name, k, v, pod.Labels)
			}
		}
		for _, p := range s.Spec.Ports {
			byPort[p.TargetPort.String()] = s
		}
	}
	if byPort["http"] == nil || byPort["grpc"] == nil || byPort["http"] == byPort["grpc"] {
		t.Errorf("Services %v, want one to port http and another to port grpc", o.all)
	}
	if g := byPort["grpc"]; g != nil && (g.Spec.Ports[0].AppProtocol == nil || *g.Spec.Ports[0].AppProtocol != "grpc") {
		t.Errorf("gRPC Service port = %+v, want appProtocol grpc", g.Spec.Ports[0])
	}

	for _, p := range o.pdbs {
		if fmt.Sprint(p.Spec.Selector.MatchLabels) != fmt.Sprint(d.Spec.Selector.MatchLabels) ||
			p.Spec.MaxUnavailable == nil || p.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s = %+v, want maxUnavailable of the Deployment's pods", p.Name, p.Spec)
		}
	}
	for _, sm := range o.serviceMonitors {
		h := byPort["http"]
		for k, v := range sm.Spec.Selector.MatchLabels {
			if h.Labels[k] != v {
				t.Errorf("ServiceMonitor %s selects %s=%s, not the HTTP Service (%v)", sm.Name, k, v, h.Labels)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints = %+v, want /metrics on port http", sm.Spec.Endpoints)
		}
	}
}
