package record

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// BucketOptions configure a Bucket codec.
type BucketOptions struct {
	// Strict makes a single bandwidth refuse more tokens than its
	// capacity as an argument error (tokenbucket.NewSingle's strict).
	Strict bool
	// Inherit is how a stored bucket of another configuration is
	// migrated to the codec's.
	Inherit tokenbucket.Strategy
	// KeepStored keeps a stored configuration as it is, never migrated:
	// the codec's configuration is only for keys without state (a lazily
	// configured bucket's).
	KeepStored bool
	// CreateOnRead makes Update store a new bucket even when the
	// operation changed nothing: Bucket4j's proxies create a key's state
	// at their first call, even one that only reads, so the refill of an
	// intervally bandwidth or of initial tokens counts from then. A
	// Limiter's key has no state until a call changes it.
	CreateOnRead bool
	// Compile validates and compiles a configuration decoded from a
	// record, as the root package does a user's; one that fails is no
	// state.
	Compile func(*tokenbucket.Config) (*tokenbucket.Config, error)
	// ConfigVersion is the configuration's version, which decides
	// whether a record of another configuration is migrated.
	ConfigVersion ConfigVersion
}

// Bucket is the Codec of a token bucket, whose records carry the
// configuration in force for the key.
type Bucket struct {
	cfg     *tokenbucket.Config // nil: none, the stored one is taken as it is
	encoded []byte
	fp      uint64
	o       BucketOptions
	configs configCache
}

var _ Codec = (*Bucket)(nil)

// NewBucket returns the Codec of buckets of cfg. With a nil cfg, a key
// without state has no configuration (Update reports noConfig) and a
// stored one is taken as it is; such a codec serves Update, Replace,
// Configuration, Reset and ExpiresAt only, the calls of a bucket.
func NewBucket(cfg *tokenbucket.Config, o BucketOptions) *Bucket {
	c := &Bucket{cfg: cfg, o: o, configs: configCache{compile: o.Compile}}
	if cfg != nil {
		c.encoded = EncodeConfig(cfg)
		strict := byte(0)
		if o.Strict {
			strict = 1
		}
		c.fp = fingerprint([]byte("bucket"), c.encoded, []byte{strict})
	}
	return c
}

// Config is the codec's configuration, nil for none.
func (c *Bucket) Config() *tokenbucket.Config { return c.cfg }

func (c *Bucket) configOf(encoded []byte) (*tokenbucket.Config, error) {
	if c.cfg != nil && bytes.Equal(encoded, c.encoded) {
		return c.cfg, nil
	}
	return c.configs.get(encoded)
}

// loaded is a key's token bucket as read from its record.
type loaded struct {
	cfg     *tokenbucket.Config
	encoded []byte
	hdr     header
	state   tokenbucket.State
	exists  bool // false: no state, or an expired one
	// migrated is set when the state was carried over to the codec's
	// configuration, which must then be written even if the operation
	// changes nothing.
	migrated bool
}

// load reads rec at now, migrating it to the codec's configuration when
// it was written for another, unless KeepStored. With expire, a state
// past its ExpiresAt reads as none, as the keyed policies want; the
// bucket API keeps it, since a bucket with initial tokens below its
// capacity is not a new bucket once it has filled up.
func (c *Bucket) load(rec []byte, now int64, expire bool) loaded {
	own := header{origin: c.fp, version: c.o.ConfigVersion.Version}
	fresh := loaded{cfg: c.cfg, encoded: c.encoded, hdr: own}
	r, err := decodeBucketRecord(rec)
	if err != nil {
		return fresh
	}
	cfg, err := c.configOf(r.encoded)
	if err != nil || len(r.state) != len(cfg.Bandwidths) {
		return fresh
	}
	b := loaded{cfg: cfg, encoded: r.encoded, hdr: r.hdr, state: r.state, exists: true}
	switch {
	case c.cfg == nil || c.o.KeepStored:
	case r.hdr.origin == c.fp:
		b.hdr.version = max(b.hdr.version, own.version)
	case !c.o.ConfigVersion.keeps(r.hdr):
		b.state = tokenbucket.Replace(cfg, r.state, now, c.cfg, c.o.Inherit)
		b.cfg, b.encoded, b.hdr, b.migrated = c.cfg, c.encoded, own, true
	}
	if expire && tokenbucket.NewKeyed(b.cfg, c.o.Strict).ExpiresAt(b.state) <= now {
		b.exists = false // a new bucket of the configuration in force
	}
	return b
}

