// Package rlheader writes the members of the RateLimit-Policy and
// RateLimit header fields of draft-ietf-httpapi-ratelimit-headers-11, in
// RFC 9651 structured-field syntax, for httplimit's Middleware and the
// Envoy rate limit service's answers alike:
//
//	RateLimit-Policy: "name";q=<quota>;w=<window seconds>
//	RateLimit: "name";r=<remaining>;t=<seconds to reset>
//
// A field holds one member per limit, joined with ", ".
package rlheader

import "strconv"

// MaxInteger is the largest integer of a structured field: a limit above
// it has no quota worth stating, and is left out.
const MaxInteger = 999_999_999_999_999

// Quote returns name as a structured-field string, and false when it
// cannot be one: it must be printable ASCII.
func Quote(name string) (string, bool) {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "", false
		}
	}
	return strconv.Quote(name), true // for printable ASCII, Quote escapes only \ and "
}

// AppendPolicy appends to b the RateLimit-Policy member of the limit
// called quoted (a Quote): its quota q and its window w in seconds, left
// out when w ≤ 0.
func AppendPolicy(b []byte, quoted string, q, w int64) []byte {
	b = strconv.AppendInt(append(append(b, quoted...), ";q="...), q, 10)
	if w > 0 {
		b = strconv.AppendInt(append(b, ";w="...), w, 10)
	}
	return b
}

// AppendRateLimit appends to b the RateLimit member of the limit called
// quoted (a Quote): what remains r, and t, the seconds until it resets.
func AppendRateLimit(b []byte, quoted string, r, t int64) []byte {
	b = strconv.AppendInt(append(append(b, quoted...), ";r="...), r, 10)
	return strconv.AppendInt(append(b, ";t="...), t, 10)
}
