package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/resilience"
)

// limiterDoc is a LIMITER, every policy's fields in one. Floats are only
// for the smooth policies, whose rates Guava takes as doubles.
type limiterDoc struct {
	Policy   string            `json:"policy"`
	Limit    *integer          `json:"limit"`
	Interval *duration         `json:"interval"`
	Rate     *rateDoc          `json:"rate"`
	MaxQueue *integer          `json:"max_queue"`
	Limiters []json.RawMessage `json:"limiters"`

	LimitForPeriod      *integer  `json:"limit_for_period"`
	LimitRefreshPeriod  *duration `json:"limit_refresh_period"`
	Timeout             *duration `json:"timeout"`
	CancelRunningFuture *bool     `json:"cancel_running_future"`
	PermitsPerSecond    *float64  `json:"permits_per_second"`
	MaxBurstSeconds     *float64  `json:"max_burst_seconds"`
	WarmupPeriod        *duration `json:"warmup_period"`
	ColdFactor          *float64  `json:"cold_factor"`
}

type rateDoc struct {
	Interval *duration `json:"interval"`
	Amount   *integer  `json:"amount"`
}

// policyFields are a policy's fields besides "policy": those it requires
// and those it may have.
type policyFields struct {
	required, optional []string
}

// keyedPolicies are the policies of keyed limiters (LimiterTarget), by
// name; compound members are among them.
var keyedPolicies = map[string]policyFields{
	"fixed_window":   {required: []string{"limit", "interval"}},
	"sliding_window": {required: []string{"limit", "interval"}},
	"sliding_log":    {required: []string{"limit", "interval"}},
	"token_bucket":   {required: []string{"limit", "rate"}},
	"leaky_bucket":   {required: []string{"limit", "rate"}},
	"gcra":           {required: []string{"limit", "rate"}},
	"shaper":         {required: []string{"rate", "max_queue"}},
	"no_limit":       {},
	"compound":       {required: []string{"limiters"}},
}

// compatPolicies are the compatibility policies (CompatTarget), by name.
// Absent fields take the defaults of the library each one copies.
var compatPolicies = map[string]policyFields{
	"resilience4j":      {optional: []string{"limit_for_period", "limit_refresh_period", "timeout"}},
	"time_limiter":      {optional: []string{"timeout", "cancel_running_future"}},
	"smooth_bursty":     {required: []string{"permits_per_second"}, optional: []string{"max_burst_seconds"}},
	"smooth_warming_up": {required: []string{"permits_per_second", "warmup_period"}, optional: []string{"cold_factor"}},
}

// policyNames are the names of every policy, sorted, and limiterFields the
// fields of every policy: a field of one policy is an error in another,
// while a field no policy has is ignored, as for every object of the
// format.
var policyNames, limiterFields = func() (names, fields []string) {
	for _, m := range []map[string]policyFields{keyedPolicies, compatPolicies} {
		for name, f := range m {
			names = append(names, name)
			fields = append(fields, f.required...)
			fields = append(fields, f.optional...)
		}
	}
	slices.Sort(names)
	slices.Sort(fields)
	return names, slices.Compact(fields)
}()

// decodeLimiter decodes a case's LIMITER. Values that sluice itself must
// reject (a limit of 0, a negative interval) are passed on unchecked.
func decodeLimiter(raw json.RawMessage) (subject, error) {
	d, err := decodeLimiterDoc(raw)
	if err != nil {
		return nil, err
	}
	switch d.Policy {
	case "resilience4j":
		cfg := resilience.DefaultConfig()
		if d.LimitForPeriod != nil {
			cfg.LimitForPeriod = int64(*d.LimitForPeriod)
		}
		if d.LimitRefreshPeriod != nil {
			cfg.LimitRefreshPeriod = time.Duration(*d.LimitRefreshPeriod)
		}
		if d.Timeout != nil {
			cfg.Timeout = time.Duration(*d.Timeout)
		}
		return &rateLimiterSubject{cfg}, nil
	case "time_limiter":
		cfg := resilience.DefaultTimeLimiterConfig()
		if d.Timeout != nil {
			cfg.Timeout = time.Duration(*d.Timeout)
		}
		if d.CancelRunningFuture != nil {
			cfg.CancelRunning = *d.CancelRunningFuture
		}
		return &timeLimiterSubject{cfg}, nil
	case "smooth_bursty":
		s := &smoothSubject{permitsPerSecond: *d.PermitsPerSecond, maxBurstSeconds: 1.0}
		if d.MaxBurstSeconds != nil {
			s.maxBurstSeconds = *d.MaxBurstSeconds
		}
		return s, nil
	case "smooth_warming_up":
		s := &smoothSubject{warm: true, permitsPerSecond: *d.PermitsPerSecond,
			warmup: time.Duration(*d.WarmupPeriod), coldFactor: 3.0}
		if d.ColdFactor != nil {
			s.coldFactor = *d.ColdFactor
		}
		return s, nil
	}
	p, err := keyedPolicy(d)
	if err != nil {
		return nil, err
	}
	return &limiterSubject{p}, nil
}

