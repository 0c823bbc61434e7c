package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
)

// incoming is the context of a call from addr with the metadata pairs kv.
func incoming(addr net.Addr, kv ...string) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	if addr != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	return ctx
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestClientIP(t *testing.T) {
	proxies := grpclimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"))
	forwarded := grpclimit.WithProxyHeader("Forwarded")
	for _, tt := range []struct {
		name string
		opts []grpclimit.IPOption
		peer net.Addr
		md   []string
		want string
	}{
		{"IPv4", nil, tcp("192.0.2.1:1234"), nil, "192.0.2.1"},
		{"IPv6 /64", nil, tcp("[2001:db8:1:2:3:4:5:6]:1234"), nil, "2001:db8:1:2::/64"},
		{"IPv6 /56", []grpclimit.IPOption{grpclimit.WithIPv6Prefix(56)}, tcp("[2001:db8:1:2ff:3:4:5:6]:1234"), nil, "2001:db8:1:200::/56"},
		{"IPv6 /128", []grpclimit.IPOption{grpclimit.WithIPv6Prefix(128)}, tcp("[2001:db8::6]:1234"), nil, "2001:db8::6/128"},
		{"IPv4-mapped", nil, tcp("[::ffff:192.0.2.1]:1234"), nil, "192.0.2.1"},
		{"zone", nil, &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, nil, "fe80::/64"},
		{"UDP address", nil, &net.UDPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}, nil, "192.0.2.9"},
		{"proxies not trusted by default", nil, tcp("10.0.0.1:1"), []string{"x-forwarded-for", "203.0.113.9"}, "10.0.0.1"},
		{"untrusted peer", []grpclimit.IPOption{proxies}, tcp("192.0.2.1:1"), []string{"x-forwarded-for", "203.0.113.9"}, "192.0.2.1"},
		{"trusted peer", []grpclimit.IPOption{proxies}, tcp("10.0.0.1:1"), []string{"x-forwarded-for", "203.0.113.9"}, "203.0.113.9"},
		{"right to left past trusted hops", []grpclimit.IPOption{proxies}, tcp("10.0.0.1:1"),
			[]string{"x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.1.1.1 , 10.2.2.2"}, "203.0.113.9"},
		{"several values", []grpclimit.IPOption{proxies}, tcp("10.0.0.1:1"),
			[]string{"x-forwarded-for", "198.51.100.1", "x-forwarded-for", "203.0.113.9, 10.2.2.2"}, "203.0.113.9"},
		{"unknown hop stops at the last trusted", []grpclimit.IPOption{proxies}, tcp("10.0.0.1:1"),
			[]string{"x-forwarded-for", "203.0.113.9, unknown, 10.2.2.2"}, "10.2.2.2"},
		{"IPv6 client behind an IPv6 proxy", []grpclimit.IPOption{proxies}, tcp("[2001:db8:ffff::1]:1"),
			[]string{"x-forwarded-for", "2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"Forwarded", []grpclimit.IPOption{proxies, forwarded}, tcp("10.0.0.1:1"),
			[]string{"forwarded", `for=198.51.100.1, for="[2001:db8:cafe::17]:4711";proto=https, For=10.3.3.3;by=10.0.0.1`}, "2001:db8:cafe::/64"},
		{"Forwarded ignores x-forwarded-for", []grpclimit.IPOption{proxies, forwarded}, tcp("10.0.0.1:1"),
			[]string{"x-forwarded-for", "203.0.113.9", "forwarded", "for=198.51.100.1"}, "198.51.100.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := grpclimit.ClientIP(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := key(incoming(tt.peer, tt.md...), grpclimit.Call{Method: checkMethod})
			if err != nil || got != tt.want {
				t.Errorf("ClientIP() = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

// TestClientIPAsHTTP: a client has the same key over gRPC as over HTTP.
func TestClientIPAsHTTP(t *testing.T) {
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	gkey, err := grpclimit.ClientIP(grpclimit.WithTrustedProxies(trusted))
	if err != nil {
		t.Fatal(err)
	}
	hkey, err := httplimit.ClientIP(httplimit.WithTrustedProxies(trusted))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ peer, xff string }{
		{"192.0.2.1:1", ""},
		{"[2001:db8:1:2:3:4:5:6]:1", ""},
		{"10.0.0.1:1", "2001:db8:7::1, 10.0.0.2"},
		{"10.0.0.1:1", "unknown, 10.0.0.2"},
	} {
		g, gerr := gkey(incoming(tcp(tt.peer), "x-forwarded-for", tt.xff), grpclimit.Call{})
		h, herr := hkey(httpRequest(tt.peer, tt.xff))
		if g != h || gerr != nil || herr != nil {
			t.Errorf("peer %s, x-forwarded-for %q: gRPC key %q (%v), HTTP key %q (%v)", tt.peer, tt.xff, g, gerr, h, herr)
		}
	}
}

func TestClientIPErrors(t *testing.T) {
	key, err := grpclimit.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		ctx  context.Context
	}{
		{"no peer", incoming(nil)},
		{"Unix socket", incoming(&net.UnixAddr{Name: "/run/x.sock", Net: "unix"})},
	} {
		if got, err := key(tt.ctx, grpclimit.Call{}); err == nil || errors.Is(err, grpclimit.ErrNoKey) {
			t.Errorf("%s: ClientIP() = %q, %v, want an error that is not ErrNoKey", tt.name, got, err)
		}
	}
	for _, tt := range []struct {
		opt       grpclimit.IPOption
		wantField string
	}{
		{grpclimit.WithIPv6Prefix(0), "WithIPv6Prefix"},
		{grpclimit.WithIPv6Prefix(129), "WithIPv6Prefix"},
		{grpclimit.WithProxyHeader("x-real-ip"), "WithProxyHeader"},
		{grpclimit.WithTrustedProxies(netip.Prefix{}), "WithTrustedProxies"},
	} {
		_, err := grpclimit.ClientIP(tt.opt)
		var ce *grpclimit.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.wantField {
			t.Errorf("ClientIP: %v, want a *ConfigError of %s", err, tt.wantField)
		}
	}
}

// TestClientIPOverLoopback: over a real TCP connection the key is the
// client's loopback address, or behind a trusted proxy the address its
// x-forwarded-for names; each key has its own limit.
func TestClientIPOverLoopback(t *testing.T) {
	key, err := grpclimit.ClientIP(grpclimit.WithTrustedProxies(netip.MustParsePrefix("127.0.0.0/8")))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, sluice.FixedWindow(1, 60e9))
	s := start(t, newInterceptor(t, []grpclimit.Limit{{Name: "client", Limiter: l, Key: key}}), setup{tcp: true})
	for i, tt := range []struct {
		md   []string
		pass bool
	}{
		{nil, true},
		{nil, false}, // 127.0.0.1 again
		{[]string{"x-forwarded-for", "2001:db8:1:2::99"}, true},
		{[]string{"x-forwarded-for", "2001:db8:1:2:ffff::1"}, false}, // the same /64
		{[]string{"x-forwarded-for", "2001:db8:1:3::1"}, true},
	} {
		_, err := s.check(tt.md...)
		if (err == nil) != tt.pass {
			t.Errorf("call %d (%q): %v, want passing %v", i, tt.md, err, tt.pass)
		}
	}
	for _, k := range []string{"127.0.0.1", "2001:db8:1:2::/64", "2001:db8:1:3::/64"} {
		if res, err := l.Peek(context.Background(), k); err != nil || res.Allowed {
			t.Errorf("key %s: Peek = %+v, %v; want it used up", k, res, err)
		}
	}
}

type ctxKey struct{}

func TestKeys(t *testing.T) {
	ctx := incoming(nil, "x-api-key", "k1", "x-tenant", "a|b", "x-empty", "", "x-id-bin", "\x00\xff")
	call := grpclimit.Call{Method: checkMethod}
	for _, tt := range []struct {
		name    string
		key     grpclimit.KeyFunc
		ctxVal  any
		want    string
		wantErr error // nil: none; errAny: any error; else matched by errors.Is
	}{
		{"metadata", grpclimit.Metadata("X-API-Key"), nil, "k1", nil},
		{"binary metadata", grpclimit.Metadata("x-id-bin"), nil, "\x00\xff", nil},
		{"missing metadata", grpclimit.Metadata("x-other"), nil, "", grpclimit.ErrNoKey},
		{"empty metadata", grpclimit.Metadata("x-empty"), nil, "", grpclimit.ErrNoKey},
		{"method", grpclimit.Method, nil, checkMethod, nil},
		{"context string", grpclimit.ContextValue(ctxKey{}), "user-7", "user-7", nil},
		{"context Stringer", grpclimit.ContextValue(ctxKey{}), stringer("user-8"), "user-8", nil},
		{"context missing", grpclimit.ContextValue(ctxKey{}), nil, "", grpclimit.ErrNoKey},
		{"context wrong type", grpclimit.ContextValue(ctxKey{}), 42, "", errAny},
		{"join", grpclimit.Join(grpclimit.Method, grpclimit.Metadata("x-tenant")), nil, "28:" + checkMethod + "|3:a|b", nil},
		{"join error", grpclimit.Join(grpclimit.Method, grpclimit.Metadata("x-other")), nil, "", grpclimit.ErrNoKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ctx
			if tt.ctxVal != nil {
				c = context.WithValue(ctx, ctxKey{}, tt.ctxVal)
			}
			got, err := tt.key(c, call)
			switch {
			case tt.wantErr == nil && err != nil, tt.wantErr == errAny && err == nil,
				tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("key = %q, %v, want error %v", got, err, tt.wantErr)
			case got != tt.want:
				t.Errorf("key = %q, want %q", got, tt.want)
			}
			if tt.wantErr == errAny && errors.Is(err, grpclimit.ErrNoKey) {
				t.Errorf("key error %v matches ErrNoKey", err)
			}
		})
	}
}

var errAny = errors.New("any error")

// httpRequest is an HTTP request from remote with an X-Forwarded-For.
func httpRequest(remote, xff string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	return r
}
