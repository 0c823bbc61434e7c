package sluice

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// A record is what a Limiter keeps in a driver.Store for one key:
//
//	version  byte   recordVersion
//	kind     byte   recordMachine or recordBucket
//	origin   8 bytes, little endian: the fingerprint of the configured
//	         policy that created the state or last migrated it
//	recordMachine: the policy machine's own encoding (policy.Erased)
//	recordBucket:  varint length + the bucket's configuration, then
//	               varint count + (last refill, size, err) varints per
//	               bandwidth
//
// A token bucket carries its configuration, as Bucket4j's remote state
// does, because the configuration in force may differ from the configured
// one: after ReplaceConfiguration on the key, or before a migration, whose
// token inheritance needs the old capacities. Other policies carry only
// the fingerprint; their migration keeps or drops the state.
//
// A record that does not decode counts as no state, as a store that lost
// it would: a newer version, another policy, or corrupted bytes.
const (
	recordVersion = 1
	recordMachine = 1
	recordBucket  = 2
	recordHeader  = 10
)

var errBadRecord = errors.New("sluice: undecodable state record")

func appendRecordHeader(dst []byte, kind byte, origin uint64) []byte {
	dst = append(dst, recordVersion, kind)
	return binary.LittleEndian.AppendUint64(dst, origin)
}

// readRecordHeader returns the origin fingerprint and the rest of a record
// of kind.
func readRecordHeader(rec []byte, kind byte) (origin uint64, rest []byte, err error) {
	if len(rec) < recordHeader || rec[0] != recordVersion || rec[1] != kind {
		return 0, nil, errBadRecord
	}
	return binary.LittleEndian.Uint64(rec[2:]), rec[recordHeader:], nil
}

// fingerprint identifies a policy's configuration: equal policies have
// equal fingerprints in every process.
func fingerprint(parts ...[]byte) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write(binary.AppendUvarint(nil, uint64(len(p))))
		h.Write(p)
	}
	return h.Sum64()
}

// Bandwidth flags in an encoded configuration.
const (
	flagIntervally = 1 << iota
	flagAligned
	flagAdaptive
	flagHasInitial
)

// encodeConfig is the stored form of a compiled configuration.
func encodeConfig(cfg *tokenbucket.Config) []byte {
	dst := binary.AppendUvarint(nil, uint64(len(cfg.Bandwidths)))
	for _, b := range cfg.Bandwidths {
		var flags uint64
		if b.Intervally {
			flags |= flagIntervally
		}
		if b.Aligned {
			flags |= flagAligned
		}
		if b.Adaptive {
			flags |= flagAdaptive
		}
		if b.HasInitial {
			flags |= flagHasInitial
		}
		dst = binary.AppendUvarint(dst, flags)
		for _, v := range [...]int64{b.Capacity, b.RefillTokens, b.Period, b.FirstRefill, b.Initial} {
			dst = binary.AppendVarint(dst, v)
		}
		dst = binary.AppendUvarint(dst, uint64(len(b.ID)))
		dst = append(dst, b.ID...)
	}
	return dst
}

// maxStoredBandwidths bounds what a decoded record may ask for, so that a
// corrupted length cannot make a huge allocation.
const maxStoredBandwidths = 64

// decodeConfig validates and compiles a stored configuration, as compile
// validates a user's.
func decodeConfig(src []byte) (*tokenbucket.Config, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || n == 0 || n > maxStoredBandwidths {
		return nil, errBadRecord
	}
	src = src[k:]
	bws := make([]tokenbucket.Bandwidth, n)
	for i := range bws {
		flags, k := binary.Uvarint(src)
		if k <= 0 {
			return nil, errBadRecord
		}
		src = src[k:]
		var v [5]int64
		for j := range v {
			if v[j], k = binary.Varint(src); k <= 0 {
				return nil, errBadRecord
			}
			src = src[k:]
		}
		idLen, k := binary.Uvarint(src)
		if k <= 0 || idLen > uint64(len(src)-k) {
			return nil, errBadRecord
		}
		id := string(src[k : k+int(idLen)])
		src = src[k+int(idLen):]
		bws[i] = tokenbucket.Bandwidth{
			Capacity: v[0], RefillTokens: v[1], Period: v[2], FirstRefill: v[3], Initial: v[4],
			Intervally: flags&flagIntervally != 0, Aligned: flags&flagAligned != 0,
			Adaptive: flags&flagAdaptive != 0, HasInitial: flags&flagHasInitial != 0, ID: id,
		}
	}
	if len(src) != 0 {
		return nil, errBadRecord
	}
	cfg, err := configOf(&tokenbucket.Config{Bandwidths: bws}).compile()
	if err != nil {
		return nil, errBadRecord
	}
	return cfg, nil
}

// configCache keeps compiled stored configurations, so that a key whose
// configuration differs from its limiter's (replaced, or not migrated yet)
// is not recompiled on every call. It holds at most configCacheSize
// entries; past that, configurations are compiled each time.
type configCache struct {
	m sync.Map // string(encoded) → *tokenbucket.Config
	n atomic.Int64
}

const configCacheSize = 256

func (c *configCache) get(encoded []byte) (*tokenbucket.Config, error) {
	if v, ok := c.m.Load(string(encoded)); ok {
		return v.(*tokenbucket.Config), nil
	}
	cfg, err := decodeConfig(encoded)
	if err != nil {
		return nil, err
	}
	if c.n.Add(1) <= configCacheSize {
		c.m.Store(string(encoded), cfg)
	}
	return cfg, nil
}

// bucketRecord is a decoded recordBucket.
type bucketRecord struct {
	origin  uint64
	encoded []byte // the configuration in force, encoded; aliases the record
	state   tokenbucket.State
}

func appendBucketRecord(dst []byte, origin uint64, encoded []byte, st tokenbucket.State) []byte {
	dst = appendRecordHeader(dst, recordBucket, origin)
	dst = binary.AppendUvarint(dst, uint64(len(encoded)))
	dst = append(dst, encoded...)
	dst = binary.AppendUvarint(dst, uint64(len(st)))
	for _, b := range st {
		dst = policy.AppendInt(dst, b.LastRefill)
		dst = policy.AppendInt(dst, b.Size)
		dst = policy.AppendInt(dst, b.Err)
	}
	return dst
}

func decodeBucketRecord(rec []byte) (bucketRecord, error) {
	origin, rest, err := readRecordHeader(rec, recordBucket)
	if err != nil {
		return bucketRecord{}, err
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return bucketRecord{}, errBadRecord
	}
	r := bucketRecord{origin: origin, encoded: rest[k : k+int(n)]}
	rest = rest[k+int(n):]
	count, k := binary.Uvarint(rest)
	if k <= 0 || count == 0 || count > maxStoredBandwidths {
		return bucketRecord{}, errBadRecord
	}
	rest = rest[k:]
	r.state = make(tokenbucket.State, count)
	for i := range r.state {
		b := &r.state[i]
		for _, p := range [...]*int64{&b.LastRefill, &b.Size, &b.Err} {
			if *p, rest, err = policy.ReadInt(rest); err != nil {
				return bucketRecord{}, errBadRecord
			}
		}
	}
	if len(rest) != 0 {
		return bucketRecord{}, errBadRecord
	}
	return r, nil
}
