package reqkey

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// parseAddrModel is ParseAddr without its shortcut for an address with a
// port: the bare address first, then the address and port.
func parseAddrModel(s string) (netip.Addr, bool) {
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

var addrSeeds = []string{
	"192.0.2.1", "192.0.2.1:4000", "[192.0.2.1]", "[192.0.2.1]:4000", "192.0.2.1]",
	"[::ffff:192.0.2.1]:4000", "::ffff:192.0.2.1", "2001:db8::1", "[2001:db8::1]:80",
	"[2001:db8::1]", "[2001:db8::1", "fe80::1%eth0", "[fe80::1%eth0]:80", "010.0.0.1:80", "1.2.3.4:",
	":80", "", "1.2.3.4:80:90", "[::1]x", "10.0.0.7:1", "256.1.1.1:2",
}

// FuzzKeyOf: KeyOf agrees with the key of the address ParseAddr finds,
// made without its text, and
// ParseAddr with its model, for any text, behind a trusted proxy or not.
func FuzzKeyOf(f *testing.F) {
	for _, s := range addrSeeds {
		f.Add(s, "198.51.100.7, 10.0.0.9")
	}
	ip, e := NewIP([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "X-Forwarded-For", 64)
	if e != nil {
		f.Fatal(e)
	}
	f.Fuzz(func(t *testing.T, s, xff string) {
		header := func() []string { return []string{xff} }
		peer, ok := ParseAddr(s)
		if mpeer, mok := parseAddrModel(s); peer != mpeer || ok != mok {
			t.Fatalf("ParseAddr(%q) = %v, %v; want %v, %v", s, peer, ok, mpeer, mok)
		}
		key, kok := ip.KeyOf(s, header)
		if kok != ok {
			t.Fatalf("KeyOf(%q) ok = %v, ParseAddr ok = %v", s, kok, ok)
		}
		if ok {
			if want := ip.key(peer, "", header); key != want {
				t.Fatalf("KeyOf(%q, %q) = %q, want %q", s, xff, key, want)
			}
		}
	})
}

// TestKeyOfNoCopy: an IPv4 client's key is its RemoteAddr's text, with
// no allocation, which is what KeyOf is for.
func TestKeyOfNoCopy(t *testing.T) {
	ip, e := NewIP(nil, "X-Forwarded-For", 64)
	if e != nil {
		t.Fatal(e)
	}
	if got := testing.AllocsPerRun(100, func() {
		if key, _ := ip.KeyOf("192.0.2.1:4000", nil); key != "192.0.2.1" {
			t.Fatalf("key %q", key)
		}
	}); got != 0 {
		t.Errorf("%v allocations, want 0", got)
	}
}

func TestJoin(t *testing.T) {
	join := func(parts ...string) string {
		k, err := Join(len(parts), func(i int) (string, error) { return parts[i], nil })
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if got, want := join("GET", "/things"), "3:GET|7:/things"; got != want {
		t.Errorf("Join(GET, /things) = %q, want %q", got, want)
	}
	// Lists that would read alike without the lengths make different keys.
	if a, b := join("a|1:b"), join("a", "b"); a == b {
		t.Errorf("Join(a|1:b) = Join(a, b) = %q", a)
	}
	errPart := errors.New("no key")
	if _, err := Join(2, func(i int) (string, error) { return "", errPart }); err != errPart {
		t.Errorf("Join with a failing part = %v, want its error", err)
	}
}

func TestConfigure(t *testing.T) {
	type option func(*Options)
	ip, header, e := Configure[option]("x-forwarded-for", nil)
	if e != nil || header != "x-forwarded-for" || ip.v6Bits != 64 || len(ip.trusted) != 0 {
		t.Errorf("Configure() = %+v, %q, %v; want no proxy, the default header and /64", ip, header, e)
	}
	_, header, e = Configure("x-forwarded-for", []option{func(o *Options) { o.Header = "forwarded" }})
	if e != nil || header != "forwarded" {
		t.Errorf("Configure(forwarded) = %q, %v; want forwarded", header, e)
	}
	_, _, e = Configure("X-Forwarded-For", []option{func(o *Options) { o.V6Bits = 0 }})
	if e == nil || e.Field != "WithIPv6Prefix" {
		t.Errorf("Configure(0 bits) = %v, want a WithIPv6Prefix error", e)
	}
}

func TestFromValue(t *testing.T) {
	errNoKey := errors.New("no key")
	if _, err := FromValue("pkg", errNoKey, "k", nil); !errors.Is(err, errNoKey) {
		t.Errorf("FromValue(nil) = %v, want it to wrap the no-key error", err)
	}
	if k, err := FromValue("pkg", errNoKey, "k", netip.MustParseAddr("192.0.2.1")); k != "192.0.2.1" || err != nil {
		t.Errorf("FromValue(Stringer) = %q, %v; want its String", k, err)
	}
	if _, err := FromValue("pkg", errNoKey, "k", 7); err == nil || errors.Is(err, errNoKey) {
		t.Errorf("FromValue(7) = %v, want an error that is not no-key", err)
	}
}
