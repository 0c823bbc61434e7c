package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/driver"
)

// Client is what a Store needs of a go-redis client. *redis.Client (also
// as made by redis.NewFailoverClient for Sentinel), *redis.ClusterClient
// and any redis.UniversalClient value satisfy it. *redis.Ring satisfies
// it too but is not supported: its shards are not tested here.
type Client interface {
	// Process sends one command: GET, EVALSHA, DEL, PING and TIME, on
	// its own or, when pipelining is on, as a batch of one.
	Process(ctx context.Context, cmd redis.Cmder) error
	// Pipelined sends many commands together, when pipelining is on.
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	// ScriptLoad loads the compare-and-swap script after a NOSCRIPT reply;
	// a *redis.ClusterClient loads it on every master.
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
}

// DefaultPrefix is the prefix of every key a Store writes, unless
// WithPrefix says otherwise.
const DefaultPrefix = "sluice:"

// DefaultStateCache is how many keys' states a Store remembers, unless
// WithStateCache says otherwise.
const DefaultStateCache = 100_000

// maxBatch is how many commands the sender puts in one pipeline at most.
const maxBatch = 256

var (
	//go:embed cas.lua
	casScript string
	casSHA    = func() string { h := sha1.Sum([]byte(casScript)); return hex.EncodeToString(h[:]) }()
	// casSHAArg and noBytes are casSHA and an empty expected state as
	// arguments, boxed once rather than on every compare-and-swap.
	casSHAArg any = casSHA
	noBytes   any = []byte{}
)

// Option configures a Store.
type Option func(*options)

type options struct {
	prefix      string
	cache       int
	maxAttempts int
	pipelining  bool
}

// WithPrefix sets the prefix of the Store's keys; the default is
// DefaultPrefix. An empty prefix uses the keys as they are.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithStateCache sets how many keys' states the Store remembers so that
// an update needs one round trip instead of two (see
// driver.WithStateCache); 0 turns the cache off. The default is
// DefaultStateCache. New refuses a negative number.
func WithStateCache(entries int) Option {
	return func(o *options) { o.cache = entries }
}

// WithMaxAttempts bounds the compare-and-swaps of one update under
// contention; after that, Update fails with driver.ErrConflict. The
// default, 0, is no bound: an update retries until its context ends (see
// driver.NewCASStore). New refuses n < 0.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = n }
}

// WithPipelining turns automatic pipelining on (the default) or off. Off,
// every command is its own round trip and New starts no goroutine.
func WithPipelining(on bool) Option {
	return func(o *options) { o.pipelining = on }
}

// Store is a driver.Store that keeps each key's state in one Redis string.
// It is safe for concurrent use by multiple goroutines.
//
// With pipelining on (the default) New starts a goroutine that sends the
// commands, and with a cluster client one more for each master; after a
// cluster command failed as when its slot moved, one goroutine reloads
// the slot map for a while. Close stops them all.
type Store struct {
	store  driver.Store
	del    driver.Deleter
	cas    *redisCAS
	closed atomic.Bool
}

var (
	_ driver.Store       = (*Store)(nil)
	_ driver.Deleter     = (*Store)(nil)
	_ driver.Partitioner = (*Store)(nil)
	_ driver.SwapReader  = (*redisCAS)(nil)
)

// New returns a Store of client's server or cluster. It does not talk to
// the server: use Ping to check that it answers. With pipelining on, it
// starts a goroutine, which Close stops (see Store).
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: client is nil")
	}
	o := options{prefix: DefaultPrefix, cache: DefaultStateCache, pipelining: true}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cache < 0 {
		return nil, fmt.Errorf("redisstore: state cache must not be negative, got %d", o.cache)
	}
	if o.maxAttempts < 0 {
		return nil, fmt.Errorf("redisstore: max attempts must not be negative, got %d", o.maxAttempts)
	}
	s := &Store{cas: &redisCAS{client: client, prefix: o.prefix}}
	s.cas.closed = &s.closed
	s.cas.cluster, _ = client.(clusterClient)
	s.cas.stopReloads = make(chan struct{})
	if o.pipelining {
		s.cas.batch = newBatcher(client)
	}
	s.store = driver.NewCASStore(s.cas, driver.WithMaxAttempts(o.maxAttempts), driver.WithStateCache(o.cache), driver.WithPromptExpiry())
	d, ok := s.store.(driver.Deleter)
	if !ok { // cannot happen: redisCAS has Delete
		return nil, errors.New("redisstore: CAS store cannot delete")
	}
	s.del = d
	return s, nil
}

// Update runs fn on key's state and writes what it returns if the state
// changed, with the TTL fn returned rounded up to whole milliseconds (0:
// no expiry). Its errors wrap driver.ErrConflict, driver.ErrUnavailable
// or driver.ErrIndeterminate, or are ctx.Err().
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	err := s.store.Update(ctx, key, fn)
	if errors.Is(err, driver.ErrConflict) {
		return fmt.Errorf("redisstore: update %s: %w", driver.QuoteKey(key), err)
	}
	return err
}

