// Package contention holds a test, and nothing else: several OS processes,
// each with many goroutines, call one limiter on one key of a real store
// (Redis, PostgreSQL with each strategy, MariaDB, DynamoDB on dynalite),
// and together they must admit exactly the limit with no error. It is the proof that contention
// on a healthy store is never an outage (docs/stores.md). TestLeaseBound
// is the same for quota leasing (sluice.WithLease): what the processes
// admit stays within the bound docs/stores.md states. TestSlotContention
// is TestContention for a concurrency limit's slots.
package contention
