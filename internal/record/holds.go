package record

import (
	"encoding/binary"
	"math"

	"github.com/sluicehq/sluice/internal/policy"
)

// A record may carry the holds open on its key before the policy's
// record: estimates taken and not settled yet, each to be settled once.
// They live in the key's record so that a settlement is one atomic update
// of the key, with its state, on every store, and so that any process
// sharing the store can settle what another held.
//
//	version  byte   VersionHolds
//	count    uvarint, 1 to MaxHolds
//	count ×  id      8 bytes, little endian
//	         tokens  varint: the estimate taken
//	         at      varint: when it was taken (ns)
//	         expires varint: when it stops being settleable (ns)
//	the policy's record, as the Codec wrote it
//
// A record without holds is written as before, so a key whose holds are
// all settled or expired is readable by releases that know no holds. A
// release that does not know them reads a record with holds as no state.
const VersionHolds = 3

// MaxHolds is the most holds open at once on one key: each takes about
// 20 bytes of the key's record, which every call on the key reads and
// writes.
const MaxHolds = 1024

// Hold is an estimate taken for a key and not settled yet.
type Hold struct {
	ID      uint64
	Tokens  int64
	At      int64 // when it was taken
	Expires int64 // from then on it is charged as taken and cannot be settled
}

// SplitHolds returns the holds rec carries and the policy's record under
// them (rec itself when it carries none). A record whose holds do not
// decode is no state, as any record that does not decode.
func SplitHolds(rec []byte) (holds []Hold, inner []byte) {
	if len(rec) == 0 || rec[0] != VersionHolds {
		return nil, rec
	}
	rest := rec[1:]
	count, k := binary.Uvarint(rest)
	if k <= 0 || count == 0 || count > MaxHolds {
		return nil, nil
	}
	rest = rest[k:]
	holds = make([]Hold, count)
	for i := range holds {
		if len(rest) < 8 {
			return nil, nil
		}
		h := &holds[i]
		h.ID, rest = binary.LittleEndian.Uint64(rest), rest[8:]
		for _, p := range []*int64{&h.Tokens, &h.At, &h.Expires} {
			v, k := binary.Varint(rest)
			if k <= 0 {
				return nil, nil
			}
			*p, rest = v, rest[k:]
		}
		if h.Tokens <= 0 {
			return nil, nil
		}
	}
	return holds, rest
}

// JoinHolds is the record of the policy's record inner under the holds
// still open at now: those that have not expired.
func JoinHolds(holds []Hold, inner []byte, now int64) []byte {
	live := 0
	for _, h := range holds {
		if h.Expires > now {
			live++
		}
	}
	if live == 0 {
		return inner
	}
	dst := make([]byte, 0, 1+binary.MaxVarintLen64+live*(8+3*binary.MaxVarintLen64)+len(inner))
	dst = append(dst, VersionHolds)
	dst = binary.AppendUvarint(dst, uint64(live))
	for _, h := range holds {
		if h.Expires <= now {
			continue
		}
		dst = binary.LittleEndian.AppendUint64(dst, h.ID)
		dst = binary.AppendVarint(binary.AppendVarint(binary.AppendVarint(dst, h.Tokens), h.At), h.Expires)
	}
	return append(dst, inner...)
}

// HoldsExpireAt is when the last of holds expires, math.MinInt64 for
// none: a store must keep the record until then, whatever the policy's
// state is worth, so that they can be settled.
func HoldsExpireAt(holds []Hold) int64 {
	at := int64(math.MinInt64)
	for _, h := range holds {
		at = max(at, h.Expires)
	}
	return at
}

// Debtor is a Codec whose policy can hold debt (policy.Debtor): a charge
// is taken whatever is left, and the record says what its key owes.
type Debtor interface {
	Codec
	// Charge takes n tokens at now whatever is left, as
	// policy.Debtor.Charge.
	Charge(rec []byte, now, n int64) (res policy.Result, next []byte, changed bool)
	// Refund gives back up to n tokens taken at at, as
	// policy.Debtor.Refund.
	Refund(rec []byte, now, at, n int64) (next []byte, changed bool)
	// Debt is what the key owes at now.
	Debt(rec []byte, now int64) int64
}
