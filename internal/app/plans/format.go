package plans

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The stored records, in the plans' own namespace of the store:
//
//   - head: the sequence of the last change, 8 bytes big-endian. Every
//     write takes the next number from it; it is also every plan's
//     version, so versions are unique across plans and only grow.
//   - log/<n mod logSlots>: the change numbered n, slot (n, shard, time):
//     which shard it rewrote (noShard for a write that changed nothing),
//     and when, for the propagation lag. A ring: a process more than
//     logSlots changes behind reads every shard again.
//   - shard/<i>: the plans whose limiter and key hash to i (shardOf),
//     one record of them all, so that the store needs no listing: reading
//     every plan is reading the shards, and a change rewrites one.
//
// Every record is kept without expiry (ttl 0).

// shardFormat is the first byte of a shard record; a record of another
// first byte is refused, never taken for no plans.
const shardFormat = 1

// decodeShard decodes a shard record: the format byte, the specs (uvarint
// count, then each as uvarint length and bytes), then the plans (uvarint
// count, then each: limiter and key as uvarint length and bytes, a flag
// byte, 1 for a prefix, the version as uvarint and the index of its spec
// as uvarint). Strings are interned in names, so that the plans of one
// limiter share its name. An empty record is no plans.
func decodeShard(b []byte, names map[string]string) ([]Plan, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != shardFormat {
		return nil, fmt.Errorf("plans: shard record of format %d, want %d", b[0], shardFormat)
	}
	r := reader{b: b[1:]}
	nspecs := r.count()
	specs := make([]string, 0, nspecs)
	for range nspecs {
		specs = append(specs, r.str(names))
	}
	n := r.count()
	out := make([]Plan, 0, n)
	for range n {
		var p Plan
		p.Limiter = r.str(names)
		p.Key = string(r.bytes())
		switch f := r.byte(); f {
		case 0:
		case 1:
			p.Prefix = true
		default:
			r.fail(fmt.Errorf("flag byte %d", f))
		}
		p.Version = r.uvarint()
		i := r.uvarint()
		if r.err == nil && i >= uint64(len(specs)) {
			r.fail(fmt.Errorf("spec %d of %d", i, len(specs)))
		}
		if r.err != nil {
			break
		}
		p.Spec = specs[i]
		out = append(out, p)
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Errorf("%d bytes after the plans", len(r.b)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("plans: malformed shard record: %w", r.err)
	}
	return out, nil
}

// appendShard appends the record of ps to b, each distinct spec once.
func appendShard(b []byte, ps []Plan) []byte {
	b = append(b, shardFormat)
	index := make(map[string]uint64)
	var specs []string
	for _, p := range ps {
		if _, ok := index[p.Spec]; !ok {
			index[p.Spec] = uint64(len(specs))
			specs = append(specs, p.Spec)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(specs)))
	for _, s := range specs {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = appendString(b, p.Limiter)
		b = appendString(b, p.Key)
		if p.Prefix {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, p.Version)
		b = binary.AppendUvarint(b, index[p.Spec])
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// reader reads a record, keeping its first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errors.New("truncated or overlong varint"))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items, each at least a byte long, so that a
// forged count cannot make a large allocation.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail(fmt.Errorf("count %d above the %d bytes left", n, len(r.b)))
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail(fmt.Errorf("length %d above the %d bytes left", n, len(r.b)))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(errors.New("truncated"))
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// str reads a string, interned in names when names is not nil.
func (r *reader) str(names map[string]string) string {
	b := r.bytes()
	if names == nil {
		return string(b)
	}
	if s, ok := names[string(b)]; ok {
		return s
	}
	s := string(b)
	names[s] = s
	return s
}

// slot is a record of the change log.
type slot struct {
	seq   uint64
	shard int64 // noShard: the change wrote nothing
	at    int64 // Unix nanoseconds of the write, on the writer's clock
}

// noShard is the shard of a logged change that wrote nothing (a write
// refused by its If-Match, or superseded).
const noShard = -1

const slotLen = 24

func (s slot) encode() []byte {
	b := make([]byte, slotLen)
	binary.BigEndian.PutUint64(b, s.seq)
	binary.BigEndian.PutUint64(b[8:], uint64(s.shard))
	binary.BigEndian.PutUint64(b[16:], uint64(s.at))
	return b
}

// decodeSlot decodes a log record; an empty one is no change yet (seq 0).
func decodeSlot(b []byte) (slot, error) {
	switch len(b) {
	case 0:
		return slot{}, nil
	case slotLen:
		return slot{seq: binary.BigEndian.Uint64(b), shard: int64(binary.BigEndian.Uint64(b[8:])), at: int64(binary.BigEndian.Uint64(b[16:]))}, nil
	}
	return slot{}, fmt.Errorf("plans: malformed log record of %d bytes, want %d", len(b), slotLen)
}

// decodeHead decodes the head record; an empty one is no change yet.
func decodeHead(b []byte) (uint64, error) {
	switch len(b) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("plans: malformed head record of %d bytes, want 8", len(b))
}

func encodeHead(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
