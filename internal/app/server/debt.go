package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
)

// maxTTL is the longest ttl_ms of a reservation: a day. A hold lives in
// its key's record until it is settled or its ttl ends, so its ttl bounds
// how long an abandoned one weighs on the key.
const maxTTL = 24 * time.Hour

type reserveRequest struct {
	keyRequest
	Tokens *int64 `json:"tokens"`
	TTLMS  *int64 `json:"ttl_ms"`
}

func (q *reserveRequest) tokenCount() *int64 { return q.Tokens }

// Reservation is what reserve answers: the decision on the estimate and,
// when allowed, the reservation's ID to settle it with.
type Reservation struct {
	Result
	Reservation string `json:"reservation,omitempty"`
	Debt        int64  `json:"debt"`
}

// reserve takes an estimate of tokens for a key, admitted or refused as a
// consume, and holds it for ttl_ms to be settled (settle) with the actual
// cost; never settled, it stays charged its estimate.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request) *apiError {
	var q reserveRequest
	snap, l, n, e := s.decodeTokens(w, r, &q)
	if e != nil {
		return e
	}
	switch {
	case q.TTLMS == nil:
		return errorf(http.StatusBadRequest, codeInvalidRequest, "ttl_ms is required")
	case *q.TTLMS < 1 || *q.TTLMS > maxTTL.Milliseconds():
		return errorf(http.StatusBadRequest, codeInvalidRequest, "ttl_ms must be 1 to %d, got %d", maxTTL.Milliseconds(), *q.TTLMS)
	}
	c, err := l.l.Hold(r.Context(), q.Key, n, time.Duration(*q.TTLMS)*time.Millisecond)
	res := newResult(c.Result)
	err = aboveLimit(l, n, res, err)
	s.record(snap, l.name, q.Key, n, res.Allowed, err)
	if err != nil {
		return s.debtError(r, l, err)
	}
	writeJSON(w, http.StatusOK, Reservation{Result: res, Reservation: c.ID, Debt: c.Debt})
	return nil
}

type settleRequest struct {
	Limiter     string `json:"limiter"`
	Reservation string `json:"reservation"`
	Tokens      *int64 `json:"tokens"`
}

// Settlement is what settle answers: whether the reservation was open
// and is now settled, and the key after it.
type Settlement struct {
	Settled      bool  `json:"settled"`
	Remaining    int64 `json:"remaining"`
	Limit        int64 `json:"limit"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Debt         int64 `json:"debt"`
}

// settle settles a reservation with its actual cost, once: the tokens it
// held beyond the cost are given back, and those the cost exceeds it by
// are charged, debt included. A retried settle changes nothing, and
// answers settled false.
func (s *Server) settle(w http.ResponseWriter, r *http.Request) *apiError {
	var q settleRequest
	if e := decode(w, r, &q); e != nil {
		return e
	}
	switch {
	case q.Limiter == "":
		return errorf(http.StatusBadRequest, codeInvalidRequest, "limiter is required")
	case q.Reservation == "":
		return errorf(http.StatusBadRequest, codeInvalidRequest, "reservation is required")
	case q.Tokens == nil:
		return errorf(http.StatusBadRequest, codeInvalidRequest, "tokens is required: the actual cost, 0 or more")
	case *q.Tokens < 0 || *q.Tokens > maxTokens:
		return errorf(http.StatusBadRequest, codeInvalidRequest, "tokens must be 0 to %d, got %d", int64(maxTokens), *q.Tokens)
	}
	l, ok := s.cur.Load().limiters[q.Limiter]
	if !ok {
		return errorf(http.StatusNotFound, codeUnknownLimiter, "no limiter %s", short(q.Limiter))
	}
	c, err := l.l.Settle(r.Context(), q.Reservation, *q.Tokens)
	var argErr *sluice.ArgumentError
	if errors.As(err, &argErr) && argErr.Arg == "id" {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "reservation %s is not an ID that /api/v1/reserve returned", short(q.Reservation))
	}
	if err != nil {
		return s.debtError(r, l, err)
	}
	writeJSON(w, http.StatusOK, Settlement{Settled: c.Settled, Remaining: c.Remaining, Limit: c.Limit,
		RetryAfterMS: millis(c.RetryAfter), Debt: c.Debt})
	return nil
}

// debtError is limiterError for reserve and settle, whose unsupported
// policies cannot owe tokens rather than wait.
func (s *Server) debtError(r *http.Request, l *limiter, err error) *apiError {
	if errors.Is(err, errors.ErrUnsupported) {
		return errorf(http.StatusBadRequest, codeUnsupported, "limiter %s's policy %s cannot owe tokens, so it cannot reserve and settle (the Debt section of docs/policies.md lists the policies that can)",
			short(l.name), l.policy)
	}
	return s.limiterError(r, err)
}
