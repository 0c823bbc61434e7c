package policy

import (
	"encoding/binary"
	"fmt"
)

// Version is the encoding version every state starts with. A decoder
// refuses any other, so a store never misreads state written by a newer
// sluice.
const Version = 1

// Tag names the policy that wrote a state, so that a key reconfigured to
// another policy is seen as having no state rather than misread.
type Tag byte

// The policy tags: a registry of stored values, kept here on purpose. Every
// state a store holds starts with its policy's tag, so a tag is never
// renumbered or reused, even when its policy goes; listing them all in one
// place is what makes that visible. A new policy takes the next number
// here, besides its machine package and its entry in internal/policyspec.
const (
	TagFixedWindow   Tag = 1
	TagSlidingWindow Tag = 2
	TagSlidingLog    Tag = 3
	TagLeakyBucket   Tag = 4
	TagShaper        Tag = 5
	TagTokenBucket   Tag = 6
	TagGCRA          Tag = 7
	TagNoLimit       Tag = 8
	TagCompound      Tag = 9
	TagResilience4j  Tag = 10
	TagConcurrency   Tag = 11
	TagCalendar      Tag = 12
	TagPenaltyBox    Tag = 13
)

// AppendHeader appends the version and tag that start every state.
func AppendHeader(dst []byte, tag Tag) []byte { return append(dst, Version, byte(tag)) }

// ReadHeader checks the version and tag at the start of src and returns the
// rest.
func ReadHeader(src []byte, tag Tag) ([]byte, error) {
	if len(src) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, want a 2-byte header", ErrBadState, len(src))
	}
	if src[0] != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrBadState, src[0], Version)
	}
	if Tag(src[1]) != tag {
		return nil, fmt.Errorf("%w: policy tag %d, want %d", ErrBadState, src[1], tag)
	}
	return src[2:], nil
}

// AppendInt appends v as a zig-zag varint: small counts take one byte.
func AppendInt(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// ReadInt reads a varint written by AppendInt and returns the rest.
func ReadInt(src []byte) (int64, []byte, error) {
	v, n := binary.Varint(src)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: truncated or overlong integer", ErrBadState)
	}
	return v, src[n:], nil
}

// ReadInts reads len(dst) integers into dst and checks that nothing follows.
func ReadInts(src []byte, dst ...*int64) error {
	var err error
	for _, p := range dst {
		if *p, src, err = ReadInt(src); err != nil {
			return err
		}
	}
	if len(src) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadState, len(src))
	}
	return nil
}

// AppendInts appends a state of the policy tag made of the integers vs:
// its header, then each integer as AppendInt writes it.
func AppendInts(dst []byte, tag Tag, vs ...int64) []byte {
	dst = AppendHeader(dst, tag)
	for _, v := range vs {
		dst = AppendInt(dst, v)
	}
	return dst
}

// DecodeInts reads a state that AppendInts wrote for tag into dst, one
// integer each, and checks that nothing follows.
func DecodeInts(src []byte, tag Tag, dst ...*int64) error {
	rest, err := ReadHeader(src, tag)
	if err != nil {
		return err
	}
	return ReadInts(rest, dst...)
}

// SatAdd adds, saturating at the int64 bounds.
func SatAdd(a, b int64) int64 {
	c := a + b
	if (c > a) == (b > 0) || b == 0 {
		return c
	}
	if b > 0 {
		return Never
	}
	return -Never - 1
}

// SatMul multiplies non-negative a and b, saturating at Never.
func SatMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > Never/b {
		return Never
	}
	return a * b
}

// CeilDiv is ⌈a/b⌉ for a ≥ 0 and b > 0.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
