package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/plans"
	"github.com/sluicehq/sluice/internal/testserver"
)

const plansYAML = `
server:
  plans: {enabled: true}
  auth:
    tokens: [decide-token]
    admin_tokens: {ops: admin-token}
limiters:
  api:
    policy: fixed_window
    limit: 100
    interval: 1 minute
    overrides:
      - {prefix: "paid:", policy: fixed_window, limit: 1000, interval: 1 minute}
`

const (
	decide = "Bearer decide-token"
	admin  = "Bearer admin-token"
	three  = `{"policy": "fixed_window", "limit": 3, "interval": "1 minute"}`
	// slots is a plan that takes slots, which no limiter Envoy reaches may
	// have.
	slots = `{"policy": "concurrency", "limit": 2, "ttl": "10s"}`
)

// limitOf consumes one token of key and returns the limit it reports.
func consumeLimit(t *testing.T, s *Server, key string) (float64, bool) {
	t.Helper()
	code, got := call(t, s, "POST", "/api/v1/consume", `{"limiter": "api", "key": "`+key+`"}`, "Authorization", decide)
	if code != 200 {
		t.Fatalf("consume %s = %d %v", key, code, got)
	}
	return got["limit"].(float64), got["allowed"].(bool)
}

// TestPlanAPI writes, reads, lists and deletes a plan through the API,
// with the admin token; the decision token may read but not write.
func TestPlanAPI(t *testing.T) {
	s, _ := testServer(t, plansYAML)
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", three, "Authorization", decide); code != 403 {
		t.Fatalf("PUT with a decision token = %d %v, want 403", code, got)
	}
	if code, _ := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", three); code != 401 {
		t.Errorf("PUT without a token = %d, want 401", code)
	}
	code, got := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", three, "Authorization", admin)
	if code != 200 || got["version"] == nil || got["key"] != "tenant-7" {
		t.Fatalf("PUT with the admin token = %d %v", code, got)
	}
	version := got["version"].(float64)
	for i := range 4 {
		limit, allowed := consumeLimit(t, s, "tenant-7")
		if limit != 3 || allowed != (i < 3) {
			t.Errorf("consume %d of tenant-7 = limit %v allowed %v, want limit 3, allowed %v", i+1, limit, allowed, i < 3)
		}
	}
	if limit, _ := consumeLimit(t, s, "tenant-8"); limit != 100 {
		t.Errorf("consume of tenant-8 = limit %v, want the default 100", limit)
	}
	// A stored prefix longer than the config's wins, a shorter one loses.
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/paid:small:?prefix=true", three, "Authorization", admin); code != 200 {
		t.Fatalf("PUT prefix = %d %v", code, got)
	}
	if limit, _ := consumeLimit(t, s, "paid:small:x"); limit != 3 {
		t.Errorf("consume of paid:small:x = limit %v, want the stored prefix's 3", limit)
	}
	if limit, _ := consumeLimit(t, s, "paid:x"); limit != 1000 {
		t.Errorf("consume of paid:x = limit %v, want the config's prefix's 1000", limit)
	}

	// The same plan again changes nothing; a stale If-Match is refused.
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", three, "Authorization", admin); code != 200 || got["version"] != version {
		t.Errorf("PUT of the same plan = %d %v, want version %v kept", code, got, version)
	}
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", `{"policy": "fixed_window", "limit": 5, "interval": "1 minute"}`,
		"Authorization", admin, "If-Match", `"1234"`); code != 412 {
		t.Errorf("PUT with a stale If-Match = %d %v, want 412", code, got)
	}
	code, got = call(t, s, "GET", "/api/v1/plans/api/tenant-7", "", "Authorization", decide)
	if code != 200 || got["version"] != version || got["policy"].(map[string]any)["limit"] != 3.0 {
		t.Errorf("GET = %d %v, want version %v and limit 3", code, got, version)
	}
	code, got = call(t, s, "GET", "/api/v1/plans/api?limit=1", "", "Authorization", decide)
	if ps, _ := got["plans"].([]any); code != 200 || len(ps) != 1 || got["next"] != "key:tenant-7" {
		t.Errorf("list, limit 1 = %d %v, want tenant-7 and a next page", code, got)
	}
	code, got = call(t, s, "GET", "/api/v1/plans/api?after=key:tenant-7", "", "Authorization", decide)
	if ps, _ := got["plans"].([]any); code != 200 || len(ps) != 1 || got["next"] != nil {
		t.Errorf("list after tenant-7 = %d %v, want the prefix alone", code, got)
	}
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/k", `{"policy": "fixed_window", "limit": 0, "interval": "1s"}`, "Authorization", admin); code != 400 ||
		!strings.Contains(got["error"].(map[string]any)["message"].(string), "limit") {
		t.Errorf("PUT of an invalid policy = %d %v, want 400 naming limit", code, got)
	}
	if code, _ := call(t, s, "PUT", "/api/v1/plans/nope/k", three, "Authorization", admin); code != 404 {
		t.Errorf("PUT for an unknown limiter = %d, want 404", code)
	}
	if code, _ := call(t, s, "DELETE", "/api/v1/plans/api/tenant-7", "", "Authorization", decide); code != 403 {
		t.Errorf("DELETE with a decision token = %d, want 403", code)
	}
	if code, got := call(t, s, "DELETE", "/api/v1/plans/api/tenant-7", "", "Authorization", admin); code != 200 {
		t.Errorf("DELETE = %d %v", code, got)
	}
	if code, _ := call(t, s, "GET", "/api/v1/plans/api/tenant-7", "", "Authorization", decide); code != 404 {
		t.Errorf("GET after DELETE = %d, want 404", code)
	}
	if n := testutil.ToFloat64(s.planMetrics.changes.WithLabelValues("put", "changed")); n != 2 {
		t.Errorf("sluice_plan_changes_total{op=put,result=changed} = %v, want 2", n)
	}
	code, got = call(t, s, "POST", "/api/v1/plans", `{"plans": [{"limiter": "api", "key": "a", "policy": `+three+`}, {"limiter": "api", "key": "b", "policy": `+three+`}]}`,
		"Authorization", admin)
	if code != 200 || got["changed"] != 2.0 {
		t.Errorf("import = %d %v, want 2 changed", code, got)
	}
}

