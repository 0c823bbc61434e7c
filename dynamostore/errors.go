package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluicehq/sluice/driver"
)

// classify maps err, from a DynamoDB request, to the driver's errors.
// write says whether the request may have written: a PutItem or a
// DeleteItem.
//
//   - DynamoDB answered with an error (a smithy.APIError): a transaction
//     holding the item (TransactionConflictException) is
//     driver.ErrConflict; a 5xx answer to a write is
//     driver.ErrIndeterminate, since DynamoDB does not promise that a
//     write that failed inside the service did not happen; anything else
//     (throttling, a missing table, refused credentials, a validation
//     error) was refused before writing and is driver.ErrUnavailable.
//   - No answer: a request that never left whole (a failed dial or name
//     lookup, or a connection that broke while the request was written,
//     as when the server closes a kept-alive connection) is
//     driver.ErrUnavailable; a write that may have reached the service (a
//     timeout, a connection reset after the request was sent, a context
//     that ended while it was in flight) is driver.ErrIndeterminate.
//
// A context that ended is returned as ctx.Err() when nothing was written,
// wrapped with driver.ErrIndeterminate otherwise.
func classify(ctx context.Context, err error, write bool) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if apiErr.ErrorCode() == "TransactionConflictException" {
			return fmt.Errorf("%w: %w", driver.ErrConflict, err)
		}
		if write && serverFault(err, apiErr) {
			return indeterminate(ctx, err)
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	if write && !notSent(err) {
		return indeterminate(ctx, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// indeterminate is err, or ctx's error when it ended, as
// driver.ErrIndeterminate.
func indeterminate(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w: %w", driver.ErrIndeterminate, cerr, err)
	}
	return fmt.Errorf("%w: %w", driver.ErrIndeterminate, err)
}

// serverFault reports whether DynamoDB answered with a server error: an
// HTTP status of 500 or more, or an error it says is its own fault.
func serverFault(err error, apiErr smithy.APIError) bool {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return true
	}
	return apiErr.ErrorFault() == smithy.FaultServer
}

// notSent reports whether err certainly happened before the whole
// request reached the service, which acts on none that is cut short:
// dialing failed, the endpoint's name did not resolve, or writing the
// request failed (net/http returns a write's error only when no answer
// came).
func notSent(err error) bool {
	var de *net.DNSError
	if errors.As(err, &de) {
		return true
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		return false
	}
	switch oe.Op {
	case "dial", "write", "readfrom": // readfrom: net/http copying the body
		return true
	}
	return false
}

// resendable is the retry rule of writes: only a request that did not
// reach the service whole, over a connection that was open (a kept-alive
// connection the server closed as it was reused), may be sent again. A
// failed dial is not resent: the server is down, and the limiter's
// failure policy answers sooner than retries would.
func resendable(err error) bool {
	var oe *net.OpError
	return notSent(err) && errors.As(err, &oe) && oe.Op != "dial"
}

// wrapErr prefixes err with what, unless err is a bare context error,
// which is returned as is.
func wrapErr(what string, err error) error {
	if isBareContextErr(err) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

func isBareContextErr(err error) bool {
	return err == context.Canceled || err == context.DeadlineExceeded
}
