package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/limitcore"
	"github.com/sluicehq/sluice/internal/rlheader"
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

// setHeaders sets the rate-limit headers of m's styles for ds on h, and
// Retry-After when retryAfter (seconds) is not negative.
func (m *Middleware) setHeaders(h http.Header, ds []limitcore.Decision, retryAfter int64) {
	// The values are written one after the other in buf, on the stack;
	// fs records where each ends.
	var space [192]byte
	buf := space[:0]
	var fs fields
	if m.o.headers&Draft11Headers != 0 {
		// RateLimit's list is built beside RateLimit-Policy's, and
		// follows it in buf.
		var limSpace [96]byte
		lim, n := limSpace[:0], 0
		for i := range ds {
			d := &ds[i]
			if d.Res.Limit > maxSFInteger || d.Res.Shadow {
				continue
			}
			if n++; n > 1 {
				buf, lim = append(buf, ", "...), append(lim, ", "...)
			}
			var w int64
			if window := m.windows[d.Index]; window > 0 {
				w = limitcore.Seconds(window)
			}
			buf = rlheader.AppendPolicy(buf, m.names[d.Index], d.Res.Limit, w)
			lim = rlheader.AppendRateLimit(lim, m.names[d.Index], d.Res.Remaining, limitcore.Seconds(d.Res.ResetAfter))
		}
		if n > 0 {
			fs.end("Ratelimit-Policy", len(buf))
			buf = append(buf, lim...)
			fs.end("Ratelimit", len(buf))
		}
	}
	if d := m.restrictive(ds); d != nil {
		if m.o.headers&EarlyDraftHeaders != 0 {
			buf = fs.int(buf, "Ratelimit-Limit", d.Res.Limit)
			buf = fs.int(buf, "Ratelimit-Remaining", d.Res.Remaining)
			buf = fs.int(buf, "Ratelimit-Reset", limitcore.Seconds(d.Res.ResetAfter))
		}
		if m.o.headers&XHeaders != 0 {
			buf = fs.int(buf, "X-Ratelimit-Limit", d.Res.Limit)
			buf = fs.int(buf, "X-Ratelimit-Remaining", d.Res.Remaining)
			buf = fs.int(buf, "X-Ratelimit-Reset", resetEpoch(m.o.clock.Now(), d.Res.ResetAfter))
		}
	}
	if retryAfter >= 0 {
		buf = fs.int(buf, "Retry-After", retryAfter)
	}
	fs.set(h, buf)
}

// fields are where header values end in a buffer, to set them all with two
// allocations: one string holding every value and one slice holding every
// field's value. A Set each would allocate the value, its slice and, for
// a name not in canonical form (RateLimit-Policy is Ratelimit-Policy), the
// name: about a dozen allocations a response, more than the decision.
type fields struct {
	names [9]string // in canonical form: at most 2+3+3 rate-limit fields and Retry-After
	ends  [9]int
	n     int
}

// end records that the value of the field name ends at offset end.
func (f *fields) end(name string, end int) {
	f.names[f.n], f.ends[f.n] = name, end
	f.n++
}

// int appends v to buf as the value of the field name.
func (f *fields) int(buf []byte, name string, v int64) []byte {
	buf = strconv.AppendInt(buf, v, 10)
	f.end(name, len(buf))
	return buf
}

// set sets the fields, whose values are in buf, on h, replacing their
// values as Header.Set does. Each value is a slice of its own capacity, so
// that adding to one field does not write over the next.
func (f *fields) set(h http.Header, buf []byte) {
	if f.n == 0 {
		return
	}
	all := string(buf)
	vals := make([]string, f.n)
	start := 0
	for i := range f.n {
		vals[i] = all[start:f.ends[i]]
		start = f.ends[i]
		h[f.names[i]] = vals[i : i+1 : i+1]
	}
}

// restrictive is mostRestrictive(ds) for the styles that state one limit,
// and nil when m sends none of them.
func (m *Middleware) restrictive(ds []limitcore.Decision) *limitcore.Decision {
	if m.o.headers&(EarlyDraftHeaders|XHeaders) == 0 {
		return nil
	}
	return mostRestrictive(ds)
}

// mostRestrictive is, of the limits of ds that state a limit (those in
// force: not in shadow mode), the
// rejecting one with the longest RetryAfter, else the one with the fewest
// Remaining; the first on a tie, nil when none states a limit.
func mostRestrictive(ds []limitcore.Decision) *limitcore.Decision {
	var best *limitcore.Decision
	for i := range ds {
		d := &ds[i]
		switch {
		case d.Res.Limit > maxSFInteger || d.Res.Shadow:
		case best == nil:
			best = d
		case !d.Res.Allowed && (best.Res.Allowed || d.Res.RetryAfter > best.Res.RetryAfter):
			best = d
		case d.Res.Allowed && best.Res.Allowed && d.Res.Remaining < best.Res.Remaining:
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
