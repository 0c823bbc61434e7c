package sluice_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestVerbose runs the verbose calls on two bandwidths, 100 a minute and 10
// a second, and checks each value and the snapshot after it. Expected
// numbers are in token·ns: the minute bandwidth gains 100 per ns against a
// period of 60e9, the second bandwidth 10 per ns against 1e9.
func TestVerbose(t *testing.T) {
	cfg := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{
		sluice.Simple(100, time.Minute).WithID("minute"),
		sluice.Simple(10, time.Second).WithID("second"),
	}}
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, cfg.Bandwidths)
	v := b.Verbose()
	steps := []struct {
		name       string
		at         time.Duration
		call       func() (any, sluice.Snapshot, error)
		want       any
		bandwidths []int64
		toFull     time.Duration
	}{
		// 4 short: 2.4s for the minute, 400ms for the second.
		{"AllowN(4).Allowed", 0, func() (any, sluice.Snapshot, error) { r, err := v.AllowN(4); return r.Value.Allowed, r.Snapshot, err },
			true, []int64{96, 6}, 2400 * ms},
		// Rejected: the snapshot is the refilled, unconsumed state.
		{"AllowN(7).Allowed", 0, func() (any, sluice.Snapshot, error) { r, err := v.AllowN(7); return r.Value.Allowed, r.Snapshot, err },
			false, []int64{96, 6}, 2400 * ms},
		// At 1s the minute has 96 + 1e11/60e9 = 97 (error 40e9); the second is
		// full. Taking 3: the minute is 6 short, (360e9-40e9)/100 = 3.2s.
		{"AllowN(3)", time.Second, func() (any, sluice.Snapshot, error) {
			r, err := v.AllowN(3)
			return r.Value, r.Snapshot, err
		}, sluice.Result{Allowed: true, Remaining: 7, ResetAfter: 3200 * ms, Limit: 10}, []int64{94, 7}, 3200 * ms},
		{"PeekN(8)", time.Second, func() (any, sluice.Snapshot, error) {
			r, err := v.PeekN(8)
			return r.Value, r.Snapshot, err
		}, sluice.Result{Remaining: 7, RetryAfter: 100 * ms, ResetAfter: 3200 * ms, Limit: 10}, []int64{94, 7}, 3200 * ms},
		// The minute is 8 short: (480e9-40e9)/100 = 4.4s.
		{"TryConsumeUpTo(2)", time.Second, func() (any, sluice.Snapshot, error) { r, err := v.TryConsumeUpTo(2); return r.Value, r.Snapshot, err },
			int64(2), []int64{92, 5}, 4400 * ms},
		// The second lacks 5 tokens (500ms); the minute is 18 short: 10.4s.
		{"ConsumeIgnoringRateLimits(10)", time.Second, func() (any, sluice.Snapshot, error) {
			r, err := v.ConsumeIgnoringRateLimits(10)
			return r.Value, r.Snapshot, err
		}, 500 * ms, []int64{82, -5}, 10400 * ms},
		{"AddTokens(3)", time.Second, func() (any, sluice.Snapshot, error) { s, err := v.AddTokens(3); return nil, s, err },
			nil, []int64{85, -2}, 8600 * ms},
		{"ForceAddTokens(200)", time.Second, func() (any, sluice.Snapshot, error) { s, err := v.ForceAddTokens(200); return nil, s, err },
			nil, []int64{285, 198}, 0},
		{"AllowN(250).Allowed", time.Second, func() (any, sluice.Snapshot, error) { r, err := v.AllowN(250); return r.Value.Allowed, r.Snapshot, err },
			false, []int64{285, 198}, 0},
		{"AllowN(190).Allowed", time.Second, func() (any, sluice.Snapshot, error) { r, err := v.AllowN(190); return r.Value.Allowed, r.Snapshot, err },
			true, []int64{95, 8}, 2600 * ms}, // (300e9-40e9)/100
		{"Reset()", 2 * time.Second, func() (any, sluice.Snapshot, error) { return nil, v.Reset(), nil },
			nil, []int64{100, 10}, 0},
		{"AvailableTokens()", 3 * time.Second, func() (any, sluice.Snapshot, error) { r := v.AvailableTokens(); return r.Value, r.Snapshot, nil },
			int64(10), []int64{100, 10}, 0},
	}
	for _, s := range steps {
		clock.Set(t0 + int64(s.at))
		got, snap, err := s.call()
		if err != nil {
			t.Fatalf("%s = %v", s.name, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s = %+v, want %+v", s.name, got, s.want)
		}
		want := sluice.Snapshot{
			Time:             t0 + int64(s.at),
			Config:           cfg,
			AvailableTokens:  min(s.bandwidths[0], s.bandwidths[1]),
			Bandwidths:       s.bandwidths,
			TimeToFullRefill: s.toFull,
		}
		if !reflect.DeepEqual(snap, want) {
			t.Errorf("%s: snapshot = %+v, want %+v", s.name, snap, want)
		}
		// A verbose call is the plain call: the bucket agrees afterwards.
		checkAvailable(t, b, want.AvailableTokens)
	}
}

func TestVerboseReplaceConfiguration(t *testing.T) {
	clock := sluicetest.NewFakeClock(t0)
	b := newBucket(t, clock, []sluice.Bandwidth{sluice.Simple(100, time.Minute).WithInitialTokens(40)})
	next := sluice.BucketConfig{Bandwidths: []sluice.Bandwidth{sluice.Simple(200, time.Minute)}}
	clock.Advance(time.Second)
	snap, err := b.Verbose().ReplaceConfiguration(next, sluice.InheritProportionally)
	if err != nil {
		t.Fatalf("ReplaceConfiguration() = %v", err)
	}
	// 40 + 1e11/60e9 = 41⅔ of 100 → 83⅓ of 200, and 116⅔ short at 200
	// a minute: 35s.
	want := sluice.Snapshot{Time: t0 + int64(time.Second), Config: next, AvailableTokens: 83, Bandwidths: []int64{83}, TimeToFullRefill: 35 * time.Second}
	if !reflect.DeepEqual(snap, want) {
		t.Errorf("ReplaceConfiguration() snapshot = %+v, want %+v", snap, want)
	}
}
