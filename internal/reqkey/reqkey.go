// Package reqkey holds the rules by which httplimit and grpclimit key a
// request: the client's IP address, found behind trusted proxies and
// grouped by IPv6 network, and the joining of several keys into one
// without ambiguity. Both packages wrap it in their own options and
// errors, so that a client gets the same key over HTTP as over gRPC.
package reqkey

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// SettingError reports an IP setting out of its bounds: the option, the
// value given and the bound it broke. Each package returns it as its own
// ConfigError.
type SettingError struct{ Field, Value, Want string }

// IP keys a client by its IP address. It is immutable, so safe for
// simultaneous use by multiple goroutines.
type IP struct {
	trusted   []netip.Prefix // masked
	forwarded bool           // the header is RFC 7239 Forwarded, not X-Forwarded-For
	v6Bits    int            // in [1, 128]
}

// NewIP returns the keying of clients behind the trusted proxies, whose
// forwarding header is header, X-Forwarded-For or Forwarded in any case,
// with IPv6 addresses grouped in networks of v6Bits. It returns a
// *SettingError for bits outside [1, 128], another header or an invalid
// prefix.
func NewIP(trusted []netip.Prefix, header string, v6Bits int) (*IP, *SettingError) {
	if v6Bits < 1 || v6Bits > 128 {
		return nil, &SettingError{Field: "WithIPv6Prefix", Value: strconv.Itoa(v6Bits), Want: "must be in [1, 128]"}
	}
	forwarded := strings.EqualFold(header, "Forwarded")
	if !forwarded && !strings.EqualFold(header, "X-Forwarded-For") {
		return nil, &SettingError{Field: "WithProxyHeader", Value: strconv.Quote(header), Want: `must be "X-Forwarded-For" or "Forwarded"`}
	}
	ip := &IP{trusted: make([]netip.Prefix, len(trusted)), forwarded: forwarded, v6Bits: v6Bits}
	for i, p := range trusted {
		if !p.IsValid() {
			return nil, &SettingError{Field: "WithTrustedProxies", Value: fmt.Sprintf("%d: %v", i, p), Want: "must be a valid prefix"}
		}
		ip.trusted[i] = p.Masked()
	}
	return ip, nil
}

// Options are the settings of ClientIP in httplimit and grpclimit, which
// set them with their own IPOption functions.
type Options struct {
	Trusted []netip.Prefix // the proxies whose header is believed
	Header  string         // the forwarding header, as the package reads it
	V6Bits  int            // the IPv6 network of a key
}

// Configure applies opts to the defaults, header (the package's spelling
// of X-Forwarded-For) and IPv6 networks of 64 bits, and returns the
// keying of clients and the header to read, or a *SettingError as NewIP.
func Configure[O ~func(*Options)](header string, opts []O) (*IP, string, *SettingError) {
	o := Options{Header: header, V6Bits: 64}
	for _, opt := range opts {
		opt(&o)
	}
	ip, e := NewIP(o.Trusted, o.Header, o.V6Bits)
	return ip, o.Header, e
}

// KeyOf returns the key of the client whose request came from the
// address s, with or without a port (see ParseAddr), and false if s is
// not an address: an IPv4 address as written ("192.0.2.1"), an
// IPv4-mapped IPv6 address as its IPv4 address, and any other IPv6
// address as its network ("2001:db8:1:2::/64").
//
// The client is the peer unless it is a trusted proxy. Then the
// forwarding header, whose lines header returns (called only then), is
// read from right to left, skipping the addresses of trusted proxies, and
// the first address that is not one is the client. An entry that is not an
// address ends the walk, and the last trusted proxy counts as the client.
// When every address is trusted the leftmost is the client.
//
// The key of an IPv4 client that is the peer is the address as s writes
// it, not a copy: netip parses an IPv4 address only in the form it prints
// (four decimal fields, no leading zeros).
func (ip *IP) KeyOf(s string, header func() []string) (string, bool) {
	peer, ok := ParseAddr(s)
	if !ok {
		return "", false
	}
	host := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host = s[:i]
	}
	if strings.Trim(host, "0123456789.") != "" {
		host = "" // brackets, colons: an IPv6 address, mapped or not
	}
	return ip.key(peer, host, header), true
}

// key is KeyOf's key of peer, whose IPv4 address is written text, or of
// any peer with text "".
func (ip *IP) key(peer netip.Addr, text string, header func() []string) string {
	client := peer.WithZone("").Unmap()
	if ip.isTrusted(client) {
		hops := ip.hops(header())
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := ParseAddr(hops[i])
			if !ok {
				break
			}
			client = a
			if !ip.isTrusted(a) {
				break
			}
		}
	}
	if client.Is4() {
		if text != "" && client == peer {
			return text
		}
		return client.String()
	}
	p, _ := client.Prefix(ip.v6Bits) // cannot fail: an IPv6 address and bits in [1, 128]
	return p.String()
}

func (ip *IP) isTrusted(a netip.Addr) bool {
	for _, p := range ip.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hops returns the forwarding header's addresses as written, leftmost
// (farthest from this server) first. An element of Forwarded without a
// for= parameter is "", which ends the walk.
func (ip *IP) hops(lines []string) []string {
	var hops []string
	for _, line := range lines {
		for _, elem := range SplitQuoted(line, ',') {
			if !ip.forwarded {
				hops = append(hops, strings.TrimSpace(elem))
				continue
			}
			hop := ""
			for _, pair := range SplitQuoted(elem, ';') {
				name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if strings.EqualFold(name, "for") {
					hop = strings.Trim(value, `"`)
				}
			}
			hops = append(hops, hop)
		}
	}
	return hops
}

// SplitQuoted splits s at every sep outside double quotes, as the lists
// and parameters of HTTP fields are split.
func SplitQuoted(s string, sep byte) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			quoted = !quoted
		case s[i] == '\\' && quoted:
			i++
		case s[i] == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// ParseAddr parses an address with or without a port, in brackets or
// not, with its zone dropped and an IPv4-mapped IPv6 address unmapped.
func ParseAddr(s string) (netip.Addr, bool) {
	// A RemoteAddr has a port: it is parsed as such first, as parsing it
	// as a bare address would fail, and allocate the error, each request.
	// Where it has one colon, or a bracket first and none last, a bare
	// address parses only if the address and port do not (as "[1::2",
	// whose bracket is never closed), so the order below, which is
	// ParseAddr's, still decides when this fails.
	if strings.Count(s, ":") == 1 || strings.HasPrefix(s, "[") && !strings.HasSuffix(s, "]") {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().WithZone("").Unmap(), true
		}
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.WithZone("").Unmap(), true
}

// Join returns the key made of n keys, part(0) to part(n-1), each
// written with its length, and after the first behind a "|", so that no
// two different lists make the same key ("3:GET|7:/things"). The first
// error of part is its error.
func Join(n int, part func(i int) (string, error)) (string, error) {
	var b strings.Builder
	for i := range n {
		s, err := part(i)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String(), nil
}

// FromValue returns the key in v, a context's value for key (which errors
// name): a string, or a fmt.Stringer's String. No value is no key, an
// error wrapping noKey, the package's ErrNoKey; a value of another type
// is an error prefixed with pkg.
func FromValue(pkg string, noKey error, key, v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", fmt.Errorf("%w: no context value for %v", noKey, key)
	case string:
		return v, nil
	case fmt.Stringer:
		return v.String(), nil
	default:
		return "", fmt.Errorf("%s: context value for %v is a %T, want a string or a fmt.Stringer", pkg, key, v)
	}
}