// Delete removes key's state at once. Its errors wrap
// driver.ErrUnavailable or driver.ErrIndeterminate, or are ctx.Err().
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.del.Delete(ctx, key)
}

// Partition is the address of the master of key's slot in a cluster
// client's slot map, so that a limiter keeps a circuit breaker per master
// (see driver.Partitioner); "" for other clients, and until the cluster
// client has a map (a command of the Store succeeded).
func (s *Store) Partition(key string) string {
	c := s.cas
	if c.cluster == nil || !c.mapped.Load() {
		return ""
	}
	m, err := c.cluster.MasterForKey(context.Background(), c.prefix+key) // no I/O once the client has a map
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// Ping checks that the server answers, for readiness checks. With a
// *redis.ClusterClient it checks that the cluster serves every slot: it
// reloads the client's slot map and asks every master of it for CLUSTER
// INFO, which must answer cluster_state:ok; so a cluster whose master
// died fails Ping until a replica has taken over and the map says so.
// It does not go through the pipeline.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if s.cas.cluster != nil {
		err = pingCluster(ctx, s.cas.cluster)
	} else {
		err = s.cas.client.Process(ctx, redis.NewStatusCmd(ctx, "ping"))
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return fmt.Errorf("redisstore: ping: %w: %w", driver.ErrUnavailable, err)
	}
	return nil
}

// Close stops the goroutines that send pipelines, after they have sent
// what was queued, and the one that reloads a cluster's slot map; later
// calls of Update and Delete fail with
// driver.ErrUnavailable. It does not close the client. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cas.closeBatchers()
	s.cas.reloadMu.Lock() // no keepReloading starts after this
	close(s.cas.stopReloads)
	s.cas.reloadMu.Unlock()
	s.cas.reloads.Wait()
	return nil
}

// errClosed is the cause of the errors of a closed Store.
var errClosed = errors.New("redisstore: store is closed")

// redisCAS is the driver.CAS (and driver.Deleter) of a Store.
type redisCAS struct {
	client  Client
	cluster clusterClient // client as a cluster client; nil for others
	prefix  string
	batch   *batcher // nil: no pipelining; with a cluster, for masters not known yet
	closed  *atomic.Bool

	// With a cluster client and pipelining, the batchers of the
	// masters: see batcherFor.
	mapped    atomic.Bool // the client has a slot map: a command succeeded
	masters   sync.Map    // master address → *batcher
	mastersMu sync.Mutex  // held to add to masters, and by closeBatchers

	// With a cluster client, the reloads of its slot map while it is in
	// trouble: see sawError.
	reloadUntil atomic.Int64 // Unix nanoseconds
	reloadMu    sync.Mutex
	reloading   bool           // guarded by reloadMu: keepReloading runs
	reloads     sync.WaitGroup // keepReloading
	stopReloads chan struct{}  // closed by Close
}

// exec sends cmd, a command on the Redis key rkey, through the pipeline
// when there is one, and returns cmd's error; sent is false when cmd
// surely was not sent. A ctx that ended before the reply came is returned
// as ctx.Err().
func (c *redisCAS) exec(ctx context.Context, rkey string, cmd redis.Cmder) (sent bool, err error) {
	if c.closed.Load() {
		return false, errClosed
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if c.batch != nil {
		sent, err = c.batcherFor(rkey).do(ctx, cmd)
	} else {
		sent = true
		err = c.client.Process(ctx, cmd)
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}
	if sent {
		c.sawError(err)
	}
	return sent, err
}

// batcherFor returns the batcher that sends the commands on the Redis key
// rkey. With a cluster client, each master has its own (made at its first
// use, each with its sender goroutine), found from the client's slot map:
// the sender of one batcher waits for its pipeline's replies before it
// sends the next, so a master that does not answer, or whose commands go-
// redis retries after failed dials (it does so for a pipeline whatever
// NoRetry says, four times by default), holds up the commands of its own
// slots only. Until the client has a slot map, and for other clients,
// there is one batcher.
func (c *redisCAS) batcherFor(rkey string) *batcher {
	if c.cluster == nil || !c.mapped.Load() {
		return c.batch
	}
	m, err := c.cluster.MasterForKey(context.Background(), rkey) // no I/O once the client has a map
	if err != nil {
		return c.batch
	}
	addr := m.Options().Addr
	if b, ok := c.masters.Load(addr); ok {
		return b.(*batcher)
	}
	c.mastersMu.Lock()
	defer c.mastersMu.Unlock()
	if b, ok := c.masters.Load(addr); ok {
		return b.(*batcher)
	}
	if c.closed.Load() { // closeBatchers has run or waits for the lock
		return c.batch
	}
	b := newBatcher(c.client)
	c.masters.Store(addr, b)
	return b
}

// answered notes that a command got its reply: a cluster client then
// has a slot map.
func (c *redisCAS) answered() {
	if c.cluster != nil && !c.mapped.Load() {
		c.mapped.Store(true)
	}
}

// closeBatchers closes every batcher; c.closed must be set.
func (c *redisCAS) closeBatchers() {
	if c.batch == nil {
		return
	}
	c.batch.close()
	c.mastersMu.Lock()
	defer c.mastersMu.Unlock()
	c.masters.Range(func(_, b any) bool {
		b.(*batcher).close()
		return true
	})
}

// onceCmd is a command that go-redis sends at most once, whatever the
// client's MaxRetries and MaxRedirects say (a MOVED, ASK or READONLY
// reply, which says that the command did not run, is still followed).
// A retry would hide the real error behind the caller's store timeout:
// three retries, each after go-redis's five dial attempts, outlast the
// default timeout of 1s when the server refuses connections. And a
// compare-and-swap re-sent after a lost reply may run twice.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (onceCmd) NoRetry() bool { return true }

// newCmd returns a command of args, whose key is args[keyPos], that
// go-redis sends at most once.
func newCmd(ctx context.Context, keyPos int8, args ...any) onceCmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(keyPos)
	return onceCmd{cmd}
}

