package config_test

import (
	"testing"

	"github.com/sluicehq/sluice/config"
)

// TestLoadShadow checks that a limiter's shadow key is decoded for
// sluice.WithShadow, apart from its policy.
func TestLoadShadow(t *testing.T) {
	f, err := config.Load([]byte(`
limiters:
  new: {policy: fixed_window, limit: 10, interval: 1m, shadow: true}
  old: {policy: fixed_window, limit: 10, interval: 1m, shadow: false}
  plain: {policy: sliding_window, limit: 10, interval: 1m}
  both: {policy: compound, limiters: [new, plain], shadow: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"new": true, "old": false, "plain": false, "both": true} {
		l := f.Limiters[name]
		if l.Shadow != want {
			t.Errorf("limiter %s: Shadow = %v, want %v", name, l.Shadow, want)
		}
	}
	if got := f.Limiters["new"].Policy.String(); got != f.Limiters["old"].Policy.String() {
		t.Errorf("the shadow limiter's policy %s differs from the same without shadow, %s", got, f.Limiters["old"].Policy)
	}
}