func (b *loaded) record() []byte {
	return appendBucketRecord(nil, b.hdr, b.encoded, b.state)
}

// none is the record of no state: it does not decode.
func none() []byte { return appendHeader(nil, kindBucket, header{}) }

func (c *Bucket) Consume(rec []byte, now, n int64) (policy.Result, []byte, bool) {
	b := c.load(rec, now, true)
	k := tokenbucket.NewKeyed(b.cfg, c.o.Strict)
	d, changed := k.Consume(&b.state, b.exists, now, n)
	res := d.Result(k.Quota())
	if (!changed && !b.migrated) || c.o.ConfigVersion.foreign(rec, kindBucket) {
		return res, nil, false
	}
	return res, b.record(), true
}

func (c *Bucket) Peek(rec []byte, now, n int64) policy.Result {
	b := c.load(rec, now, true)
	return tokenbucket.NewKeyed(b.cfg, c.o.Strict).Peek(&b.state, b.exists, now, n)
}

func (c *Bucket) Reserve(rec []byte, now, n, maxWait int64) (policy.Result, *policy.Receipt, []byte, bool) {
	b := c.load(rec, now, true)
	m := tokenbucket.NewMulti(b.cfg)
	var before []byte
	if b.exists {
		before = m.AppendState(nil, &b.state)
	}
	k := tokenbucket.NewKeyed(b.cfg, c.o.Strict)
	res, changed := k.Reserve(&b.state, b.exists, now, n, maxWait)
	var rc *policy.Receipt
	if changed && res.Allowed {
		rc = policy.NewReceipt(now, n, res.Wait, before, m.AppendState(nil, &b.state))
		if res.Wait > 0 {
			res.Remaining = policy.RemainingAt(k.Peek(&b.state, true, rc.Due, 1))
		}
	}
	if !changed && !b.migrated {
		return res, rc, nil, false
	}
	if c.o.ConfigVersion.foreign(rec, kindBucket) {
		return res, nil, nil, false
	}
	return res, rc, b.record(), true
}

func (c *Bucket) Cancel(rec []byte, now int64, rc *policy.Receipt) ([]byte, bool) {
	b := c.load(rec, now, true)
	if b.migrated || b.hdr.origin != c.fp || !bytes.Equal(b.encoded, c.encoded) {
		return nil, false
	}
	switch policy.Undo(tokenbucket.NewMulti(b.cfg), &b.state, b.exists, now, rc) {
	case policy.Changed:
		return b.record(), true
	case policy.Dropped:
		return none(), true
	}
	return nil, false
}

func (c *Bucket) Reset(rec []byte) ([]byte, bool) {
	if len(rec) == 0 {
		return nil, false
	}
	return none(), true
}

func (c *Bucket) ExpiresAt(rec []byte) int64 {
	r, err := decodeBucketRecord(rec)
	if err != nil {
		return 0
	}
	cfg, err := c.configOf(r.encoded)
	if err != nil {
		return 0
	}
	return tokenbucket.NewKeyed(cfg, c.o.Strict).ExpiresAt(r.state)
}

// Update runs f on the key's token bucket at now, a new one when the key
// has none, and returns the record to write when f changed the bucket or
// the record was migrated, or when the bucket is new and the codec
// creates state on reads. When the key has no state and the codec no
// configuration, it runs nothing and reports noConfig.
func (c *Bucket) Update(rec []byte, now int64, f func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool) (next []byte, changed, noConfig bool) {
	b := c.load(rec, now, false)
	if !b.exists && b.cfg == nil {
		return nil, false, true
	}
	if !b.exists {
		b.state = tokenbucket.New(b.cfg, now)
		b.migrated = c.o.CreateOnRead // Bucket4j creates a bucket at its first call, even one that reads
	}
	if (!f(b.cfg, b.state, now) && !b.migrated) || c.o.ConfigVersion.foreign(rec, kindBucket) {
		return nil, false, false
	}
	return b.record(), true, false
}

