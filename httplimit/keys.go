package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/sluicehq/sluice/internal/reqkey"
)

// KeyFunc returns the key a request is limited under: a client's address,
// an API key, a user ID. An error wrapping ErrNoKey means the request does
// not carry the key (the Middleware answers 400 Bad Request); any other
// error is the server's (500 Internal Server Error).
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is wrapped by the errors of key functions for a request that
// does not carry its key, such as a missing header.
var ErrNoKey = errors.New("httplimit: request has no key")

// Header returns a key function that reads the header name, for example an
// API key. A request without it, or with it empty, has no key (ErrNoKey).
// Of several lines of the header the first counts.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", &noKeyError{what: "header " + name + " is missing"}
	}
}

// noKeyError is a request without its key, as this package's key
// functions report it: what says what the request lacks, for the client
// to read in the Middleware's 400.
type noKeyError struct{ what string }

func (e *noKeyError) Error() string { return ErrNoKey.Error() + ": " + e.what }
func (e *noKeyError) Unwrap() error { return ErrNoKey }

// ContextValue returns a key function that reads the request context's
// value for key, as set by an earlier middleware (a user ID after
// authentication). The value must be a string or a fmt.Stringer; without
// a value the request has no key (ErrNoKey), and a value of another type
// is an error.
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		return reqkey.FromValue("httplimit", ErrNoKey, key, r.Context().Value(key))
	}
}

// Path is a KeyFunc that returns the request's URL path.
func Path(r *http.Request) (string, error) { return r.URL.Path, nil }

// Method is a KeyFunc that returns the request's method.
func Method(r *http.Request) (string, error) { return r.Method, nil }

// Join returns a key function whose key is made of the keys of all of
// keys, in order, each written with its length so that no two different
// lists make the same key: Join(ClientIP, Path) limits each client on
// each path. The first error of keys is its error.
func Join(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		return reqkey.Join(len(keys), func(i int) (string, error) { return keys[i](r) })
	}
}

// IPOption configures ClientIP.
type IPOption func(*ipOptions)

type ipOptions = reqkey.Options

// WithTrustedProxies makes ClientIP believe the forwarding header (see
// WithProxyHeader) of requests whose immediate peer is in one of
// prefixes. The default is to trust no proxy and use the peer's address.
func WithTrustedProxies(prefixes ...netip.Prefix) IPOption {
	return func(o *ipOptions) { o.Trusted = append(o.Trusted, prefixes...) }
}

// WithProxyHeader sets the header trusted proxies record the client in:
// "X-Forwarded-For" (the default) or "Forwarded" (RFC 7239, its for=
// parameters). Name the one your proxies set and overwrite: a header they
// pass through untouched is the client's to forge.
func WithProxyHeader(name string) IPOption {
	return func(o *ipOptions) { o.Header = http.CanonicalHeaderKey(name) }
}

// WithIPv6Prefix sets how many leading bits of an IPv6 address make a key:
// clients in one /bits network share it, since a single host commonly has
// a whole /64 to draw addresses from. The default is 64; 128 limits each
// address alone. It must be in [1, 128].
func WithIPv6Prefix(bits int) IPOption { return func(o *ipOptions) { o.V6Bits = bits } }

// ClientIP returns a key function whose key is the client's IP address:
// an IPv4 address as written ("192.0.2.1"), an IPv4-mapped IPv6 address
// as its IPv4 address, and any other IPv6 address as its network of
// WithIPv6Prefix bits ("2001:db8:1:2::/64").
//
// The client is the request's immediate peer (RemoteAddr) unless that
// peer is a trusted proxy (WithTrustedProxies). Then the forwarding
// header is read from right to left, skipping the addresses of trusted
// proxies, and the first address that is not one is the client. An entry
// that is not an address ("unknown", an obfuscated identifier) ends the
// walk, and the last trusted proxy counts as the client: what lies beyond
// it cannot be believed. When every address is trusted the leftmost is
// the client. A RemoteAddr that is not an IP address (a Unix socket) is an
// error.
//
// It returns a *ConfigError for a prefix length outside [1, 128] or a
// header other than X-Forwarded-For and Forwarded.
func ClientIP(opts ...IPOption) (KeyFunc, error) {
	ip, header, e := reqkey.Configure("X-Forwarded-For", opts)
	if e != nil {
		return nil, &ConfigError{Field: e.Field, Value: e.Value, Want: e.Want}
	}
	return func(r *http.Request) (string, error) {
		key, ok := ip.KeyOf(r.RemoteAddr, func() []string { return r.Header.Values(header) })
		if !ok {
			return "", fmt.Errorf("httplimit: RemoteAddr %q is not an IP address", r.RemoteAddr)
		}
		return key, nil
	}, nil
}
