package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// A slot of a concurrency limiter travels through the API as the text
// "ID/key": the key a slot is held on is part of it, so that a client
// gives back a slot with the limiter and the slot alone, to any of the
// servers that share the store.

func slotToken(s sluice.Slot) string {
	if !s.Allowed || s.ID == 0 {
		return ""
	}
	return strconv.FormatInt(s.ID, 10) + "/" + s.Key
}

// parseSlot reads a slot's text, as slotToken writes it.
func parseSlot(text string) (sluice.Slot, *apiError) {
	id, key, ok := strings.Cut(text, "/")
	n, err := strconv.ParseInt(id, 10, 64)
	switch {
	case text == "":
		return sluice.Slot{}, errorf(http.StatusBadRequest, codeInvalidRequest, "slot is required")
	case !ok || err != nil || n <= 0 || key == "":
		return sluice.Slot{}, errorf(http.StatusBadRequest, codeInvalidRequest, "slot %s is not a slot that acquire returned (ID/key)", short(text))
	case len(key) > maxKey:
		return sluice.Slot{}, errorf(http.StatusBadRequest, codeInvalidRequest, "slot's key must be at most %d bytes, got %d", maxKey, len(key))
	}
	return sluice.Slot{Key: key, ID: n}, nil
}

// SlotResult is what acquire, release and renew answer: the key's
// Result after the call, and the slot. Allowed is whether the slot was
// acquired, or for release and renew whether it was still held.
type SlotResult struct {
	Result
	// Slot is the slot acquired or renewed, "" when none.
	Slot string `json:"slot,omitempty"`
	// TTLMS is how long the slot is held from now without renewal.
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

func newSlotResult(s sluice.Slot) SlotResult {
	out := SlotResult{Result: newResult(s.Result), Slot: slotToken(s)}
	if out.Slot != "" {
		out.TTLMS = millis(s.TTL)
	}
	return out
}

type acquireRequest struct {
	keyRequest
	TTLMS     int64 `json:"ttl_ms"`
	MaxWaitMS int64 `json:"max_wait_ms"`
}

// ttlOf validates an optional ttl_ms: 0 is the limiter's lease; above
// it is the limiter's argument error.
func ttlOf(ms int64) (time.Duration, *apiError) {
	if ms < 0 || ms > int64(sluice.Never/time.Millisecond) {
		return 0, errorf(http.StatusBadRequest, codeInvalidRequest, "ttl_ms must be 0 (the limiter's lease) or positive, got %d", ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// acquire takes a slot of a concurrency limiter for a key, waiting up to
// max_wait_ms for one. Being refused is a 200 with allowed false.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request) *apiError {
	var q acquireRequest
	snap, l, e := s.decodeCall(w, r, &q)
	if e != nil {
		return e
	}
	s.traceLimiter(r, l.name)
	ttl, e := ttlOf(q.TTLMS)
	if e != nil {
		return e
	}
	maxWait, e := maxWaitOf(q.MaxWaitMS)
	if e != nil {
		return e
	}
	if maxWait > 0 {
		extendDeadlines(w, snap.cfg.HTTPLimits, maxWait)
	}
	slot, err := l.l.Acquire(r.Context(), q.Key, ttl, maxWait)
	s.record(snap, l.name, q.Key, 1, slot.Allowed, err)
	if err != nil {
		return s.slotError(r, err)
	}
	writeJSON(w, http.StatusOK, newSlotResult(slot))
	return nil
}

type slotRequest struct {
	Limiter string `json:"limiter"`
	Slot    string `json:"slot"`
	TTLMS   int64  `json:"ttl_ms"`
}

// release gives a slot back; renew extends it by ttl_ms (0: the lease).
// A slot no longer held (it lapsed, or was released) is a 200 with
// allowed false.
func (s *Server) release(w http.ResponseWriter, r *http.Request) *apiError {
	return s.slotCall(w, r, false)
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) *apiError {
	return s.slotCall(w, r, true)
}

func (s *Server) slotCall(w http.ResponseWriter, r *http.Request, renew bool) *apiError {
	var q slotRequest
	if e := decode(w, r, &q); e != nil {
		return e
	}
	slot, e := parseSlot(q.Slot)
	if e != nil {
		return e
	}
	l, e := keyRequest{Limiter: q.Limiter, Key: slot.Key}.find(s.cur.Load())
	if e != nil {
		return e
	}
	s.traceLimiter(r, l.name)
	var out sluice.Slot
	var err error
	if renew {
		if slot.TTL, e = ttlOf(q.TTLMS); e != nil {
			return e
		}
		out, err = l.l.Renew(r.Context(), slot)
	} else {
		out, err = l.l.Release(r.Context(), slot)
	}
	if err != nil {
		return s.slotError(r, err)
	}
	writeJSON(w, http.StatusOK, newSlotResult(out))
	return nil
}

// slotError is limiterError for the slot calls, whose unsupported
// policy is one without slots.
func (s *Server) slotError(r *http.Request, err error) *apiError {
	if errors.Is(err, errors.ErrUnsupported) {
		return errorf(http.StatusBadRequest, codeUnsupported, "the limiter's policy holds no slots: use a concurrency policy: %v", err)
	}
	return s.limiterError(r, err)
}
