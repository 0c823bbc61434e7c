package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// MaxKeyLen is the length, in bytes, of the longest key that every store
// must hold as it is, whatever its bytes (NUL, invalid UTF-8 and all).
// Longer keys must be accepted too: a store keeps them as they are, or,
// when its keys are bounded (an SQL key column), under ShortKey's digest
// form, which is never longer than MaxKeyLen. 255 fits MySQL's
// VARBINARY(255) and any index.
const MaxKeyLen = 255

// digestLen is the length of the hex SHA-256 that ends a digest form.
const digestLen = 2 * sha256.Size

// ShortKey returns the key under which a store whose keys are bounded
// keeps key: key itself when it is shorter than MaxKeyLen bytes, and
// otherwise its digest form, exactly MaxKeyLen bytes long: the first
// MaxKeyLen-64 bytes of key (so that an operator reading the store sees
// whose key it is) followed by the hex SHA-256 of the whole of key.
//
// Two different keys never share a short key: a key shorter than
// MaxKeyLen is its own, every digest form is MaxKeyLen bytes long and so
// equals no such key, and two digest forms are equal only if the keys'
// SHA-256 digests are, which no one can make happen. A key that happens
// to equal another key's digest form is MaxKeyLen bytes long, so it is
// digested in turn.
func ShortKey(key string) string {
	if len(key) < MaxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, MaxKeyLen)
	b = append(b, key[:MaxKeyLen-digestLen]...)
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}

// QuotedKeyLen is how many bytes of a key QuoteKey quotes.
const QuotedKeyLen = 64

// QuoteKey returns key quoted for an error message or a log line: as
// strconv.Quote does for a key of at most QuotedKeyLen bytes, and for a
// longer one its first QuotedKeyLen bytes followed by its length, so that
// a megabyte key does not make a megabyte error.
func QuoteKey(key string) string {
	if len(key) <= QuotedKeyLen {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:QuotedKeyLen]) + "... (" + strconv.Itoa(len(key)) + " bytes)"
}
