package httplimit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/sleep"
)

// ErrAdaptiveRate is wrapped by a WaitError when the fleet's adaptive
// rate (WithAdaptive) has no free slot within the maximum wait.
var ErrAdaptiveRate = errors.New("httplimit: no slot of the adaptive rate within the maximum wait")

// Adaptive makes a Transport find the rate a provider takes, and share it
// with every process that calls the provider through the same store
// (WithAdaptive). Each key's rate starts at Max; a refusal (429 or 503),
// or a response slower than SlowAfter, cuts it to Backoff percent, and it
// grows again by Increase requests a second for every second that passes
// without a cut: additive increase, multiplicative decrease, as TCP and
// Netflix's concurrency-limits adapt. Requests are sent at most at that
// rate, evenly spaced, by the whole fleet together: each one reserves
// the next free slot in the store before it goes.
//
// One refusal cuts the rate once: a refusal of a request that was sent
// before the last cut (at the old rate) cuts nothing, so a fleet whose
// requests in flight all come back refused cuts once, not once per
// request. A key idle long enough is back at Max.
type Adaptive struct {
	// Store keeps each key's rate, under "httplimit/adaptive:" and the
	// key, for every process that shares it. Required.
	Store driver.Store
	// Min and Max bound the rate, in requests per second:
	// 1 ≤ Min ≤ Max ≤ 10⁹.
	Min, Max int64
	// Increase is the rate gained each second without a cut, in requests
	// per second, at least 1 and at most Max; 0 means Max/100, at least 1.
	Increase int64
	// Backoff is the percentage of the rate kept after a cut, in
	// [1, 99]; 0 means 90, Netflix's default for its AIMD limit: a
	// fleet held at the provider's limit then sends on average about 95%
	// of it.
	Backoff int64
	// SlowAfter makes a response that took longer (from sending the
	// request to its header) cut the rate as a refusal does; 0 means
	// latency cuts nothing.
	SlowAfter time.Duration
}

// WithAdaptive makes NewTransport's Transport adapt its rate to the
// provider's answers, as Adaptive says, under the limiter's own limit,
// which stays the ceiling. The default is no adaptation.
func WithAdaptive(a Adaptive) Option { return func(o *options) { o.adaptive = &a } }

// check validates a and fills its defaults.
func (a *Adaptive) check() error {
	if a.Increase == 0 {
		a.Increase = max(a.Max/100, 1)
	}
	if a.Backoff == 0 {
		a.Backoff = 90
	}
	bad := func(field string, v int64, want string) error {
		return &ConfigError{Field: "WithAdaptive." + field, Value: strconv.FormatInt(v, 10), Want: want}
	}
	switch {
	case a.Store == nil:
		return &ConfigError{Field: "WithAdaptive.Store", Value: "nil", Want: "is required"}
	case a.Min < 1:
		return bad("Min", a.Min, "must be at least 1")
	case a.Max < a.Min || a.Max > maxAdaptiveRate:
		return bad("Max", a.Max, fmt.Sprintf("must be in [Min, 10^9], Min being %d", a.Min))
	case a.Increase < 1 || a.Increase > a.Max:
		return bad("Increase", a.Increase, fmt.Sprintf("must be in [1, Max], Max being %d", a.Max))
	case a.Backoff < 1 || a.Backoff > 99:
		return bad("Backoff", a.Backoff, "must be in [1, 99]")
	case a.SlowAfter < 0:
		return &ConfigError{Field: "WithAdaptive.SlowAfter", Value: a.SlowAfter.String(), Want: "must not be negative"}
	}
	return nil
}

// maxAdaptiveRate bounds Max so that the arithmetic in millirequests per
// second never overflows: rates up to 10¹² mreq/s, times 10⁶ in rateAt.
const maxAdaptiveRate = 1_000_000_000

// aimd is a key's shared rate: its arithmetic is pure integer math on
// clock times (ns), rates in millirequests per second.
type aimd struct {
	rate  int64 // the rate at since
	since int64 // when the rate was last cut: the epoch of the requests reserved since
	tat   int64 // the next free slot
}

// rateAt is s's rate at now: its rate at since, plus Increase for each
// second since, at most Max.
func (a *Adaptive) rateAt(s aimd, now int64) int64 {
	top := a.Max * 1000
	elapsed := max(now-s.since, 0)
	// It gains elapsed·Increase/10⁶ mreq/s, which reaches top-rate after
	// (top-rate)·10⁶/Increase ns; below that, elapsed·Increase <
	// (top-rate)·10⁶ ≤ 10¹⁸ does not overflow.
	if s.rate >= top || elapsed >= (top-s.rate)/a.Increase*1_000_000 {
		return top
	}
	return s.rate + elapsed*a.Increase/1_000_000
}

