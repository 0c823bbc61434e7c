// Package record is what a Limiter keeps in a driver.Store for one key,
// and the policy operations on it: a Codec decides on a record as a
// policy machine decides on its state, with the configuration
// fingerprint and the migration of state written by another
// configuration on top.
//
// A record is
//
//	version  byte   Version, or VersionOrdered
//	kind     byte   kindMachine or kindBucket
//	origin   8 bytes, little endian: the fingerprint of the configured
//	         policy that created the state or last migrated it
//	order    uvarint, VersionOrdered only: the configuration version of
//	         origin (see ConfigVersion); a Version record's is 0
//	kindMachine: the policy machine's own encoding (policy.Erased)
//	kindBucket:  varint length + the bucket's configuration, then
//	             varint count + (last refill, size, err) varints per
//	             bandwidth
//
// A token bucket carries its configuration, as Bucket4j's remote state
// does, because the configuration in force may differ from the configured
// one: after ReplaceConfiguration on the key, or before a migration, whose
// token inheritance needs the old capacities. Other policies carry only
// the fingerprint; their migration keeps or drops the state.
//
// A record that does not decode counts as no state, as a store that lost
// it would: a newer version, another policy, or corrupted bytes.
package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// Codec is a policy's decisions on records: Machine for the policies of
// internal/policy's machines, Bucket for token buckets, whose records
// carry their configuration. The methods that may change the record
// return the new one as next, to be written when changed is true; they
// may run more than once for one call (a store retries after a lost
// race), and keep nothing of rec. A Codec is safe for simultaneous use.
type Codec interface {
	// Consume decides whether n tokens may pass at now, as
	// policy.Machine.Consume.
	Consume(rec []byte, now, n int64) (res policy.Result, next []byte, changed bool)
	// Peek answers as Consume would, changing nothing.
	Peek(rec []byte, now, n int64) policy.Result
	// Reserve takes n tokens within maxWait, as policy.Machine.Reserve;
	// a granted reservation that took something comes with its receipt.
	Reserve(rec []byte, now, n, maxWait int64) (res policy.Result, rc *policy.Receipt, next []byte, changed bool)
	// Cancel gives back the reservation of rc at now, as policy.Undo
	// does. A record written since by another configuration keeps its
	// tokens.
	Cancel(rec []byte, now int64, rc *policy.Receipt) (next []byte, changed bool)
	// Reset is the record of no state, to overwrite rec with where a
	// store cannot delete.
	Reset(rec []byte) (next []byte, changed bool)
	// ExpiresAt is when rec is worth no more than no state: the store may
	// drop it then.
	ExpiresAt(rec []byte) int64
}

// Version is the version a record of configuration version 0 starts
// with: the records of releases before configuration versions, which
// they keep reading and writing. VersionOrdered is that of a record whose
// configuration has a version above 0, which carries it after the origin.
const (
	Version        = 1
	VersionOrdered = 2
)

const (
	kindMachine = 1
	kindBucket  = 2
	headerLen   = 10
)

var errBad = errors.New("sluice: undecodable state record")

// header is what a record says of the configuration that wrote it.
type header struct {
	origin  uint64 // its fingerprint
	version uint64 // its configuration version (ConfigVersion)
}

// appendHeader writes a Version record's header for a configuration of
// version 0, so that releases before versions read it, and a
// VersionOrdered one's otherwise.
func appendHeader(dst []byte, kind byte, h header) []byte {
	if h.version == 0 {
		dst = append(dst, Version, kind)
		return binary.LittleEndian.AppendUint64(dst, h.origin)
	}
	dst = append(dst, VersionOrdered, kind)
	dst = binary.LittleEndian.AppendUint64(dst, h.origin)
	return binary.AppendUvarint(dst, h.version)
}

// readHeader returns the header and the rest of a record of kind.
func readHeader(rec []byte, kind byte) (h header, rest []byte, err error) {
	if len(rec) < headerLen || (rec[0] != Version && rec[0] != VersionOrdered) || rec[1] != kind {
		return header{}, nil, errBad
	}
	h.origin, rest = binary.LittleEndian.Uint64(rec[2:]), rec[headerLen:]
	if rec[0] == VersionOrdered {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n == 0 {
			return header{}, nil, errBad
		}
		h.version, rest = n, rest[k:]
	}
	return h, rest, nil
}

// fingerprint identifies a policy's configuration: equal policies have
// equal fingerprints in every process.
func fingerprint(parts ...[]byte) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write(binary.AppendUvarint(nil, uint64(len(p))))
		h.Write(p)
	}
	return h.Sum64()
}

// Machine is the Codec of a policy machine's state.
type Machine struct {
	m       policy.Erased
	fp      uint64
	drop    bool // a state of another configuration is no state
	version ConfigVersion
}

