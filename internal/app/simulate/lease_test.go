package simulate

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// TestLeased runs a limiter with a lease key as four processes beside the
// same policy exact: leasing never admits more in a window, and at most
// P×max fewer.
func TestLeased(t *testing.T) {
	f, err := config.Load([]byte(`
limiters:
  exact: {policy: fixed_window, limit: 100, interval: 1s}
  leased: {policy: fixed_window, limit: 100, interval: 1s, lease: {min: 5, max: 20, ttl: 500ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ParseTraffic("poisson 300/s seed 3")
	if err != nil {
		t.Fatal(err)
	}
	reports, err := Limiters(f, []string{"exact", "leased"}, tr, Options{Duration: 5 * time.Second, Slice: time.Second, Processes: 4})
	if err != nil {
		t.Fatal(err)
	}
	exact, leased := reports[0], reports[1]
	if exact.Lease != nil || leased.Lease == nil || leased.Processes != 4 {
		t.Fatalf("reports' leases: exact %v, leased %v by %d processes; want none, and one by 4", exact.Lease, leased.Lease, leased.Processes)
	}
	for i, s := range leased.Slices {
		if s.Accepted > exact.Slices[i].Accepted || s.Accepted < exact.Slices[i].Accepted-4*20 {
			t.Errorf("second %d: leased admitted %d, exact %d; want at most as many, and at most P×max = 80 fewer", i, s.Accepted, exact.Slices[i].Accepted)
		}
	}
	var out bytes.Buffer
	if err := WriteText(&out, tr.String(), reports); err != nil {
		t.Fatal(err)
	}
	if want := "leased: leased by 4 processes, leases of 5 to 20 tokens for 500ms"; !strings.Contains(out.String(), want) {
		t.Errorf("WriteText = %q, want it to say %q", out.String(), want)
	}
	for _, n := range []int{-1, MaxProcesses + 1, 100_000_000} {
		if _, err := Run("bad", f.Limiters["exact"].Policy, &Requests{}, Options{Duration: time.Second, Processes: n}); err == nil {
			t.Errorf("Run with %d processes = nil error, want one", n)
		}
	}
}
