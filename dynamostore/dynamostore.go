package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Client is what a Store needs of a DynamoDB client; *dynamodb.Client
// satisfies it. Update and Delete use GetItem, PutItem and DeleteItem;
// Ping uses DescribeTable; Migrate the other three.
type Client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// DefaultTable is the table of a Store, unless WithTable says otherwise.
const DefaultTable = "sluice_state"

// The attributes of an item. Every expression names them through
// placeholders (#s, #e), since DynamoDB reserves many plain words.
const (
	// KeyAttribute is the table's partition key, of type B (binary):
	// KeyPrefix and the key, or its driver.ShortKey digest form.
	KeyAttribute = "key"
	// StateAttribute holds the policy's state, of type B; an item
	// without it has no state.
	StateAttribute = "state"
	// ExpiresAttribute is when the state expires, of type N, in whole
	// seconds since the Unix epoch; an item without it never expires. It
	// is the table's time-to-live attribute.
	ExpiresAttribute = "expires_at"
)

// KeyPrefix starts every partition key a Store writes. It keeps an empty
// key (which DynamoDB refuses as a key value) storable and shows an
// operator whose items these are.
const KeyPrefix = "sluice:"

// MaxStateLen is the largest state in bytes: DynamoDB's item limit of 400
// KiB less the key (at most 262 bytes), the expiry and the attribute
// names, rounded down. A larger state fails its update with
// driver.ErrUnavailable before anything is sent.
const MaxStateLen = 400<<10 - 1<<10

// DefaultStateCache is how many keys' states a Store remembers, unless
// WithStateCache says otherwise.
const DefaultStateCache = 4096

// TableNameError reports a table name that DynamoDB would refuse: 3 to
// 255 characters of a-z, A-Z, 0-9, '_', '-' and '.'.
type TableNameError struct {
	Name string
}

// Error says which name was refused and why.
func (e *TableNameError) Error() string {
	return fmt.Sprintf("dynamostore: WithTable: %q is not a DynamoDB table name (3 to 255 of a-z, A-Z, 0-9, _, - and .)", e.Name)
}

var tableRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// Option configures New.
type Option func(*options)

type options struct {
	table       string
	cache       int
	maxAttempts int
}

// WithTable sets the table; the default is DefaultTable.
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithStateCache sets for how many keys a Store remembers the state it
// last wrote or read (the default is DefaultStateCache; 0 turns the cache
// off). With it, a decision on a key whose state this process last wrote
// is one request, the conditional write, instead of two; a stale entry
// (another process wrote, or the state expired) only costs a failed
// conditional write, never a wrong decision. See driver.WithStateCache.
func WithStateCache(entries int) Option { return func(o *options) { o.cache = entries } }

// WithMaxAttempts bounds the conditional writes of one update that lose
// to other writers, after which it fails with driver.ErrConflict. The
// default, 0, is no bound: an update retries until its context ends, so
// that contention is never a failure (see driver.NewCASStore).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// Store keeps sluice state in a DynamoDB table, one item per key. It is a
// driver.Store and a driver.Deleter, and is safe for concurrent use by
// multiple goroutines when its Client is (a *dynamodb.Client is).
type Store struct {
	c     Client
	table string
	s     driver.Store
	now   func() time.Time // the clock of expiries
	// noResend is the retry policy of PutItem and DeleteItem.
	noResend func(*dynamodb.Options)
}

var (
	_ driver.Store      = (*Store)(nil)
	_ driver.Deleter    = (*Store)(nil)
	_ driver.SwapReader = cas{}
	_ driver.Deleter    = cas{}
)

