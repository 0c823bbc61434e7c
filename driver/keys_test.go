package driver_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/driver"
)

func TestShortKey(t *testing.T) {
	long := strings.Repeat("k", 1000)
	tests := []struct {
		name, key string
		literal   bool
	}{
		{"empty", "", true},
		{"NUL", "a\x00b", true},
		{"invalid UTF-8", "\xff\xfe", true},
		{"longest literal", strings.Repeat("a", driver.MaxKeyLen-1), true},
		{"one byte more", strings.Repeat("a", driver.MaxKeyLen), false},
		{"long", long, false},
		{"a digest form", driver.ShortKey(long), false},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := driver.ShortKey(tt.key)
		if tt.literal != (got == tt.key) {
			t.Errorf("ShortKey(%s) kept the key = %v, want %v", tt.name, got == tt.key, tt.literal)
		}
		if !tt.literal && (len(got) != driver.MaxKeyLen || !strings.HasPrefix(got, tt.key[:driver.MaxKeyLen-64])) {
			t.Errorf("ShortKey(%s) = %q (%d bytes), want %d bytes starting with the key", tt.name, got, len(got), driver.MaxKeyLen)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("ShortKey(%s) = ShortKey(%s)", tt.name, other)
		}
		seen[got] = tt.name
	}
	// Keys that differ only past the kept prefix differ in their digest.
	a, b := long+"a", long+"b"
	if driver.ShortKey(a) == driver.ShortKey(b) {
		t.Error("two long keys differing in their last byte share a short key")
	}
}

func TestQuoteKey(t *testing.T) {
	long := strings.Repeat("k", 1<<20)
	tests := []struct{ key, want string }{
		{"user:1", `"user:1"`},
		{"a\x00b\xff", `"a\x00b\xff"`},
		{strings.Repeat("x", driver.QuotedKeyLen), strconv.Quote(strings.Repeat("x", driver.QuotedKeyLen))},
		{long, strconv.Quote(long[:driver.QuotedKeyLen]) + "... (1048576 bytes)"},
	}
	for _, tt := range tests {
		if got := driver.QuoteKey(tt.key); got != tt.want {
			t.Errorf("QuoteKey(%d bytes) = %s, want %s", len(tt.key), got, tt.want)
		}
	}
}
