package conformance

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
	"github.com/sluicehq/sluice/resilience"
)

// vectorDescriptions are how a LIMITER differs from a config file's
// limiter description, which it otherwise is: durations and times are Go
// syntax or integer nanoseconds, keys no policy takes are ignored, the
// compatibility policies are there, and values sluice refuses are passed
// on to the target, so that want_config_error cases see it refuse them.
var vectorDescriptions = policyspec.Options{Compat: true, VectorValues: true, IgnoreUnknown: true, Unchecked: true}

// decodeLimiter decodes a case's LIMITER with the decoder of config files.
// Its error is a configuration error, as config files call the same
// description's: a *yamlnode.Error at its path under "limiter".
func decodeLimiter(raw json.RawMessage) (subject, error) {
	n, err := yamlnode.FromJSON(raw)
	if err != nil {
		return nil, err
	}
	d := policyspec.NewDecoder(vectorDescriptions)
	desc, err := d.Decode("limiter", n)
	if err != nil {
		return nil, err
	}
	if err := d.Resolve(desc, inPlace); err != nil {
		return nil, err
	}
	switch c := desc.Compat.(type) {
	case nil:
		return &limiterSubject{desc.Policy}, nil
	case resilience.Config:
		return &rateLimiterSubject{c}, nil
	case resilience.TimeLimiterConfig:
		return &timeLimiterSubject{c}, nil
	case policyspec.Smooth:
		return &smoothSubject{c}, nil
	default:
		return nil, fmt.Errorf("policy %s has no subject in the runner", desc.Spec.Name)
	}
}

// inPlace refuses a compound member that names another limiter: a vector
// names none, and writes its members in place.
func inPlace(m policyspec.Member) (*policyspec.Desc, error) {
	return nil, yamlnode.Errorf(m.Path, m.Node, "unknown limiter %q; a vector's compound members are written in place", m.Name)
}