// New returns a Store on c, usually a *dynamodb.Client. It does not touch
// the table: create it with Migrate, or with TableDefinition in your own
// infrastructure code. It fails with a *TableNameError for a name
// DynamoDB would refuse, and with an error for another invalid option.
func New(c Client, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, errors.New("dynamostore: nil Client")
	}
	o := options{table: DefaultTable, cache: DefaultStateCache}
	for _, opt := range opts {
		opt(&o)
	}
	if !tableRE.MatchString(o.table) {
		return nil, &TableNameError{Name: o.table}
	}
	if o.cache < 0 {
		return nil, fmt.Errorf("dynamostore: WithStateCache: entries must not be negative, got %d", o.cache)
	}
	if o.maxAttempts < 0 {
		return nil, fmt.Errorf("dynamostore: WithMaxAttempts: attempts must not be negative, got %d", o.maxAttempts)
	}
	s := &Store{c: c, table: o.table, now: time.Now}
	// The SDK's default retryer sends a request again after a connection
	// error or a 5xx, which for a conditional write whose first answer
	// was lost means a second copy that fails its condition against the
	// state the first one wrote: the update would then run again on its
	// own state and take its tokens twice. Writes are re-sent only after
	// a throttling error, which DynamoDB answers without writing, or when
	// the request broke off while it was written (see resendable), and
	// within the client's own number of attempts.
	retryer := retry.NewStandard(func(so *retry.StandardOptions) {
		so.Retryables = []retry.IsErrorRetryable{
			retry.NoRetryCanceledError{},
			retry.RetryableErrorCode{Codes: retry.DefaultThrottleErrorCodes},
			retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				if resendable(err) {
					return aws.TrueTernary
				}
				return aws.FalseTernary
			}),
		}
	})
	s.noResend = func(o *dynamodb.Options) {
		attempts := retry.DefaultMaxAttempts
		if o.Retryer != nil {
			attempts = o.Retryer.MaxAttempts()
		}
		o.Retryer = retry.AddWithMaxAttempts(retryer, attempts)
	}
	s.s = driver.NewCASStore(cas{s}, driver.WithMaxAttempts(o.maxAttempts), driver.WithStateCache(o.cache))
	return s, nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// itemKey is the partition key of key: KeyPrefix and key as it is when
// it is shorter than driver.MaxKeyLen bytes, else its digest form, so at
// most 262 bytes, far below DynamoDB's 2048 for a binary key.
func itemKey(key string) string { return KeyPrefix + driver.ShortKey(key) }

// Update atomically reads key's state, calls fn and writes its result
// when it changed, as driver.Store requires. Its errors wrap
// driver.ErrConflict, driver.ErrUnavailable or driver.ErrIndeterminate; a
// context that ended before anything was sent is returned as ctx.Err().
// Any key is accepted (see itemKey); errors name the item's key.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	k := itemKey(key)
	err := s.s.Update(ctx, k, fn)
	if err == nil || storeerr.IsBareContext(err) {
		return err
	}
	return fmt.Errorf("dynamostore: update %q: %w", k, err)
}

// Delete removes key's item at once. Deleting a key without state is not
// an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	k := itemKey(key)
	err := s.s.(driver.Deleter).Delete(ctx, k) // drops the cache entry too
	if err == nil || storeerr.IsBareContext(err) {
		return err
	}
	return fmt.Errorf("dynamostore: delete %q: %w", k, err)
}

// Ping checks that the table answers, with DescribeTable. Its error
// wraps driver.ErrUnavailable, or is ctx.Err().
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.table})
	if err != nil {
		return storeerr.Wrap("dynamostore: ping", classify(ctx, err, false))
	}
	return nil
}

// names are the placeholders of the attributes in every expression.
var names = map[string]string{"#s": StateAttribute, "#e": ExpiresAttribute}

// Conditions of a write. An item has a state when it has a non-empty
// state attribute and no expiry at or before now (whole seconds, the
// Store's clock): the same test as live, so that a Get and a write agree.
const (
	// condAbsent: the key has no state, so a write may create it.
	condAbsent = "attribute_not_exists(#s) OR size(#s) = :zero OR #e <= :now"
	// condEqual: the key's state is :old, and live.
	condEqual = "#s = :old AND (attribute_not_exists(#e) OR #e > :now)"
)

// cas is the driver.SwapReader of a Store: one request per call.
type cas struct{ s *Store }

// Get reads key's item with a strongly consistent read: one request. An
// eventually consistent read could miss the latest write, and an update
// whose fn then changes nothing would decide on it unchecked.
func (c cas) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := c.s.c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                &c.s.table,
		Key:                      keyOf(key),
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String("#s, #e"),
		ExpressionAttributeNames: names,
	})
	if err != nil {
		return nil, classify(ctx, err, false)
	}
	return live(out.Item, c.s.now().Unix()), nil
}