// Replace switches the key's bucket to cfg at now, carrying its tokens
// over by strategy, as Update would run it, and shows seen (when not nil)
// the bucket it leaves. The record keeps its origin, so that the codec's
// own configuration does not migrate it back.
func (c *Bucket) Replace(rec []byte, now int64, cfg *tokenbucket.Config, strategy tokenbucket.Strategy,
	seen func(cfg *tokenbucket.Config, st tokenbucket.State, now int64)) (next []byte, changed, noConfig bool) {
	b := c.load(rec, now, false)
	if !b.exists && b.cfg == nil {
		return nil, false, true
	}
	if c.o.ConfigVersion.foreign(rec, kindBucket) {
		return nil, false, false
	}
	if !b.exists {
		b.state = tokenbucket.New(b.cfg, now)
	}
	b.state = tokenbucket.Replace(b.cfg, b.state, now, cfg, strategy)
	b.cfg, b.encoded = cfg, EncodeConfig(cfg)
	if seen != nil {
		seen(b.cfg, b.state, now)
	}
	return b.record(), true, false
}

// Configuration is the configuration in force for the key at now: the
// stored one when the key has state, else the codec's (nil for none).
func (c *Bucket) Configuration(rec []byte, now int64) *tokenbucket.Config {
	return c.load(rec, now, false).cfg
}

// bucketRecord is a decoded bucket record.
type bucketRecord struct {
	hdr     header
	encoded []byte // the configuration in force, encoded; aliases the record
	state   tokenbucket.State
}

func appendBucketRecord(dst []byte, h header, encoded []byte, st tokenbucket.State) []byte {
	dst = appendHeader(dst, kindBucket, h)
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
	h, rest, err := readHeader(rec, kindBucket)
	if err != nil {
		return bucketRecord{}, err
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return bucketRecord{}, errBad
	}
	r := bucketRecord{hdr: h, encoded: rest[k : k+int(n)]}
	rest = rest[k+int(n):]
	count, k := binary.Uvarint(rest)
	if k <= 0 || count == 0 || count > maxStoredBandwidths {
		return bucketRecord{}, errBad
	}
	rest = rest[k:]
	r.state = make(tokenbucket.State, count)
	for i := range r.state {
		b := &r.state[i]
		for _, p := range [...]*int64{&b.LastRefill, &b.Size, &b.Err} {
			if *p, rest, err = policy.ReadInt(rest); err != nil {
				return bucketRecord{}, errBad
			}
		}
	}
	if len(rest) != 0 {
		return bucketRecord{}, errBad
	}
	return r, nil
}

// Bandwidth flags in an encoded configuration.
const (
	flagIntervally = 1 << iota
	flagAligned
	flagAdaptive
	flagHasInitial
)

// EncodeConfig is the stored form of a compiled configuration.
func EncodeConfig(cfg *tokenbucket.Config) []byte {
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

// decodeConfig decodes a stored configuration and compiles it with
// compile, which validates it.
func decodeConfig(src []byte, compile func(*tokenbucket.Config) (*tokenbucket.Config, error)) (*tokenbucket.Config, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || n == 0 || n > maxStoredBandwidths {
		return nil, errBad
	}
	src = src[k:]
	bws := make([]tokenbucket.Bandwidth, n)
	for i := range bws {
		flags, k := binary.Uvarint(src)
		if k <= 0 {
			return nil, errBad
		}
		src = src[k:]
		var v [5]int64
		for j := range v {
			if v[j], k = binary.Varint(src); k <= 0 {
				return nil, errBad
			}
			src = src[k:]
		}
		idLen, k := binary.Uvarint(src)
		if k <= 0 || idLen > uint64(len(src)-k) {
			return nil, errBad
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
		return nil, errBad
	}
	if compile == nil {
		return nil, errBad
	}
	cfg, err := compile(&tokenbucket.Config{Bandwidths: bws})
	if err != nil {
		return nil, errBad
	}
	return cfg, nil
}

// configCache keeps compiled stored configurations, so that a key whose
// configuration differs from its limiter's (replaced, or not migrated yet)
// is not recompiled on every call. It holds at most configCacheSize
// entries; past that, configurations are compiled each time.
type configCache struct {
	compile func(*tokenbucket.Config) (*tokenbucket.Config, error)
	m       sync.Map // string(encoded) → *tokenbucket.Config
	n       atomic.Int64
}

const configCacheSize = 256

func (c *configCache) get(encoded []byte) (*tokenbucket.Config, error) {
	if v, ok := c.m.Load(string(encoded)); ok {
		return v.(*tokenbucket.Config), nil
	}
	cfg, err := decodeConfig(encoded, c.compile)
	if err != nil {
		return nil, err
	}
	if c.n.Add(1) <= configCacheSize {
		c.m.Store(string(encoded), cfg)
	}
	return cfg, nil
}