func (c *redisCAS) Get(ctx context.Context, key string) ([]byte, error) {
	rkey := c.prefix + key
	cmd := newCmd(ctx, 1, "get", rkey)
	sent, err := c.exec(ctx, rkey, cmd)
	if err == redis.Nil { // go-redis returns it as is
		c.answered()
		return nil, nil
	}
	if err != nil {
		return nil, classify(ctx, "update", key, err, sent, false)
	}
	c.answered()
	v, ok := cmd.Val().(string)
	if !ok {
		return nil, fmt.Errorf("redisstore: update %s: %w: GET replied %#v, want a string", driver.QuoteKey(key), driver.ErrUnavailable, cmd.Val())
	}
	return []byte(v), nil
}

func (c *redisCAS) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	_, ok, err := c.CompareAndSwapRead(ctx, key, old, next, ttl)
	return ok, err
}

// CompareAndSwapRead is CompareAndSwap that returns the key's state when
// it did not write: the script replies with it (see cas.lua).
func (c *redisCAS) CompareAndSwapRead(ctx context.Context, key string, old, next []byte, ttl time.Duration) ([]byte, bool, error) {
	if ttl < 0 {
		return nil, false, fmt.Errorf("redisstore: update %s: negative TTL %v", driver.QuoteKey(key), ttl)
	}
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++
	}
	var flag, expected any = "1", old
	if old == nil {
		flag, expected = "0", noBytes
	}
	rkey := c.prefix + key
	args := []any{"evalsha", casSHAArg, 1, rkey, flag, expected, next, ms}
	cmd := newCmd(ctx, 3, args...)
	sent, err := c.exec(ctx, rkey, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The server lost its scripts (SCRIPT FLUSH, a restart, a failover,
		// a new cluster node); the script did not run.
		if err := c.client.ScriptLoad(ctx, casScript).Err(); err != nil {
			c.sawError(err)
			return nil, false, classify(ctx, "update", key, err, false, false)
		}
		cmd = newCmd(ctx, 3, args...)
		sent, err = c.exec(ctx, rkey, cmd)
	}
	if err != nil {
		return nil, false, classify(ctx, "update", key, err, sent, true)
	}
	c.answered()
	switch v := cmd.Val().(type) {
	case int64:
		switch v {
		case 1:
			return nil, true, nil
		case 0:
			return nil, false, nil
		}
	case string:
		return []byte(v), false, nil
	}
	return nil, false, fmt.Errorf("redisstore: update %s: %w: script replied %#v, want 0, 1 or a string", driver.QuoteKey(key), driver.ErrIndeterminate, cmd.Val())
}

func (c *redisCAS) Delete(ctx context.Context, key string) error {
	rkey := c.prefix + key
	cmd := newCmd(ctx, 1, "del", rkey)
	sent, err := c.exec(ctx, rkey, cmd)
	if err != nil {
		return classify(ctx, "delete", key, err, sent, true)
	}
	return nil
}

// classify wraps err, the error of a command on key sent for op, with the
// driver error that says whether anything may have been written. sent is
// false when the command surely was not sent; write tells whether it may
// write.
func classify(ctx context.Context, op, key string, err error, sent, write bool) error {
	mayHaveWritten := sent && write && !refused(err)
	if ctxErr := ctx.Err(); ctxErr != nil {
		if mayHaveWritten {
			return fmt.Errorf("redisstore: %s %s: %w: %w", op, driver.QuoteKey(key), driver.ErrIndeterminate, ctxErr)
		}
		return ctxErr
	}
	if mayHaveWritten {
		return fmt.Errorf("redisstore: %s %s: %w: %w", op, driver.QuoteKey(key), driver.ErrIndeterminate, err)
	}
	return fmt.Errorf("redisstore: %s %s: %w: %w", op, driver.QuoteKey(key), driver.ErrUnavailable, err)
}

// refused reports whether err means that a command was not carried out:
// an error reply (the script writes nothing before it could fail), no
// connection to be had, or a closed client or Store.
func refused(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return true
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || errors.Is(err, errClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