// CompareAndSwap is CompareAndSwapRead without the state it found.
func (c cas) CompareAndSwap(ctx context.Context, key string, old, next []byte, ttl time.Duration) (bool, error) {
	_, ok, err := c.CompareAndSwapRead(ctx, key, old, next, ttl)
	return ok, err
}

// CompareAndSwapRead writes key's whole item with a conditional PutItem,
// one request, if its state is still old (no state when old is nil).
// DynamoDB evaluates the condition and writes atomically, with strong
// consistency. When the condition fails, DynamoDB returns the item it
// found (ReturnValuesOnConditionCheckFailure ALL_OLD), which is the
// current state at no extra cost; a server that returns no item (dynalite
// ignores the parameter, and DynamoDB returns none for a key without an
// item) costs a consistent Get instead.
func (c cas) CompareAndSwapRead(ctx context.Context, key string, old, next []byte, ttl time.Duration) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if len(next) > MaxStateLen {
		return nil, false, fmt.Errorf("%w: state of %d bytes, more than %d", driver.ErrUnavailable, len(next), MaxStateLen)
	}
	now := c.s.now()
	item := keyOf(key)
	if len(next) > 0 {
		item[StateAttribute] = &types.AttributeValueMemberB{Value: next}
	}
	if ttl > 0 {
		item[ExpiresAttribute] = number(expiresAt(now, ttl))
	}
	in := &dynamodb.PutItemInput{
		TableName:                           &c.s.table,
		Item:                                item,
		ExpressionAttributeNames:            names,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if old == nil {
		in.ConditionExpression = aws.String(condAbsent)
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":now": number(now.Unix()), ":zero": number(0)}
	} else {
		in.ConditionExpression = aws.String(condEqual)
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":now": number(now.Unix()), ":old": &types.AttributeValueMemberB{Value: old}}
	}
	_, err := c.s.c.PutItem(ctx, in, c.s.noResend)
	if err == nil {
		return nil, true, nil
	}
	var failed *types.ConditionalCheckFailedException
	if !errors.As(err, &failed) {
		return nil, false, classify(ctx, err, true)
	}
	if failed.Item != nil {
		return live(failed.Item, now.Unix()), false, nil
	}
	cur, err := c.Get(ctx, key)
	return cur, false, err
}

// Delete deletes key's item: one request.
func (c cas) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := c.s.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &c.s.table, Key: keyOf(key)}, c.s.noResend)
	if err != nil {
		return classify(ctx, err, true)
	}
	return nil
}

// keyOf returns a new item holding only the partition key k.
func keyOf(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberB{Value: []byte(k)}}
}

// number is n as a DynamoDB number.
func number(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// expiresAt is the first whole second, since the Unix epoch, at or after
// now+ttl, so that a state is kept at least ttl; DynamoDB's time-to-live
// takes whole seconds. ttl is positive and at most ~292 years, so the sum
// stays far inside time.Time's range.
func expiresAt(now time.Time, ttl time.Duration) int64 {
	t := now.Add(ttl)
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// live returns the state of item at now (Unix seconds): nil when there is
// no item, no state, an empty one, or an expiry at or before now.
// DynamoDB deletes expired items lazily (within days), so an item past
// its expiry is still read, and must read as no state.
func live(item map[string]types.AttributeValue, now int64) []byte {
	st, ok := item[StateAttribute].(*types.AttributeValueMemberB)
	if !ok || len(st.Value) == 0 {
		return nil
	}
	if e, ok := item[ExpiresAttribute].(*types.AttributeValueMemberN); ok && expired(e.Value, now) {
		return nil
	}
	return st.Value
}

// expired reports whether the DynamoDB number exp is at or before now, as
// the conditions' #e <= :now does. A Store writes integers; another
// writer's fraction or exponent is compared as a float64, whose rounding
// matters only within a microsecond of now.
func expired(exp string, now int64) bool {
	if n, err := strconv.ParseInt(exp, 10, 64); err == nil {
		return n <= now
	}
	f, err := strconv.ParseFloat(exp, 64)
	return err == nil && f <= float64(now)
}
