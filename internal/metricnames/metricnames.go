// Package metricnames is the one list of the metrics sluice exports: their
// names, help texts, labels and histogram buckets, shared by sluiceprom,
// sluiceotel and sluice serve, so that a dashboard built on one reads the
// others.
package metricnames

import "github.com/sluicehq/sluice"

// The names of the metrics.
const (
	Decisions     = "sluice_decisions_total"
	Tokens        = "sluice_tokens_consumed_total"
	StoreDuration = "sluice_store_duration_seconds"
	StoreErrors   = "sluice_store_errors_total"
	StoreFailures = "sluice_store_failures_total"
	CircuitOpen   = "sluice_store_circuit_open"
	Waiting       = "sluice_waiting_callers"

	// Resilience4j's rate-limiter gauges, named as its Micrometer binding
	// names them in Prometheus.
	AvailablePermissions = "resilience4j_ratelimiter_available_permissions"
	WaitingThreads       = "resilience4j_ratelimiter_waiting_threads"
)

// Their help texts, for the library's limiters; sluice serve says where
// its decisions come from in its own.
const (
	DecisionsHelp     = "Decisions by limiter and outcome (allowed, rejected, error)."
	TokensHelp        = "Tokens taken by allowed decisions, by limiter."
	StoreDurationHelp = "Latency of store calls (update, delete), failed ones included."
	StoreErrorsHelp   = "Store calls that returned an error, by operation."
	StoreFailuresHelp = "Decisions a store failure decided, by limiter and the failure policy applied (fail_closed, fail_open, fail_local)."
	CircuitOpenHelp   = "1 while a limiter's circuit breaker keeps calls from the store (open or half-open), 0 when closed."
	WaitingHelp       = "Blocking calls (WaitN, Consume, AcquirePermission) sleeping for their tokens now."

	AvailablePermissionsHelp = "The permissions a Resilience4j rate limiter has now, negative while permits are reserved ahead."
	WaitingThreadsHelp       = "The callers a Resilience4j rate limiter holds waiting now."
)

// The labels.
const (
	Limiter = "limiter" // the limiter's name
	Outcome = "outcome" // allowed, rejected, error
	Op      = "op"      // the store call: update, delete (and ping, in sluice serve)
	Policy  = "policy"  // the store failure policy: fail_closed, fail_open, fail_local
	Name    = "name"    // a Resilience4j limiter's name
)

// The values of the outcome label.
const (
	Allowed  = "allowed"
	Rejected = "rejected"
	Error    = "error"
)

// StoreBuckets are the buckets of StoreDuration, in seconds: from 100µs
// (a local Redis) to 2.5s (past any store timeout worth having).
func StoreBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
}

// FailureLabel names a store failure policy as config files write it: the
// value of the policy label.
func FailureLabel(f sluice.StoreFailure) string {
	switch f {
	case sluice.FailOpen:
		return "fail_open"
	case sluice.FailLocal:
		return "fail_local"
	}
	return "fail_closed"
}