// TestPlansOff: without server.plans, the endpoints answer 404.
func TestPlansOff(t *testing.T) {
	s, _ := testServer(t, fixedYAML)
	if code, _ := call(t, s, "GET", "/api/v1/plans/three", ""); code != 404 {
		t.Errorf("GET /api/v1/plans/three with plans off = %d, want 404", code)
	}
}

// TestPlansTakeNoSlotsForEnvoy: a plan that would give a key of a
// limiter Envoy reaches a policy that takes slots is refused, alone or
// in an import, since Envoy never releases; other limiters take it.
func TestPlansTakeNoSlotsForEnvoy(t *testing.T) {
	// An rlqs: section needs /metrics behind the tokens.
	withMetrics := strings.Replace(plansYAML, "    admin_tokens:", "    metrics: true\n    admin_tokens:", 1)
	s, _ := testServer(t, withMetrics+`  other: {policy: fixed_window, limit: 100, interval: 1 minute}
  quota: {policy: fixed_window, limit: 100, interval: 1 minute}
envoy:
  - domain: edge
    descriptors: [{key: tenant, limiter: api}]
rlqs:
  - domain: edge
    buckets: [{bucket: {name: x}, limiter: quota}]
`)
	const (
		boxed = `{"policy": "penalty_box", "limiter": {"policy": "concurrency", "limit": 2, "ttl": "10s"}, "penalties": ["1m"]}`
	)
	for _, tt := range []struct{ path, body, want string }{
		{"/api/v1/plans/api/tenant-7", slots, `limiter "api" serves Envoy's rate limit service, which never gives a slot back: its plans must not take slots, got concurrency(limit=2, ttl=10s)`},
		{"/api/v1/plans/api/paid:?prefix=true", boxed, `limiter "api" serves Envoy's rate limit service, which never gives a slot back: its plans must not take slots, got penalty_box(`},
		{"/api/v1/plans/quota/tenant-7", slots, `limiter "quota" serves Envoy's rate limit quota service`},
	} {
		code, got := call(t, s, "PUT", tt.path, tt.body, "Authorization", admin)
		if e, _ := got["error"].(map[string]any); code != 400 || e["code"] != "unsupported" || !strings.HasPrefix(fmt.Sprint(e["message"]), tt.want) {
			t.Errorf("PUT %s %s = %d %v, want 400 unsupported %q", tt.path, tt.body, code, got, tt.want)
		}
	}
	code, got := call(t, s, "POST", "/api/v1/plans", `{"plans": [{"limiter": "other", "key": "a", "policy": `+slots+`}, {"limiter": "api", "key": "b", "policy": `+slots+`}]}`,
		"Authorization", admin)
	if e, _ := got["error"].(map[string]any); code != 400 || !strings.HasPrefix(fmt.Sprint(e["message"]), `plans[1]: limiter "api" serves Envoy's rate limit service`) {
		t.Errorf("import with a plan of slots for api = %d %v, want 400 at plans[1]", code, got)
	}
	if code, got := call(t, s, "PUT", "/api/v1/plans/other/tenant-7", slots, "Authorization", admin); code != 200 {
		t.Errorf("PUT a plan of slots for a limiter Envoy does not reach = %d %v, want 200", code, got)
	}
}

