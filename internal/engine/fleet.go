package engine

import (
	"cmp"
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/policy"
)

// FleetKey is the key under which a store keeps the fleet of FailShare:
// the processes deciding on its keys, each with its last beat.
const FleetKey = "\x00sluice:fleet"

// The fleet's timing: a process beats at most every BeatEvery, after a
// store call that succeeded, and counts as a member until MemberTTL after
// its last beat, so that a process that stopped deciding (or crashed)
// leaves the count within MemberTTL.
const (
	BeatEvery = time.Second
	MemberTTL = 3 * time.Second
)

// maxMembers bounds a fleet record: 1,024 members of 16 bytes. Past it the
// members whose beats end soonest are dropped, which can only make the
// others' shares smaller.
const maxMembers = 1024

// processID names this process in every fleet record it writes; it is
// drawn once, so that a process's limiters on one store count it once.
var processID = sync.OnceValue(rand.Uint64)

// Fleet is the processes that share a store's keys under FailShare, as
// this process last saw them: each beats into the store's FleetKey
// record, and reads there how many beat within MemberTTL. While the store
// fails, a process admits 1/Size of each key's limit.
type Fleet struct {
	store   driver.Store
	now     func() int64 // a wall clock (ns): other processes read the times it writes
	timeout time.Duration
	id      uint64

	next atomic.Int64 // when the next beat is due; MaxInt64 while one runs
	size atomic.Int64 // the members at the last beat, this one included; 0 before it
}

// NewFleet returns this process's view of the fleet on st, which it
// beats into with calls bounded by timeout, reading the time from now, a
// wall clock.
func NewFleet(st driver.Store, now func() int64, timeout time.Duration) *Fleet {
	return &Fleet{store: st, now: now, timeout: timeout, id: processID()}
}

// Size is how many processes shared the store at this process's last
// beat, itself included; 0 when it never beat.
func (f *Fleet) Size() int64 { return f.size.Load() }

// Beat beats in the background if a beat is due: the caller's store call
// just succeeded, so the store is likely to take it.
func (f *Fleet) Beat() {
	now := f.now()
	next := f.next.Load()
	if now < next || !f.next.CompareAndSwap(next, math.MaxInt64) {
		return
	}
	go f.beat(now)
}

// beat writes this process's beat at now and reads the fleet's size.
func (f *Fleet) beat(now int64) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	var size int64
	err := f.store.Update(ctx, FleetKey, func(state []byte) ([]byte, time.Duration, bool) {
		var next []byte
		next, size = members(state, f.id, now)
		return next, MemberTTL + time.Second, true
	})
	if err == nil {
		f.size.Store(size)
	}
	f.next.Store(policy.SatAdd(now, int64(BeatEvery)))
}

// members is the fleet record state with id's beat at now, and the number
// of its members whose beats have not ended. A record is 16 bytes per
// member, its id and when its beat ends (ns), big-endian; one that is not
// (written by something else) is replaced. Past maxMembers, the beats
// that end soonest are dropped, which can only make the shares smaller.
func members(state []byte, id uint64, now int64) ([]byte, int64) {
	type member struct {
		id  uint64
		end int64
	}
	if len(state)%16 != 0 {
		state = nil
	}
	ms := []member{{id, policy.SatAdd(now, int64(MemberTTL))}}
	for i := 0; i < len(state); i += 16 {
		m := member{binary.BigEndian.Uint64(state[i:]), int64(binary.BigEndian.Uint64(state[i+8:]))}
		if m.id != id && m.end > now {
			ms = append(ms, m)
		}
	}
	if len(ms) > maxMembers {
		slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(b.end, a.end) })
		ms = ms[:maxMembers]
	}
	next := make([]byte, 0, 16*len(ms))
	for _, m := range ms {
		next = binary.BigEndian.AppendUint64(next, m.id)
		next = binary.BigEndian.AppendUint64(next, uint64(m.end))
	}
	return next, int64(len(ms))
}

// shared is a Backend that decides on this process's share of b's limit,
// one n-th: each call asks n times its tokens, and a result's Limit and
// Remaining are divided by n. It is exact for every policy whose limit
// and refill scale together (all but a limit of fewer than n tokens,
// whose share is less than one: a call for more tokens than the share
// holds is refused as one over the limit).
type shared struct {
	b Backend
	n int64
}

// times is tokens·n, saturating: a call that large is over any limit.
func (s shared) times(tokens int64) int64 {
	hi, lo := bits.Mul64(uint64(tokens), uint64(s.n))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

func (s shared) result(r policy.Result) policy.Result {
	r.Limit /= s.n
	r.Remaining /= s.n
	return r
}

func (s shared) Consume(ctx context.Context, key string, n int64) (policy.Result, error) {
	r, err := s.b.Consume(ctx, key, s.times(n))
	return s.result(r), err
}

func (s shared) Peek(ctx context.Context, key string, n int64) (policy.Result, error) {
	r, err := s.b.Peek(ctx, key, s.times(n))
	return s.result(r), err
}

func (s shared) Reserve(ctx context.Context, key string, n, maxWait int64) (policy.Result, int64, func(int64), error) {
	r, at, undo, err := s.b.Reserve(ctx, key, s.times(n), maxWait)
	return s.result(r), at, undo, err
}

func (s shared) Reset(ctx context.Context, key string) error { return s.b.Reset(ctx, key) }
