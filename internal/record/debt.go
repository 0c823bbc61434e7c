package record

import (
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// HoldsDebt reports whether c's policy can hold debt: whether c is a
// Debtor that can.
func HoldsDebt(c Codec) bool {
	switch c := c.(type) {
	case *Machine:
		_, ok := policy.DebtsOf(c.m)
		return ok
	case *Bucket:
		return true
	}
	return false
}

var (
	_ Debtor = (*Machine)(nil)
	_ Debtor = (*Bucket)(nil)
)

func (c *Machine) Charge(rec []byte, now, n int64) (policy.Result, []byte, bool) {
	d, ok := policy.DebtsOf(c.m)
	if !ok {
		return policy.Result{Code: policy.DebtNotSupported}, nil, false
	}
	st, h := c.state(rec, now)
	res, next, changed := d.Charge(st, now, n, nil)
	if !changed || c.version.foreign(rec, kindMachine) {
		return res, nil, false
	}
	return res, c.record(next, h), true
}

func (c *Machine) Refund(rec []byte, now, at, n int64) ([]byte, bool) {
	d, ok := policy.DebtsOf(c.m)
	if !ok {
		return nil, false
	}
	st, h := c.state(rec, now)
	next, changed := d.Refund(st, now, at, n, nil)
	if !changed || c.version.foreign(rec, kindMachine) {
		return nil, false
	}
	return c.record(next, h), true
}

func (c *Machine) Debt(rec []byte, now int64) int64 {
	d, ok := policy.DebtsOf(c.m)
	if !ok {
		return 0
	}
	st, _ := c.state(rec, now)
	return d.Debt(st, now)
}

// Charge takes n tokens from the key's bucket whatever it holds
// (tokenbucket.Charge), a new bucket of the configuration in force when
// the key has none.
func (c *Bucket) Charge(rec []byte, now, n int64) (policy.Result, []byte, bool) {
	b := c.load(rec, now, true)
	if b.cfg == nil {
		return policy.Result{Code: policy.DebtNotSupported}, nil, false
	}
	if !b.exists {
		b.state = tokenbucket.New(b.cfg, now)
	}
	res, changed := tokenbucket.Charge(b.cfg, b.state, now, n)
	if !changed || c.o.ConfigVersion.foreign(rec, kindBucket) {
		return res, nil, false
	}
	return res, b.record(), true
}

// Refund gives n tokens back to the key's bucket (tokenbucket.Refund).
func (c *Bucket) Refund(rec []byte, now, _, n int64) ([]byte, bool) {
	b := c.load(rec, now, true)
	if !b.exists || !tokenbucket.Refund(b.cfg, b.state, now, n) || c.o.ConfigVersion.foreign(rec, kindBucket) {
		return nil, false
	}
	return b.record(), true
}

// Debt is what the key's bucket owes (tokenbucket.Debt).
func (c *Bucket) Debt(rec []byte, now int64) int64 {
	b := c.load(rec, now, true)
	if !b.exists {
		return 0
	}
	return tokenbucket.Debt(b.cfg, b.state, now)
}