// countingStore counts the updates of keys under a prefix.
type countingStore struct {
	driver.Store
	prefix string
	n      *atomic.Int64
}

func (c countingStore) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	if strings.HasPrefix(key, c.prefix) {
		c.n.Add(1)
	}
	return c.Store.Update(ctx, key, fn)
}

// TestPlansNoStoreCallPerDecision: on Redis, with plans stored,
// decisions on keys with and without plans read no plan from the store:
// the process's catalog answers.
func TestPlansNoStoreCallPerDecision(t *testing.T) {
	cfg, err := LoadConfig([]byte(fmt.Sprintf("store: %s\n", testserver.SharedRedis(t)) + plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	s, err := New(t.Context(), cfg, withStoreWrapper(func(st driver.Store) driver.Store {
		return countingStore{st, "sluice/plans:", &calls}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	key := fmt.Sprintf("tenant-%d", time.Now().UnixNano())
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/"+key, three, "Authorization", admin); code != 200 {
		t.Fatalf("PUT = %d %v", code, got)
	}
	before := calls.Load()
	if before == 0 {
		t.Fatal("the PUT made no store call on the plans' keys: the counting store is not under the plans")
	}
	for i := range 50 {
		if limit, _ := consumeLimit(t, s, key); limit != 3 {
			t.Fatalf("consume %d of %s = limit %v, want the plan's 3", i, key, limit)
		}
		if limit, _ := consumeLimit(t, s, fmt.Sprintf("other-%d", i)); limit != 100 {
			t.Fatalf("consume of other-%d = limit %v, want the default 100", i, limit)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("100 decisions made %d store calls on the plans' keys, want 0", n)
	}
}

// TestSlotPlansKeepEnvoyAway: a reload cannot route a limiter to Envoy
// while the store keeps a plan of it that takes slots (Envoy would never
// give them back), and changes nothing; it can once the plan is gone. A
// plan that takes slots written later by a process whose config keeps the
// limiter from Envoy is passed over where Envoy reaches it, the config's
// policy deciding, and logged once.
func TestSlotPlansKeepEnvoyAway(t *testing.T) {
	load := func(yaml string) *Config {
		t.Helper()
		cfg, err := LoadConfig([]byte(yaml))
		mustDo(t, err)
		return cfg
	}
	log := new(testserver.Buffer)
	s, err := New(t.Context(), load(plansYAML), WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	mustDo(t, err)
	t.Cleanup(func() { s.Close() })
	if code, got := call(t, s, "PUT", "/api/v1/plans/api/tenant-7", slots, "Authorization", admin); code != 200 {
		t.Fatalf("PUT a plan of slots for a limiter Envoy does not reach = %d %v, want 200", code, got)
	}

	withEnvoy := plansYAML + "envoy:\n  - domain: edge\n    descriptors: [{key: tenant, limiter: api}]\n"
	err = s.Reload(load(withEnvoy))
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != "limiters.api" ||
		!strings.Contains(ce.Msg, `Envoy's rate limit service reaches it, and its stored plan for the key "tenant-7" (version `) ||
		!strings.Contains(ce.Msg, "delete the plan first") {
		t.Fatalf("reload routing api to Envoy with a plan of slots = %v, want a config error at limiters.api naming the plan", err)
	}
	if l := s.cur.Load().limiters["api"]; l.envoy != "" {
		t.Fatalf("after the refused reload, api is reached by %q, want the running config kept", l.envoy)
	}
	if code, got := call(t, s, "DELETE", "/api/v1/plans/api/tenant-7", "", "Authorization", admin); code != 200 {
		t.Fatalf("DELETE the plan = %d %v", code, got)
	}
	mustDo(t, s.Reload(load(withEnvoy)))
	if l := s.cur.Load().limiters["api"]; l.envoy == "" {
		t.Fatal("after the reload with the plan gone, api is not reached by Envoy")
	}

	// Another process, whose config keeps api from Envoy, writes a plan of
	// slots: the catalog takes it as it would from the store.
	ctx := t.Context()
	if _, err := s.plans.Put(ctx, plans.Plan{Limiter: "api", Key: "tenant-9", Spec: slots}, nil); err != nil {
		t.Fatal(err)
	}
	mustDo(t, s.syncPlans(ctx))
	if limit, _ := consumeLimit(t, s, "tenant-9"); limit != 100 {
		t.Errorf("limit of tenant-9, whose plan takes slots, = %v, want the config's 100", limit)
	}
	if _, err := s.plans.Put(ctx, plans.Plan{Limiter: "api", Key: "tenant-1", Spec: three}, nil); err != nil {
		t.Fatal(err)
	}
	mustDo(t, s.syncPlans(ctx))
	if limit, _ := consumeLimit(t, s, "tenant-1"); limit != 3 {
		t.Errorf("limit of tenant-1, whose plan is a window of 3, = %v, want 3", limit)
	}
	const logged = "a stored plan takes slots"
	if n := strings.Count(log.String(), logged); n != 1 || !strings.Contains(log.String(), `plan for the key \"tenant-9\"`) {
		t.Errorf("log has %q %d times, want once, naming tenant-9:\n%s", logged, n, log.String())
	}
}

// TestSlotPlansAtStart: a process that starts with a limiter Envoy
// reaches, on a store where another process, whose config keeps it from
// Envoy, stored a plan of it that takes slots, starts (a plan must not
// keep a fleet down), logs the plan and decides the key by its config.
func TestSlotPlansAtStart(t *testing.T) {
	redis := testserver.SharedRedis(t)
	name := fmt.Sprintf("slots%d", time.Now().UnixNano()) // the shared Redis keeps plans across tests
	yaml := fmt.Sprintf("store: %s\n", redis) + strings.Replace(plansYAML, "  api:\n", "  "+name+":\n", 1)
	elsewhere, err := LoadConfig([]byte(yaml))
	mustDo(t, err)
	a, err := New(t.Context(), elsewhere)
	mustDo(t, err)
	t.Cleanup(func() { a.Close() })
	if code, got := call(t, a, "PUT", "/api/v1/plans/"+name+"/tenant-7", slots, "Authorization", admin); code != 200 {
		t.Fatalf("PUT a plan of slots where Envoy does not reach %s = %d %v, want 200", name, code, got)
	}
	t.Cleanup(func() { call(t, a, "DELETE", "/api/v1/plans/"+name+"/tenant-7", "", "Authorization", admin) })

	here, err := LoadConfig([]byte(yaml + "envoy:\n  - domain: edge\n    descriptors: [{key: tenant, limiter: " + name + "}]\n"))
	mustDo(t, err)
	log := new(testserver.Buffer)
	b, err := New(t.Context(), here, WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatalf("start with a stored plan of slots for a limiter Envoy reaches = %v, want a start", err)
	}
	t.Cleanup(func() { b.Close() })
	if !strings.Contains(log.String(), "a stored plan takes slots") || !strings.Contains(log.String(), `plan for the key \"tenant-7\"`) {
		t.Errorf("log at start = %s, want the plan of tenant-7 named", log.String())
	}
	code, got := call(t, b, "POST", "/api/v1/consume", `{"limiter": "`+name+`", "key": "tenant-7"}`, "Authorization", decide)
	if code != 200 || got["limit"] != float64(100) {
		t.Errorf("consume of tenant-7 = %d %v, want the config's limit 100", code, got)
	}
}
