package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/internal/reqkey"
)

// KeyFunc returns the key a call is limited under: a client's address,
// an API key, a user ID. An error wrapping ErrNoKey means the call does
// not carry the key (the Interceptor answers INVALID_ARGUMENT); any other
// error is the server's (INTERNAL).
type KeyFunc func(ctx context.Context, c Call) (string, error)

// ErrNoKey is wrapped by the errors of key functions for a call that does
// not carry its key, such as missing metadata.
var ErrNoKey = errors.New("grpclimit: call has no key")

// Metadata returns a key function that reads the incoming metadata name,
// for example an API key. A call without it, or with it empty, has no
// key (ErrNoKey). Of several values the first counts. The name is not
// case-sensitive; a binary ("-bin") value is its decoded bytes.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ Call) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", fmt.Errorf("%w: metadata %s is missing", ErrNoKey, name)
	}
}

// ContextValue returns a key function that reads the call context's value
// for key, as set by an earlier interceptor (a user ID after
// authentication). The value must be a string or a fmt.Stringer; without
// a value the call has no key (ErrNoKey), and a value of another type is
// an error.
func ContextValue(key any) KeyFunc {
	return func(ctx context.Context, _ Call) (string, error) {
		return reqkey.FromValue("grpclimit", ErrNoKey, key, ctx.Value(key))
	}
}

// Method is a KeyFunc that returns the call's full method name,
// "/package.Service/Method".
func Method(_ context.Context, c Call) (string, error) { return c.Method, nil }

// Join returns a key function whose key is made of the keys of all of
// keys, in order, each written with its length so that no two different
// lists make the same key: Join(clientIP, Method) limits each client on
// each method. The first error of keys is its error.
func Join(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, c Call) (string, error) {
		return reqkey.Join(len(keys), func(i int) (string, error) { return keys[i](ctx, c) })
	}
}

// IPOption configures ClientIP.
type IPOption func(*ipOptions)

type ipOptions = reqkey.Options

// WithTrustedProxies makes ClientIP believe the forwarding metadata (see
// WithProxyHeader) of calls whose peer is in one of prefixes. The default
// is to trust no proxy and use the peer's address.
func WithTrustedProxies(prefixes ...netip.Prefix) IPOption {
	return func(o *ipOptions) { o.Trusted = append(o.Trusted, prefixes...) }
}

// WithProxyHeader sets the metadata trusted proxies record the client in:
// "x-forwarded-for" (the default, as Envoy sends it) or "forwarded" (RFC
// 7239, its for= parameters), in any case. Name the one your proxies set
// and overwrite: metadata they pass through untouched is the client's to
// forge.
func WithProxyHeader(name string) IPOption {
	return func(o *ipOptions) { o.Header = strings.ToLower(name) }
}

// WithIPv6Prefix sets how many leading bits of an IPv6 address make a key:
// clients in one /bits network share it, since a single host commonly has
// a whole /64 to draw addresses from. The default is 64; 128 limits each
// address alone. It must be in [1, 128].
func WithIPv6Prefix(bits int) IPOption { return func(o *ipOptions) { o.V6Bits = bits } }

// ClientIP returns a key function whose key is the client's IP address,
// as httplimit.ClientIP makes it, so that a client has the same key over
// HTTP and gRPC: an IPv4 address as written ("192.0.2.1"), an
// IPv4-mapped IPv6 address as its IPv4 address, and any other IPv6
// address as its network of WithIPv6Prefix bits ("2001:db8:1:2::/64").
//
// The client is the call's peer (peer.FromContext) unless that peer is a
// trusted proxy (WithTrustedProxies). Then the forwarding metadata is
// read from right to left, skipping the addresses of trusted proxies, and
// the first address that is not one is the client. An entry that is not
// an address ("unknown", an obfuscated identifier) ends the walk, and the
// last trusted proxy counts as the client: what lies beyond it cannot be
// believed. When every address is trusted the leftmost is the client. A
// peer that is not an IP address (a Unix socket, an in-memory listener)
// is an error.
//
// It returns a *ConfigError for a prefix length outside [1, 128] or a
// header other than x-forwarded-for and forwarded.
func ClientIP(opts ...IPOption) (KeyFunc, error) {
	ip, header, e := reqkey.Configure("x-forwarded-for", opts)
	if e != nil {
		return nil, &ConfigError{Field: e.Field, Value: e.Value, Want: e.Want}
	}
	return func(ctx context.Context, _ Call) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", errors.New("grpclimit: the call has no peer address")
		}
		key, ok := ip.KeyOf(p.Addr.String(), func() []string {
			md, _ := metadata.FromIncomingContext(ctx)
			return md.Get(header)
		})
		if !ok {
			return "", fmt.Errorf("grpclimit: peer %q is not an IP address", p.Addr)
		}
		return key, nil
	}, nil
}
