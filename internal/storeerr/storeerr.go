// Package storeerr maps the errors of a database client to the driver
// contract's errors, for the stores that talk to a database over a
// network (pgstore, mysqlstore, dynamostore). Each store says what its
// client's error means (an Outcome); this package decides, by the one
// rule of the contract, which of driver.ErrConflict, ErrUnavailable and
// ErrIndeterminate that is, and when a context error is returned as it
// is.
package storeerr

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/driver"
)

// Outcome is what a store knows of a request that failed.
type Outcome int

const (
	// NoAnswer is a request that may have reached the database: the
	// connection broke after it was sent, or its context ended.
	NoAnswer Outcome = iota
	// NotSent is a request that certainly did not reach the database:
	// no connection could be made, or the client refused to send it.
	NotSent
	// Refused is an error the database answered with, having written
	// nothing: it rolled the statement or transaction back.
	Refused
	// Conflict is a refusal for contention (a deadlock, a lock wait
	// timeout, a serialization failure): nothing was written, and trying
	// again is safe.
	Conflict
	// Fault is an error the database answered with that does not promise
	// that nothing was written, as DynamoDB's server errors do not.
	Fault
)

// Classify maps err, of a request whose outcome is o, to the driver's
// errors. write says whether the request may have written state (a
// compare-and-swap, a delete, the commit of a transaction that wrote):
// then an outcome that may have written it is driver.ErrIndeterminate,
// wrapping ctx's error too when it ended. Otherwise a context that ended
// is returned as ctx.Err(), as the contract requires when nothing was
// written, and any other error wraps driver.ErrUnavailable; a conflict
// wraps driver.ErrConflict.
func Classify(ctx context.Context, err error, write bool, o Outcome) error {
	switch o {
	case Conflict:
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	case NoAnswer, Fault:
		if write {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("%w: %w: %w", driver.ErrIndeterminate, cerr, err)
			}
			return fmt.Errorf("%w: %w", driver.ErrIndeterminate, err)
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// Wrap prefixes err with what, unless err is a bare context error, which
// the contract returns as it is: a context that ended before anything was
// written.
func Wrap(what string, err error) error {
	if IsBareContext(err) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// IsBareContext reports whether err is context.Canceled or
// context.DeadlineExceeded itself, not an error wrapping one.
func IsBareContext(err error) bool {
	return err == context.Canceled || err == context.DeadlineExceeded
}
