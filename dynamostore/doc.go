// Package dynamostore keeps sluice's rate-limit state in an Amazon
// DynamoDB table, through github.com/aws/aws-sdk-go-v2/service/dynamodb.
// A [Store] is a driver.Store and a driver.Deleter, so one table serves
// every policy and every process.
//
// # Construction
//
//	cfg, err := config.LoadDefaultConfig(ctx) // region and credentials as the SDK finds them
//	…
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), dynamostore.WithTable("sluice_state"))
//	…
//	err = store.Migrate(ctx) // or create the table yourself: see TableDefinition
//
// New accepts a [Client], which *dynamodb.Client satisfies. The Store does
// not own the client.
//
// # Table
//
// One item per key, in a table whose only key is a partition key:
//
//	key         B  partition key: "sluice:" and the limiter's key
//	state       B  the policy's state, opaque bytes
//	expires_at  N  when the state expires, in whole seconds since the Unix
//	               epoch; absent: never; the table's time-to-live attribute
//
// Any key is accepted, any bytes of any length: one shorter than
// driver.MaxKeyLen bytes is stored as it is, a longer one under its
// driver.ShortKey digest form, so a partition key has at most 262 bytes,
// far below DynamoDB's 2048, and no two keys share an item. The prefix
// makes an empty key, which DynamoDB refuses, storable. A state may have
// up to [MaxStateLen] bytes.
//
// [Store.Migrate] creates the table on demand (PAY_PER_REQUEST) and turns
// on time to live; [Store.TableDefinition] is the CreateTable request, for
// those who create tables elsewhere.
//
// # Strategy and round trips
//
// An update is a compare-and-swap (driver.NewCASStore): a strongly
// consistent GetItem, then a PutItem of the whole item with a condition
// that the state is still the one read (state = :old, and not expired;
// for a key without state, that it has none). The comparison is on the
// state itself rather than on a version attribute: the building block
// compares states, a state is a few dozen bytes, and two writes that leave
// equal bytes are equal for every policy. When the condition fails,
// DynamoDB returns the item it found (ReturnValuesOnConditionCheckFailure
// ALL_OLD), so the next attempt needs no read (a driver.SwapReader).
//
// The Store remembers the state it last wrote or read for each of up to
// [DefaultStateCache] keys ([WithStateCache]), so a decision on a key
// whose state this process last wrote costs one request: the conditional
// PutItem when the state changes, a GetItem when it does not. A stale
// entry costs a failed conditional write, never a wrong decision.
//
// # What DynamoDB guarantees, and what the Store relies on
//
//   - A conditional write evaluates its condition and writes atomically,
//     against the latest committed state of the item: conditional writes
//     are strongly consistent whatever the reads are. This is what makes
//     an update atomic across processes.
//   - A strongly consistent read (ConsistentRead) returns every write
//     acknowledged before it. The Store reads only that way: an update
//     whose fn changes nothing (a refused call, a Peek) is decided on the
//     read alone, and an eventually consistent read, which may miss
//     writes of the last second or so, would let it decide on an old
//     state unchecked. For the reads that a conditional write follows, an
//     eventually consistent read would save half a read unit and cost a
//     failed write (a full write unit) whenever it was stale, so it saves
//     nothing on a key that is written often, which is a limited key.
//   - A global table replicated with multi-Region eventual consistency
//     resolves concurrent writes in different Regions by last writer wins,
//     so a condition checked in one Region does not hold in another: all
//     the processes that share limits must use one Region's table.
//
// # Time to live
//
// A state written with a TTL gets expires_at, the first whole second at
// or after now plus the TTL, by the clock of the writing process. An item
// whose expires_at is at or before now reads as no state, and a write
// replaces it as it would a missing item. DynamoDB deletes expired items
// itself, free of write units but best-effort, typically within two days
// by AWS's account, once time to live is on for ExpiresAttribute
// (Migrate turns it on; a table created otherwise needs it turned on):
// deletion only reclaims space, and without it the table keeps every
// item ever written. Processes whose clocks disagree by d see
// a state expire up to d apart; the policies' decisions use the client's
// clock anyway (the state carries their times), and a TTL only decides
// when a state is forgotten.
//
// # Retries
//
// The SDK's default retryer re-sends a request after a connection error
// or a 5xx answer. For a conditional write whose first answer was lost,
// the copy fails its condition against the state the first one wrote,
// and the update would run again on it: its tokens taken twice. A Store
// therefore sends PutItem and DeleteItem with a retryer that re-sends
// only what DynamoDB cannot have acted on: a request it throttled, or one
// whose connection broke while it was being written (a kept-alive
// connection the server closed as it was reused); within the client's
// number of attempts. Reads use the client's retryer.
//
// # Errors
//
// Errors follow the driver contract: driver.ErrConflict when a
// transaction holds the item (TransactionConflictException);
// driver.ErrUnavailable when DynamoDB could not be reached or refused the
// request before writing (throttling that outlasted the retries, a missing
// table, refused credentials, a validation error, a request cut short
// while it was written); driver.ErrIndeterminate when a write was sent
// and its outcome is unknown (a timeout or a reset connection after
// sending, or a 5xx answer to a write). A lost race is not an error: the update runs again, on the
// state the failed condition returned, until it wins or its context ends
// (driver.ErrConflict only past [WithMaxAttempts], if set).
//
// # Permissions
//
// The IAM actions a Store needs on its table
// (arn:aws:dynamodb:REGION:ACCOUNT:table/sluice_state):
//
//   - Update, Delete: dynamodb:GetItem, dynamodb:PutItem,
//     dynamodb:DeleteItem;
//   - Ping: dynamodb:DescribeTable;
//   - Migrate: dynamodb:DescribeTable, dynamodb:CreateTable,
//     dynamodb:DescribeTimeToLive, dynamodb:UpdateTimeToLive.
//
// A process that does not migrate needs only the first four. For example:
//
//	{
//	  "Version": "2012-10-17",
//	  "Statement": [{
//	    "Effect": "Allow",
//	    "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:DescribeTable"],
//	    "Resource": "arn:aws:dynamodb:eu-west-1:123456789012:table/sluice_state"
//	  }]
//	}
//
// # Testing against dynalite
//
// The tests run against dynalite, a DynamoDB-compatible server on Node
// (internal/testserver). It does not emulate: ReturnValuesOnConditionCheckFailure
// (a failed condition returns no item, so a lost race costs a GetItem),
// UpdateTimeToLive (Migrate leaves time to live off there), deleting
// expired items, throttling, capacity limits, and global tables. The
// mapping of DynamoDB's error answers and of a failed condition's item is
// tested against a fake server that answers as DynamoDB does.
package dynamostore