var _ Codec = (*Machine)(nil)

// NewMachine returns the Codec of m, the machine of the policy named name
// (its String, which the fingerprint is made of). A state written by
// another configuration is kept when the policy can read it, unless
// inherit is tokenbucket.ResetStrategy.
func NewMachine(name string, m policy.Erased, inherit tokenbucket.Strategy) *Machine {
	return &Machine{m: m, fp: fingerprint([]byte(name)), drop: inherit == tokenbucket.ResetStrategy}
}

// NewVersionedMachine is NewMachine for a configuration of version o.
func NewVersionedMachine(name string, m policy.Erased, inherit tokenbucket.Strategy, o ConfigVersion) *Machine {
	c := NewMachine(name, m, inherit)
	c.version = o
	return c
}

// state returns the policy state in rec: nil for none, an expired state,
// or one of another configuration that the inheritance drops; and the
// header to write it with: the codec's own, or the stored one when it
// wins (ConfigVersion.keeps), whose state is then kept as it is.
func (c *Machine) state(rec []byte, now int64) ([]byte, header) {
	own := header{origin: c.fp, version: c.version.Version}
	h, st, err := readHeader(rec, kindMachine)
	switch {
	case err != nil:
		return nil, own
	case h.origin == c.fp:
		h.version = max(h.version, own.version)
	case c.version.keeps(h):
		// A newer configuration wrote it: decide on its state, and leave
		// the record its configuration's.
	case c.drop:
		return nil, own
	default:
		h = own
	}
	if c.m.ExpiresAt(st) <= now {
		return nil, h
	}
	return st, h
}

func (c *Machine) record(st []byte, h header) []byte {
	return append(appendHeader(make([]byte, 0, headerLen+len(st)+2), kindMachine, h), st...)
}

func (c *Machine) Consume(rec []byte, now, n int64) (policy.Result, []byte, bool) {
	st, h := c.state(rec, now)
	d, next, changed := c.m.Consume(st, now, n, nil)
	res := d.ResultIn(c.m.Limits())
	if !changed || c.version.foreign(rec, kindMachine) {
		return res, nil, false
	}
	return res, c.record(next, h), true
}

func (c *Machine) Peek(rec []byte, now, n int64) policy.Result {
	st, _ := c.state(rec, now)
	return c.m.Peek(st, now, n)
}

func (c *Machine) Reserve(rec []byte, now, n, maxWait int64) (policy.Result, *policy.Receipt, []byte, bool) {
	before, h := c.state(rec, now)
	res, next, changed := c.m.Reserve(before, now, n, maxWait, nil)
	if !changed || c.version.foreign(rec, kindMachine) {
		return res, nil, nil, false
	}
	var rc *policy.Receipt
	if res.Allowed {
		rc = policy.NewReceipt(now, n, res.Wait, bytes.Clone(before), bytes.Clone(next))
		if res.Wait > 0 {
			res.Remaining = policy.RemainingAt(c.m.Peek(next, rc.Due, 1))
		}
	}
	return res, rc, c.record(next, h), true
}

func (c *Machine) Cancel(rec []byte, now int64, rc *policy.Receipt) ([]byte, bool) {
	h, st, err := readHeader(rec, kindMachine)
	if err != nil || h.origin != c.fp {
		return nil, false
	}
	next, changed := c.m.Cancel(st, now, rc, nil)
	if !changed {
		return nil, false
	}
	h.version = max(h.version, c.version.Version)
	return c.record(next, h), true
}

// Reset writes no state under the stored configuration's header when it
// wins, so that a reset by an older process does not undo a migration.
func (c *Machine) Reset(rec []byte) ([]byte, bool) {
	if len(rec) == 0 {
		return nil, false
	}
	h := header{origin: c.fp, version: c.version.Version}
	if stored, _, err := readHeader(rec, kindMachine); err == nil && stored.origin != c.fp && c.version.keeps(stored) {
		h = stored
	}
	return c.record(nil, h), true
}

func (c *Machine) ExpiresAt(rec []byte) int64 {
	_, st, err := readHeader(rec, kindMachine)
	if err != nil {
		return 0
	}
	return c.m.ExpiresAt(st)
}

// Slot runs the slot operation op on rec at now, as policy.Slots: an
// error Code NoSlots when the policy has none.
func (c *Machine) Slot(rec []byte, now int64, op policy.SlotOp) (policy.SlotResult, []byte, bool) {
	sm, ok := c.m.(policy.SlotErased)
	if !ok {
		return policy.SlotResult{Result: policy.Result{Code: policy.NoSlots}}, nil, false
	}
	st, h := c.state(rec, now)
	res, next, changed := sm.Slot(st, now, op, nil)
	if !changed || c.version.foreign(rec, kindMachine) {
		return res, nil, false
	}
	return res, c.record(next, h), true
}
