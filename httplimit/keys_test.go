package httplimit_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

func TestClientIP(t *testing.T) {
	proxies := httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"))
	forwarded := httplimit.WithProxyHeader("forwarded")
	for _, tt := range []struct {
		name   string
		opts   []httplimit.IPOption
		remote string
		header []string
		want   string
	}{
		{"IPv4", nil, "192.0.2.1:1234", nil, "192.0.2.1"},
		{"IPv6 /64", nil, "[2001:db8:1:2:3:4:5:6]:1234", nil, "2001:db8:1:2::/64"},
		{"IPv6 /56", []httplimit.IPOption{httplimit.WithIPv6Prefix(56)}, "[2001:db8:1:2ff:3:4:5:6]:1234", nil, "2001:db8:1:200::/56"},
		{"IPv6 /128", []httplimit.IPOption{httplimit.WithIPv6Prefix(128)}, "[2001:db8::6]:1234", nil, "2001:db8::6/128"},
		{"IPv4-mapped", nil, "[::ffff:192.0.2.1]:1234", nil, "192.0.2.1"},
		{"zone", nil, "[fe80::1%eth0]:1234", nil, "fe80::/64"},
		{"no port", nil, "192.0.2.1", nil, "192.0.2.1"},
		{"proxies not trusted by default", nil, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.9"}, "10.0.0.1"},
		{"untrusted peer", []httplimit.IPOption{proxies}, "192.0.2.1:1", []string{"X-Forwarded-For", "203.0.113.9"}, "192.0.2.1"},
		{"trusted peer", []httplimit.IPOption{proxies}, "10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9"},
		{"right to left past trusted hops", []httplimit.IPOption{proxies}, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "198.51.100.1, 203.0.113.9, 10.1.1.1 , 10.2.2.2"}, "203.0.113.9"},
		{"forged leftmost ignored", []httplimit.IPOption{proxies}, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "1.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"all trusted", []httplimit.IPOption{proxies}, "10.0.0.1:1", []string{"X-Forwarded-For", "10.9.9.9, 10.2.2.2"}, "10.9.9.9"},
		{"unknown hop stops at the last trusted", []httplimit.IPOption{proxies}, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "203.0.113.9, unknown, 10.2.2.2"}, "10.2.2.2"},
		{"no header", []httplimit.IPOption{proxies}, "10.0.0.1:1", nil, "10.0.0.1"},
		{"XFF mapped with port", []httplimit.IPOption{proxies}, "10.0.0.1:1", []string{"X-Forwarded-For", "[::ffff:203.0.113.9]:5"}, "203.0.113.9"},
		{"XFF IPv6 grouped", []httplimit.IPOption{proxies}, "[2001:db8:ffff::1]:1", []string{"X-Forwarded-For", "2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"Forwarded", []httplimit.IPOption{proxies, forwarded}, "10.0.0.1:1",
			[]string{"Forwarded", `for=198.51.100.1, for="[2001:db8:cafe::17]:4711";proto=https, For=10.3.3.3;by=10.0.0.1`}, "2001:db8:cafe::/64"},
		{"Forwarded ignores X-Forwarded-For", []httplimit.IPOption{proxies, forwarded}, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=198.51.100.1"}, "198.51.100.1"},
		{"X-Forwarded-For ignores Forwarded", []httplimit.IPOption{proxies}, "10.0.0.1:1",
			[]string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=198.51.100.1"}, "203.0.113.9"},
		{"Forwarded hidden", []httplimit.IPOption{proxies, forwarded}, "10.0.0.1:1",
			[]string{"Forwarded", "for=198.51.100.1, for=_hidden, for=10.4.4.4"}, "10.4.4.4"},
		{"Forwarded without for", []httplimit.IPOption{proxies, forwarded}, "10.0.0.1:1",
			[]string{"Forwarded", "for=198.51.100.1, proto=http"}, "10.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := httplimit.ClientIP(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := key(get(tt.remote, tt.header...))
			if err != nil || got != tt.want {
				t.Errorf("ClientIP() = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

func TestClientIPErrors(t *testing.T) {
	key, err := httplimit.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := key(get("@")); err == nil || errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("ClientIP() of a Unix socket peer = %q, %v, want an error that is not ErrNoKey", got, err)
	}
	for _, tt := range []struct {
		opt       httplimit.IPOption
		wantField string
	}{
		{httplimit.WithIPv6Prefix(0), "WithIPv6Prefix"},
		{httplimit.WithIPv6Prefix(129), "WithIPv6Prefix"},
		{httplimit.WithProxyHeader("X-Real-IP"), "WithProxyHeader"},
		{httplimit.WithTrustedProxies(netip.Prefix{}), "WithTrustedProxies"},
	} {
		_, err := httplimit.ClientIP(tt.opt)
		var ce *httplimit.ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.wantField {
			t.Errorf("ClientIP: %v, want a *ConfigError of %s", err, tt.wantField)
		}
	}
}

type ctxKey struct{}

func TestKeys(t *testing.T) {
	r := get("192.0.2.1:1", "X-API-Key", "k1", "X-Tenant", "a|b")
	for _, tt := range []struct {
		name    string
		key     httplimit.KeyFunc
		ctxVal  any
		want    string
		wantErr error // nil: none; errAny: any error; else matched by errors.Is
	}{
		{"header", httplimit.Header("x-api-key"), nil, "k1", nil},
		{"missing header", httplimit.Header("X-Other"), nil, "", httplimit.ErrNoKey},
		{"path", httplimit.Path, nil, "/things", nil},
		{"method", httplimit.Method, nil, "GET", nil},
		{"context string", httplimit.ContextValue(ctxKey{}), "user-7", "user-7", nil},
		{"context Stringer", httplimit.ContextValue(ctxKey{}), stringer("user-8"), "user-8", nil},
		{"context missing", httplimit.ContextValue(ctxKey{}), nil, "", httplimit.ErrNoKey},
		{"context wrong type", httplimit.ContextValue(ctxKey{}), 42, "", errAny},
		{"join", httplimit.Join(httplimit.Method, httplimit.Header("X-Tenant"), httplimit.Path), nil, "3:GET|3:a|b|7:/things", nil},
		{"join error", httplimit.Join(httplimit.Method, httplimit.Header("X-Other")), nil, "", httplimit.ErrNoKey},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := r
			if tt.ctxVal != nil {
				req = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tt.ctxVal))
			}
			got, err := tt.key(req)
			switch {
			case tt.wantErr == nil && err != nil, tt.wantErr == errAny && err == nil,
				tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("key = %q, %v, want error %v", got, err, tt.wantErr)
			case got != tt.want:
				t.Errorf("key = %q, want %q", got, tt.want)
			}
			if tt.wantErr == errAny && errors.Is(err, httplimit.ErrNoKey) {
				t.Errorf("key error %v matches ErrNoKey", err)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestJoinUnambiguous: keys whose parts differ never join to the same key.
func TestJoinUnambiguous(t *testing.T) {
	join := httplimit.Join(httplimit.Header("A"), httplimit.Header("B"))
	k1, _ := join(get("192.0.2.1:1", "A", "x|1:y", "B", "z"))
	k2, _ := join(get("192.0.2.1:1", "A", "x", "B", "y|1:z"))
	if k1 == k2 {
		t.Errorf("Join gave %q for two different pairs", k1)
	}
}