// decodeLimiterDoc decodes a LIMITER and checks that its policy is known,
// that it has the fields its policy requires and none of another policy's.
func decodeLimiterDoc(raw json.RawMessage) (*limiterDoc, error) {
	var given map[string]json.RawMessage
	if err := json.Unmarshal(raw, &given); err != nil || given == nil {
		return nil, fmt.Errorf("want an object, got %s", raw)
	}
	d := new(limiterDoc)
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, err
	}
	f, ok := keyedPolicies[d.Policy]
	if !ok {
		f, ok = compatPolicies[d.Policy]
	}
	switch {
	case d.Policy == "":
		return nil, errors.New("policy is missing")
	case !ok:
		return nil, fmt.Errorf("policy %q is none of %s", d.Policy, strings.Join(policyNames, ", "))
	}
	for _, name := range f.required {
		if !present(given[name]) {
			return nil, fmt.Errorf("%s is missing", name)
		}
	}
	for _, name := range limiterFields {
		if present(given[name]) && !slices.Contains(f.required, name) && !slices.Contains(f.optional, name) {
			return nil, fmt.Errorf("%s is not a field of %s", name, d.Policy)
		}
	}
	if d.Rate != nil {
		switch {
		case d.Rate.Interval == nil:
			return nil, errors.New("rate.interval is missing")
		case d.Rate.Amount == nil:
			return nil, errors.New("rate.amount is missing")
		}
	}
	return d, nil
}

// keyedPolicy returns the policy of d, a keyed policy with the fields it
// requires. A compound's members must be keyed policies.
func keyedPolicy(d *limiterDoc) (sluice.Policy, error) {
	switch d.Policy {
	case "fixed_window":
		return sluice.FixedWindow(int64(*d.Limit), time.Duration(*d.Interval)), nil
	case "sliding_window":
		return sluice.SlidingWindow(int64(*d.Limit), time.Duration(*d.Interval)), nil
	case "sliding_log":
		return sluice.SlidingLog(int64(*d.Limit), time.Duration(*d.Interval)), nil
	case "token_bucket":
		return sluice.TokenBucket(int64(*d.Limit), int64(*d.Rate.Amount), time.Duration(*d.Rate.Interval)), nil
	case "leaky_bucket":
		return sluice.LeakyBucket(int64(*d.Limit), int64(*d.Rate.Amount), time.Duration(*d.Rate.Interval)), nil
	case "gcra":
		return sluice.GCRA(int64(*d.Limit), int64(*d.Rate.Amount), time.Duration(*d.Rate.Interval)), nil
	case "shaper":
		return sluice.Shaper(int64(*d.Rate.Amount), time.Duration(*d.Rate.Interval), int64(*d.MaxQueue)), nil
	case "no_limit":
		return sluice.NoLimit(), nil
	case "compound":
		members := make([]sluice.Policy, 0, len(d.Limiters))
		for i, raw := range d.Limiters {
			md, err := decodeLimiterDoc(raw)
			if err != nil {
				return nil, fmt.Errorf("limiters[%d]: %w", i, err)
			}
			if _, ok := keyedPolicies[md.Policy]; !ok {
				return nil, fmt.Errorf("limiters[%d]: policy %s cannot be a member of a compound", i, md.Policy)
			}
			p, err := keyedPolicy(md)
			if err != nil {
				return nil, fmt.Errorf("limiters[%d]: %w", i, err)
			}
			members = append(members, p)
		}
		return sluice.Compound(members...), nil
	}
	return nil, fmt.Errorf("policy %s is not a keyed policy", d.Policy)
}
