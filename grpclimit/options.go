package grpclimit

import (
	"log/slog"

	"google.golang.org/grpc/codes"
)

// Option configures New.
type Option func(*options)

type options struct {
	errorCode codes.Code
	logger    *slog.Logger
}

// WithErrorCode sets the code of New's answer when a limiter fails (its
// store failed and it fails closed). It must be an error code, not OK.
// The default is UNAVAILABLE.
func WithErrorCode(c codes.Code) Option { return func(o *options) { o.errorCode = c } }

// WithLogger sets where New logs the calls it could not decide on (key
// and cost errors, limiter failures). The default is slog.Default(); nil
// keeps it.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func newOptions(opts []Option) (options, error) {
	o := options{errorCode: codes.Unavailable}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.errorCode == codes.OK || o.errorCode > codes.Unauthenticated {
		return o, &ConfigError{Field: "WithErrorCode", Value: o.errorCode.String(), Want: "must be an error code from Canceled (1) to Unauthenticated (16)"}
	}
	return o, nil
}