// fresh is a key's state when the store has none: at Max, no slot taken.
func (a *Adaptive) fresh(now int64) aimd { return aimd{rate: a.Max * 1000, since: now, tat: now} }

// reserve takes the next free slot of s at now, unless it is more than
// maxWait away: it returns the new state, the slot's time, and whether it
// was taken.
func (a *Adaptive) reserve(s aimd, now int64, maxWait time.Duration) (aimd, int64, bool) {
	at := max(s.tat, now)
	if at-now > int64(maxWait) {
		return s, at, false
	}
	s.tat = at + 1_000_000_000_000/a.rateAt(s, now) // ns per request: 10¹²/mreq·s⁻¹
	return s, at, true
}

// cut cuts s's rate at now to Backoff percent, at least Min, unless the
// refused request was reserved in another epoch than s's: a cut since
// then answered it already.
func (a *Adaptive) cut(s aimd, now, epoch int64) (aimd, bool) {
	if s.since != epoch {
		return s, false
	}
	s.rate = max(a.rateAt(s, now)/100*a.Backoff, a.Min*1000)
	s.since = max(now, epoch+1) // a new epoch, even on a clock that did not move
	return s, true
}

// ttl is how long the store keeps s at now: until it is back at Max with
// no slot taken, as good as no state, plus a second for the clocks of
// other processes.
func (a *Adaptive) ttl(s aimd, now int64) time.Duration {
	top := a.Max * 1000
	back := s.since + (top-s.rate)/a.Increase*1_000_000
	return time.Duration(max(back, s.tat)-now) + time.Second
}

// aimdState is the stored form's length: a version byte, then rate,
// since and tat as big-endian int64s.
const aimdState = 1 + 3*8

func (s aimd) append(b []byte) []byte {
	b = append(b, 1)
	b = binary.BigEndian.AppendUint64(b, uint64(s.rate))
	b = binary.BigEndian.AppendUint64(b, uint64(s.since))
	return binary.BigEndian.AppendUint64(b, uint64(s.tat))
}

// decodeAIMD decodes a stored state; a state of another length or version
// is not one: the key was written by something else.
func decodeAIMD(b []byte) (aimd, error) {
	if len(b) != aimdState || b[0] != 1 {
		return aimd{}, fmt.Errorf("httplimit: adaptive rate: stored state of %d bytes is not one", len(b))
	}
	s := aimd{rate: int64(binary.BigEndian.Uint64(b[1:])), since: int64(binary.BigEndian.Uint64(b[9:])),
		tat: int64(binary.BigEndian.Uint64(b[17:]))}
	if s.rate <= 0 {
		return aimd{}, fmt.Errorf("httplimit: adaptive rate: stored rate %d is not positive", s.rate)
	}
	return s, nil
}

// update runs f on key's shared state in a's store at now: f returns the
// next state and whether it changed.
func (a *Adaptive) update(ctx context.Context, key string, now int64, f func(aimd) (aimd, bool)) error {
	var derr error
	err := a.Store.Update(ctx, "httplimit/adaptive:"+key, func(state []byte) ([]byte, time.Duration, bool) {
		derr = nil
		s := a.fresh(now)
		if state != nil {
			var err error
			if s, err = decodeAIMD(state); err != nil {
				derr = err
				return nil, 0, false
			}
			// Min or Max may have changed since it was written.
			s.rate = min(max(s.rate, a.Min*1000), a.Max*1000)
		}
		next, changed := f(s)
		if !changed {
			return nil, 0, false
		}
		return next.append(nil), a.ttl(next, now), true
	})
	if err == nil {
		err = derr
	}
	return err
}

// adaptiveWait reserves key's next slot within maxWait and sleeps until
// it is due; it returns the epoch to cut if the request is refused.
func (t *Transport) adaptiveWait(ctx context.Context, key string, maxWait time.Duration) (epoch int64, waited time.Duration, err error) {
	a := t.o.adaptive
	now := t.o.clock.Now()
	var at int64
	ok := false
	err = a.update(ctx, key, now, func(s aimd) (aimd, bool) {
		s, at, ok = a.reserve(s, now, maxWait)
		epoch = s.since
		return s, ok
	})
	if err != nil {
		return 0, 0, err
	}
	wait := time.Duration(at - now)
	if !ok {
		return 0, 0, &WaitError{Key: key, Wait: wait, MaxWait: maxWait, Err: ErrAdaptiveRate}
	}
	if wait > 0 {
		if err := sleep.On(ctx, t.o.clock, wait); err != nil {
			return 0, 0, &WaitError{Key: key, MaxWait: maxWait, Err: err}
		}
	}
	return epoch, wait, nil
}
