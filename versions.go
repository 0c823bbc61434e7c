package sluice

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/record"
)

// WithConfigVersion gives a Limiter's or a KeyBucket's configuration the
// version v, stored with each key's state, so that configurations change
// in one direction only while processes of two configurations share a
// store (a rolling deploy):
//
//   - a key stored by a lower version (or by a release before versions,
//     version 0) is migrated once to this configuration, by the
//     WithInheritance strategy;
//   - a key stored by a higher version keeps that configuration: a token
//     bucket decides under the configuration stored with it, another
//     policy decides with its own limits on the stored state, and neither
//     writes its own configuration over it;
//   - a key stored by another configuration of the same version keeps the
//     stored one (the first writer wins, the key never bounces), and the
//     limiter logs the conflict once with slog's default logger: two
//     configurations must not share a version.
//
// The default, 0, is unversioned: the configuration of the call always
// wins, as before versions existed, which is right for one process or a
// deploy that stops every process first. Raise the version with every
// change of limits; see docs/plans.md.
func WithConfigVersion(v uint64) StoreOption {
	return StoreOption{"WithConfigVersion", func(o *options) { o.configVersion = v }}
}

// configOrder is the record order of version v, whose conflicts are
// logged once.
func configOrder(v uint64) record.Order {
	if v == 0 {
		return record.Order{}
	}
	var logged atomic.Bool
	return record.Order{Version: v, Conflict: func(stored uint64) {
		if logged.CompareAndSwap(false, true) {
			slog.Warn("sluice: a key's stored configuration has the version of this one but differs: the stored one is kept; give each configuration its own version",
				"version", v, "stored_fingerprint", fmt.Sprintf("%016x", stored))
		}
	}}
}
