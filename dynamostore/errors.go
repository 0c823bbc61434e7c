package dynamostore

import (
	"context"
	"errors"
	"net"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluicehq/sluice/internal/storeerr"
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
	out := storeerr.NoAnswer
	switch {
	case !errors.As(err, &apiErr):
		if notSent(err) {
			out = storeerr.NotSent
		}
	case apiErr.ErrorCode() == "TransactionConflictException":
		out = storeerr.Conflict
	case serverFault(err, apiErr):
		out = storeerr.Fault
	default:
		out = storeerr.Refused
	}
	return storeerr.Classify(ctx, err, write, out)
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
