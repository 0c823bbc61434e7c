package reqkey

import (
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
