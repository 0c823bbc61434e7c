// Package metricnames is the one list of the metrics sluice exports: their
// names, help texts, labels and histogram buckets, shared by sluiceprom,
// sluiceotel and sluice serve, so that a dashboard built on one reads the
// others. It also holds the Resilience4j rate limiters whose gauges
// sluiceprom and sluiceotel read.
package metricnames

import (
	"cmp"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// The names of the metrics.
const (
	Decisions     = "sluice_decisions_total"
	Tokens        = "sluice_tokens_consumed_total"
	StoreDuration = "sluice_store_duration_seconds"
	StoreErrors   = "sluice_store_errors_total"
	StoreFailures = "sluice_store_failures_total"
	CircuitOpen   = "sluice_store_circuit_open"
	Waiting       = "sluice_waiting_callers"
	// ShadowRejected counts the requests a limiter in shadow mode let
	// through that its policy refused.
	ShadowRejected = "sluice_shadow_rejected_total"

	// Resilience4j's rate-limiter gauges, named as its Micrometer binding
	// names them in Prometheus.
	AvailablePermissions = "resilience4j_ratelimiter_available_permissions"
	WaitingThreads       = "resilience4j_ratelimiter_waiting_threads"
)

// The labels.
const (
	Limiter = "limiter" // the limiter's name
	Outcome = "outcome" // allowed, rejected, error (and invalid, in sluice serve)
	Op      = "op"      // the store call: update, delete (and ping, in sluice serve)
	Policy  = "policy"  // the store failure policy: fail_closed, fail_open, fail_local, fail_share
	Name    = "name"    // a Resilience4j limiter's name
)

// The values of the outcome label.
const (
	Allowed  = "allowed"
	Rejected = "rejected"
	Error    = "error"
)

// A Family is a metric as every exporter shows it: its name, its help
// text and its labels, in order.
type Family struct {
	Name   string
	Help   string
	Labels []string
}

// The families. Their help texts cover the library's limiters and sluice
// serve alike, since both export each family under one name.
var (
	DecisionsFamily = Family{Decisions, "Decisions by limiter and outcome (allowed, rejected, error; " +
		"and in sluice serve invalid: the caller's mistake, answered 400).", []string{Limiter, Outcome}}
	TokensFamily = Family{Tokens, "Tokens taken by allowed decisions, by limiter.", []string{Limiter}}
	// StoreDurationFamily has the buckets of StoreBuckets.
	StoreDurationFamily = Family{StoreDuration, "Latency of store calls (update, delete; and ping in sluice serve), failed ones included.",
		[]string{Op}}
	StoreErrorsFamily   = Family{StoreErrors, "Store calls that returned an error, by operation.", []string{Op}}
	StoreFailuresFamily = Family{StoreFailures, "Decisions a store failure decided, by limiter and the failure policy applied " +
		"(fail_closed, fail_open, fail_local, fail_share).", []string{Limiter, Policy}}
	CircuitOpenFamily = Family{CircuitOpen, "1 while a limiter's circuit breaker keeps calls from the store " +
		"(open or half-open), 0 when closed.", []string{Limiter}}
	ShadowRejectedFamily = Family{ShadowRejected, "Requests a limiter in shadow mode let through that its policy refused: " +
		"those it would have rejected without shadow mode, by limiter.", []string{Limiter}}
	WaitingFamily = Family{Waiting, "Callers sleeping for their tokens now: blocking calls " +
		"(WaitN, Consume, AcquirePermission), and in sluice serve consume requests with max_wait_ms.", nil}

	// sluice serve's plans kept in the store (docs/plans.md).
	PlansFamily = Family{"sluice_plans", "Plans kept in the store, by limiter, as this process last read them.",
		[]string{Limiter}}
	PlanChangesFamily = Family{"sluice_plan_changes_total", "Plan writes through this process, by operation (put, delete) " +
		"and result (changed, unchanged, precondition_failed, error).", []string{"op", "result"}}
	// PlanPropagationFamily has the buckets of PlanPropagationBuckets.
	PlanPropagationFamily = Family{"sluice_plan_propagation_seconds", "Age of a plan change written through another process " +
		"when this one applied it: the propagation lag (the writer's clock against this one's).", nil}
	PlanSyncErrorsFamily = Family{"sluice_plan_sync_errors_total", "Reads of the plans' change log or shards that failed; " +
		"the plans stay as last read until one succeeds.", nil}
	// RequestLimitsCeiledFamily counts requests that asked for their own
	// limit above what their limiter or descriptor allows.
	RequestLimitsCeiledFamily = Family{"sluice_request_limits_ceiled_total", "Requests whose own limit (Envoy's limit override) " +
		"was above the ceiling of their descriptor, limited at the ceiling, by domain.", []string{"domain"}}

	AvailablePermissionsFamily = Family{AvailablePermissions, "The permissions a Resilience4j rate limiter has now, " +
		"negative while permits are reserved ahead.", []string{Name}}
	WaitingThreadsFamily = Family{WaitingThreads, "The callers a Resilience4j rate limiter holds waiting now.", []string{Name}}
)

// StoreBuckets are the buckets of StoreDuration, in seconds: from 100µs
// (a local Redis) to 2.5s (past any store timeout worth having).
func StoreBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
}

// PlanPropagationBuckets are the buckets of PlanPropagationFamily, in
// seconds, around the default bound of 2 s.
func PlanPropagationBuckets() []float64 {
	return []float64{.05, .1, .25, .5, 1, 1.5, 2, 3, 5, 10, 30}
}

// FailureLabel names a store failure policy as config files write it: the
// value of the policy label.
func FailureLabel(f sluice.StoreFailure) string {
	switch f {
	case sluice.FailOpen:
		return "fail_open"
	case sluice.FailLocal:
		return "fail_local"
	case sluice.FailShare:
		return "fail_share"
	}
	return "fail_closed"
}

// RateLimiter is what the Resilience4j gauges read, as sluiceprom and
// sluiceotel declare it.
type RateLimiter interface {
	AvailablePermissions() int64
	NumberOfWaitingCallers() int
}

// RateLimiters are the Resilience4j rate limiters whose gauges an
// exporter reads, by name. The zero value holds none; it is safe for
// concurrent use.
type RateLimiters struct {
	mu sync.Mutex
	m  map[string]RateLimiter // guarded by mu
}

// Set makes rl the limiter called name, replacing any before.
func (r *RateLimiters) Set(name string, rl RateLimiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]RateLimiter{}
	}
	r.m[name] = rl
}

// Delete forgets the limiter called name.
func (r *RateLimiters) Delete(name string) {
	r.mu.Lock()
	delete(r.m, name)
	r.mu.Unlock()
}

// Each calls fn with each limiter, in the order of their names. It calls
// fn without holding r's lock, since each limiter takes its own.
func (r *RateLimiters) Each(fn func(name string, rl RateLimiter)) {
	type named struct {
		name string
		rl   RateLimiter
	}
	r.mu.Lock()
	rls := make([]named, 0, len(r.m))
	for name, rl := range r.m {
		rls = append(rls, named{name, rl})
	}
	r.mu.Unlock()
	slices.SortFunc(rls, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	for _, n := range rls {
		fn(n.name, n.rl)
	}
}
