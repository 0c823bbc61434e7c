package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderStyle is a set of rate-limit header fields that Middleware sends
// on every response it lets through or rejects. Styles combine with |.
type HeaderStyle uint8

// The header styles. Every value comes from the sluice.Result of the
// request (docs/http.md shows them for each policy). A limit whose
// Result.Limit is above 999,999,999,999,999, the largest integer of a
// structured field, has no limit worth stating (sluice.NoLimit) and is
// left out of every style.
const (
	// Draft11Headers are the fields of draft-ietf-httpapi-ratelimit-headers-11,
	// one list member per limit, named by Limit.Name:
	//
	//	RateLimit-Policy: "name";q=<Result.Limit>;w=<window>
	//	RateLimit: "name";r=<Result.Remaining>;t=<Result.ResetAfter>
	//
	// in whole seconds rounded up. w is the limit's Window (by default
	// the Window of its policy), left out when that is not positive.
	Draft11Headers HeaderStyle = 1 << iota
	// EarlyDraftHeaders are the RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset fields of the early drafts, Reset in seconds from now
	// (Result.ResetAfter rounded up). They state one limit: the most
	// restrictive (see XHeaders).
	EarlyDraftHeaders
	// XHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, Reset in seconds since the Unix epoch (WithClock's
	// time plus Result.ResetAfter, rounded up) as GitHub sends it. They state
	// one limit, the most restrictive: of the rejecting limits the one with
	// the longest RetryAfter, else the one with the fewest Remaining, the
	// first of them on a tie.
	XHeaders

	allHeaders = Draft11Headers | EarlyDraftHeaders | XHeaders
)

// maxSFInteger is the largest integer of an RFC 9651 structured field.
const maxSFInteger = 999_999_999_999_999

// setHeaders sets the rate-limit headers of m's styles for ds on h.
func (m *Middleware) setHeaders(h http.Header, ds []decision) {
	if m.o.headers&Draft11Headers != 0 {
		var policy, limit []string
		for i := range ds {
			d := &ds[i]
			if d.res.Limit > maxSFInteger {
				continue
			}
			p := sfString(d.limit.Name) + ";q=" + strconv.FormatInt(d.res.Limit, 10)
			if d.window > 0 {
				p += ";w=" + strconv.FormatInt(ceilSeconds(d.window), 10)
			}
			policy = append(policy, p)
			limit = append(limit, sfString(d.limit.Name)+";r="+strconv.FormatInt(d.res.Remaining, 10)+
				";t="+strconv.FormatInt(ceilSeconds(d.res.ResetAfter), 10))
		}
		if len(policy) > 0 {
			h.Set("RateLimit-Policy", strings.Join(policy, ", "))
			h.Set("RateLimit", strings.Join(limit, ", "))
		}
	}
	if m.o.headers&(EarlyDraftHeaders|XHeaders) == 0 {
		return
	}
	d := mostRestrictive(ds)
	if d == nil {
		return
	}
	limit, remaining := strconv.FormatInt(d.res.Limit, 10), strconv.FormatInt(d.res.Remaining, 10)
	if m.o.headers&EarlyDraftHeaders != 0 {
		h.Set("RateLimit-Limit", limit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.res.ResetAfter), 10))
	}
	if m.o.headers&XHeaders != 0 {
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", strconv.FormatInt(resetEpoch(m.o.clock.Now(), d.res.ResetAfter), 10))
	}
}

// mostRestrictive is, of the limits of ds that state a limit, the
// rejecting one with the longest RetryAfter, else the one with the fewest
// Remaining; the first on a tie, nil when none states a limit.
func mostRestrictive(ds []decision) *decision {
	var best *decision
	for i := range ds {
		d := &ds[i]
		switch {
		case d.res.Limit > maxSFInteger:
		case best == nil:
			best = d
		case !d.res.Allowed && (best.res.Allowed || d.res.RetryAfter > best.res.RetryAfter):
			best = d
		case d.res.Allowed && best.res.Allowed && d.res.Remaining < best.res.Remaining:
			best = d
		}
	}
	return best
}

// resetEpoch is the Unix time in whole seconds, rounded up, of now (ns)
// plus d. It cannot overflow: both are below 2^63 ns, about 2^33 s.
func resetEpoch(now int64, d time.Duration) int64 {
	sec, frac := now/int64(time.Second), now%int64(time.Second)
	if frac < 0 { // before 1970: floor division
		sec, frac = sec-1, frac+int64(time.Second)
	}
	dsec, dfrac := int64(d/time.Second), int64(d%time.Second)
	s := sec + dsec
	if frac+dfrac > 0 {
		s++
		if frac+dfrac > int64(time.Second) {
			s++
		}
	}
	return s
}

// sfString is s, which is printable ASCII, as a structured-field string.
func sfString(s string) string {
	return strconv.Quote(s) // for printable ASCII, Quote escapes only \ and "
}
