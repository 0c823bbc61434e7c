// Package outage logs a store's outage as a few lines with counts, where
// a line per failed decision made an outage of seconds thousands of lines
// (14,092 lines, 2.6 MB, in 5 s at 2,800 requests a second), each with
// the client's key.
package outage

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// Every is how often a Log writes a line while the store fails, and
// Settle how long the store must answer without a failure for the
// outage to end.
const (
	Every  = 10 * time.Second
	Settle = time.Second
)

// Log aggregates the failures of a store into lines: one at the first
// failure, which says what failed and why; one per Every while failures
// go on, with their counts; one when the store has answered for Settle
// without a failure, with the outage's length and total. Lines name
// limiters and domains, never a key: a cause whose message quotes one is
// left out. It is safe for simultaneous use.
type Log struct {
	log *slog.Logger
	now func() time.Time

	failing atomic.Bool // read without mu by Success, on every store call

	mu       sync.Mutex
	since    time.Time        // the outage's first failure
	last     time.Time        // its last failure
	lastLine time.Time        // when a line was last written, zero before the first
	answered bool             // the store answered since the last failure
	n, total int64            // failures since the last line, and since the outage began
	kinds    map[string]int64 // failures since the last line, by kind
	pending  *first           // a start not yet logged: a line was written less than Every ago
}

// first is what the first failure of an outage said.
type first struct{ what, kind, cause string }

// New returns a Log that writes to l, with now as its clock.
func New(l *slog.Logger, now func() time.Time) *Log {
	return &Log{log: l, now: now, kinds: make(map[string]int64)}
}

// Failure counts a decision that the store failed: what is what asked
// (a limiter, a domain), err the store's error.
func (o *Log) Failure(what string, err error) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	kind := Kind(err)
	if !o.failing.Load() {
		o.failing.Store(true)
		o.since, o.total = now, 0
		o.pending = &first{what, kind, Cause(err)}
	}
	o.last, o.answered = now, false
	o.n++
	o.total++
	o.kinds[kind]++
	o.flush(now)
}

// Success notes that the store answered a call. It costs an atomic load
// while the store is healthy.
func (o *Log) Success() { o.tick(true) }

// Tick writes the lines that are due at the time of its clock: the
// counts of an interval without a decision to write them, the end of an
// outage without a call since. Run calls it every second.
func (o *Log) Tick() { o.tick(false) }

// tick writes the lines due now, during an outage, having noted that the
// store answered a call when answered is set.
func (o *Log) tick(answered bool) {
	if !o.failing.Load() {
		return
	}
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answered = o.answered || answered
	o.flush(now)
}

// Run calls Tick every second until ctx ends.
func (o *Log) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.Tick()
		}
	}
}

// flush writes what is due at now: the start of the outage, its counts
// every Every, its end. It requires that o.mu is held and the store is
// failing.
func (o *Log) flush(now time.Time) {
	due := o.lastLine.IsZero() || now.Sub(o.lastLine) >= Every
	switch {
	case o.answered && now.Sub(o.last) >= Settle:
		o.failing.Store(false)
		o.log.Info("the store answers again", "failed_decisions", o.total, "outage", o.last.Sub(o.since).String())
		o.reset(now)
	case o.pending != nil && due:
		p := o.pending
		attrs := []any{"first", p.what, "kind", p.kind}
		if p.cause != "" {
			attrs = append(attrs, "cause", p.cause)
		}
		if o.n > 1 { // it started less than Every after the last line
			attrs = append(attrs, "failed_decisions", o.n)
		}
		o.log.Warn("the store fails: each decision that needs it follows the failure policy; counts follow every "+Every.String()+" until it answers", attrs...)
		o.reset(now)
	case due && o.n > 0:
		attrs := append([]any{"failed_decisions", o.n, "since_start", o.total, "for", now.Sub(o.since).String()}, o.kindAttrs()...)
		o.log.Warn("the store still fails", attrs...)
		o.reset(now)
	}
}

// reset starts a new interval at now. It requires that o.mu is held.
func (o *Log) reset(now time.Time) {
	o.lastLine, o.n, o.pending = now, 0, nil
	clear(o.kinds)
}

// kindAttrs are the interval's counts by kind, as attributes. It
// requires that o.mu is held.
func (o *Log) kindAttrs() []any {
	var attrs []any
	for _, k := range kinds {
		if n := o.kinds[k]; n > 0 {
			attrs = append(attrs, k, n)
		}
	}
	return attrs
}

// kinds are the values of Kind, in the order of the lines.
var kinds = []string{"timeout", "unavailable", "circuit_open", "answer_lost", "contention", "other"}

// Kind names the kind of store failure err is, for a count: timeout,
// unavailable, circuit_open, answer_lost, contention or other.
func Kind(err error) string {
	switch {
	case errors.Is(err, sluice.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, driver.ErrIndeterminate):
		return "answer_lost"
	case errors.Is(err, driver.ErrConflict):
		return "contention"
	case errors.Is(err, driver.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// Cause is the first message along err's chain (the last error where
// one wraps several, which is the store's own) that quotes nothing: the
// messages that name a key quote it (driver.QuoteKey), so the cause is
// the store's error without the key, "dial tcp 10.0.0.5:6379: connect:
// connection refused". It is "" when every message quotes something.
func Cause(err error) string {
	for err != nil {
		if msg := err.Error(); !strings.ContainsRune(msg, '"') {
			return msg
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				return ""
			}
			err = errs[len(errs)-1]
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return ""
		}
	}
	return ""
}
