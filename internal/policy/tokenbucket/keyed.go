package tokenbucket

import "github.com/sluicehq/sluice/internal/policy"

// Keyed runs the keyed-policy operations on a State of any configuration,
// exactly as Single (one bandwidth) or Multi (several) would: for state
// that lives as bytes in a store, whose configuration is read with it.
type Keyed struct {
	cfg    *Config
	strict bool
}

// NewKeyed returns the keyed policy of cfg; strict is as for NewSingle and
// applies only to a single bandwidth.
func NewKeyed(cfg *Config, strict bool) Keyed { return Keyed{cfg: cfg, strict: strict} }

// single reports whether k runs as a Single; st then has one element.
func (k Keyed) single(st *State) (Single, bool) {
	if len(k.cfg.Bandwidths) != 1 {
		return Single{}, false
	}
	if len(*st) != 1 {
		*st = append((*st)[:0], BandwidthState{})
	}
	return Single(k), true
}

// Consume is Single.Consume or Multi.Consume.
func (k Keyed) Consume(st *State, exists bool, now, n int64) (policy.Decision, bool) {
	if s, ok := k.single(st); ok {
		return s.Consume(&(*st)[0], exists, now, n)
	}
	return Multi{cfg: k.cfg}.Consume(st, exists, now, n)
}

// Quota is the smallest capacity, the limit a decision reports.
func (k Keyed) Quota() int64 { return quota(k.cfg) }

// Peek is Single.Peek or Multi.Peek.
func (k Keyed) Peek(st *State, exists bool, now, n int64) policy.Result {
	if s, ok := k.single(st); ok {
		return s.Peek(&(*st)[0], exists, now, n)
	}
	return Multi{cfg: k.cfg}.Peek(st, exists, now, n)
}

// Reserve is Single.Reserve or Multi.Reserve.
func (k Keyed) Reserve(st *State, exists bool, now, n, maxWait int64) (policy.Result, bool) {
	if s, ok := k.single(st); ok {
		return s.Reserve(&(*st)[0], exists, now, n, maxWait)
	}
	return Multi{cfg: k.cfg}.Reserve(st, exists, now, n, maxWait)
}

// ExpiresAt is when st is worth no more than no state.
func (k Keyed) ExpiresAt(st State) int64 {
	if len(st) != len(k.cfg.Bandwidths) {
		return 0
	}
	return expiresAt(k.cfg, st)
}

// Strict reports whether m refuses more tokens than its capacity as an
// argument error.
func (m Single) Strict() bool { return m.strict }
