package sluice

import (
	"fmt"
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
//     limiter tells its observer once (EventVersionConflict): two
//     configurations must not share a version.
//
// The default, 0, is unversioned: the configuration of the call always
// wins, as before versions existed, which is right for one process or a
// deploy that stops every process first. Raise the version with every
// change of limits; see docs/plans.md.
func WithConfigVersion(v uint64) Option {
	return Option{name: "WithConfigVersion", scope: storeOnly, set: func(o *options) { o.configVersion = v }}
}

// configVersion is the record codecs' ConfigVersion of version v, whose
// first conflict is told to obs (nil: none).
func configVersion(v uint64, obs Observer) record.ConfigVersion {
	if v == 0 {
		return record.ConfigVersion{}
	}
	var told atomic.Bool
	return record.ConfigVersion{Version: v, Conflict: func(stored uint64) {
		if obs != nil && told.CompareAndSwap(false, true) {
			obs.Observe(Event{Kind: EventVersionConflict, Err: fmt.Errorf(
				"sluice: a key's stored configuration (fingerprint %016x) has version %d, as this one, but differs: the stored one is kept; give each configuration its own version",
				stored, v)})
		}
	}}
}
