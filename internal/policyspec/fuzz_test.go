package policyspec

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// FuzzDecode: any LIMITER, under the vectors' options or a config file's,
// decodes or fails with a *yamlnode.Error, never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"policy": "gcra", "limit": 9223372036854775807, "rate": {"interval": "1s", "amount": 5}}`,
		`{"policy": "compound", "limiters": [{"policy": "no_limit"}, {"policy": "fixed_window", "limit": 1, "interval": 1, "aligned": true}, "x"]}`,
		`{"policy": "bucket", "limits": [{"capacity": 1, "refill": {"intervally_aligned": 1, "per": "1s", "first_refill": 0, "adaptive_initial": true}, "initial": 0, "id": "a"}]}`,
		`{"policy": "smooth_warming_up", "permits_per_second": 0.5, "warmup_period": "1s", "cold_factor": 3}`,
		`{"policy": "resilience4j", "limit_for_period": 1, "limit_refresh_period": 1, "timeout": "-1s", "x": {}}`,
		`{"policy": "shaper", "rate": {"interval": "1s", "amount": 1}, "max_queue": -1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := yamlnode.FromJSON(data)
		if err != nil {
			return
		}
		for _, opts := range []Options{{}, {Compat: true, VectorValues: true, IgnoreUnknown: true, Unchecked: true}} {
			d := NewDecoder(opts)
			desc, err := d.Decode("limiter", n)
			if err == nil {
				err = d.Resolve(desc, func(m Member) (*Desc, error) {
					return nil, yamlnode.Errorf(m.Path, m.Node, "no names")
				})
			}
			var ye *yamlnode.Error
			if err != nil && !errors.As(err, &ye) {
				t.Fatalf("Decode(%s) with %+v = %T %v, want a *yamlnode.Error", data, opts, err, err)
			}
			if err == nil && desc.Policy == nil && desc.Compat == nil {
				t.Fatalf("Decode(%s) with %+v built nothing", data, opts)
			}
		}
	})
}
