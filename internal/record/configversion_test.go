package record

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

func versioned(capacity int64, v uint64, conflict func(uint64)) *Bucket {
	return bucket(capacity, BucketOptions{Inherit: tokenbucket.Proportionally, ConfigVersion: ConfigVersion{Version: v, Conflict: conflict}})
}

// TestBucketOrder: during a rolling deploy, a key migrates once to the
// newer configuration, and the older one then decides under it.
func TestBucketOrder(t *testing.T) {
	old, cur := versioned(100, 1, nil), versioned(200, 2, nil)
	_, rec := consume(t, old, nil, 60) // 40 of 100 left
	if rec[0] != VersionOrdered {
		t.Fatalf("record of version 1 starts with %d, want %d", rec[0], VersionOrdered)
	}
	res, rec := consume(t, cur, rec, 1) // migrated: 80 of 200, then 79
	if res.Remaining != 79 {
		t.Errorf("newer Consume(1) after the migration = %+v, want 79 left", res)
	}
	for i := range 5 {
		res, rec = consume(t, old, rec, 1)
		if want := int64(78 - 2*i); res.Remaining != want || res.Limit != 200 {
			t.Errorf("older Consume(1) #%d = %+v, want %d left of the stored 200", i, res, want)
		}
		res, rec = consume(t, cur, rec, 1)
		if want := int64(77 - 2*i); res.Remaining != want {
			t.Errorf("newer Consume(1) #%d = %+v, want %d left, no second migration", i, res, want)
		}
	}
	if cfg := old.Configuration(rec, t0); cfg.Bandwidths[0].Capacity != 200 {
		t.Errorf("configuration seen by the older process = %+v, want the stored 200", cfg.Bandwidths)
	}
}

// TestBucketOrderUnversioned: a record of releases before versions (its
// version is 0) migrates to any versioned configuration, and two
// unversioned configurations migrate to each other, as before.
func TestBucketOrderUnversioned(t *testing.T) {
	v0 := bucket(100, BucketOptions{Inherit: tokenbucket.Proportionally})
	_, rec := consume(t, v0, nil, 50)
	if rec[0] != Version {
		t.Fatalf("record of version 0 starts with %d, want %d, which older releases read", rec[0], Version)
	}
	if res, _ := consume(t, versioned(200, 1, nil), rec, 1); res.Remaining != 99 || res.Limit != 200 {
		t.Errorf("version 1 Consume(1) on a version 0 record = %+v, want migrated to 100 of 200, 99 left", res)
	}
	if res, _ := consume(t, bucket(10, BucketOptions{Inherit: tokenbucket.Proportionally}), rec, 1); res.Limit != 10 {
		t.Errorf("unversioned Consume(1) on another unversioned record = %+v, want migrated to capacity 10", res)
	}
}

// TestBucketOrderConflict: two configurations of one version: the stored
// one wins and the conflict is reported.
func TestBucketOrderConflict(t *testing.T) {
	var seen []uint64
	a := versioned(100, 3, nil)
	b := versioned(50, 3, func(fp uint64) { seen = append(seen, fp) })
	_, rec := consume(t, a, nil, 10)
	res, rec := consume(t, b, rec, 1)
	if res.Limit != 100 || res.Remaining != 89 {
		t.Errorf("Consume(1) under a conflicting configuration = %+v, want the stored one: 89 of 100", res)
	}
	if len(seen) == 0 || seen[0] != a.fp {
		t.Errorf("conflicts reported = %x, want the stored fingerprint %x", seen, a.fp)
	}
	if res, _ := consume(t, a, rec, 1); res.Remaining != 88 {
		t.Errorf("Consume(1) by the stored configuration = %+v, want 88 left", res)
	}
}

// TestMachineOrder: another policy's record is dropped once by the newer
// configuration with a reset inheritance, and kept by the older one.
func TestMachineOrder(t *testing.T) {
	mk := func(limit int64, v uint64) *Machine {
		m := fixedwindow.Config{Limit: limit, Interval: int64(time.Minute)}
		return NewVersionedMachine("fixed_window("+string(rune('0'+limit))+")", policy.Erase[fixedwindow.State](m), tokenbucket.ResetStrategy, ConfigVersion{Version: v})
	}
	old, cur := mk(5, 1), mk(8, 2)
	_, rec := consume(t, old, nil, 3)
	res, rec := consume(t, cur, rec, 1) // dropped, then 1 of 8
	if res.Remaining != 7 {
		t.Errorf("newer Consume(1) = %+v, want a fresh window: 7 left", res)
	}
	res, rec = consume(t, old, rec, 1) // kept: 2 counted, under the older limit 5
	if res.Remaining != 3 {
		t.Errorf("older Consume(1) = %+v, want the stored count kept: 3 of 5 left", res)
	}
	if res, _ = consume(t, cur, rec, 1); res.Remaining != 5 {
		t.Errorf("newer Consume(1) = %+v, want no second reset: 5 of 8 left", res)
	}
	next, _ := old.Reset(rec)
	if h, _, err := readHeader(next, kindMachine); err != nil || h.origin != cur.fp || h.version != 2 {
		t.Errorf("older Reset wrote header %+v, %v; want the newer configuration's", h, err)
	}
}

// TestOrderForeignKind: a newer configuration of another kind of policy
// overwrites an older record once; the older codec then writes nothing
// over the newer record it cannot read.
func TestOrderForeignKind(t *testing.T) {
	m := fixedwindow.Config{Limit: 5, Interval: int64(time.Minute)}
	oldWindow := NewVersionedMachine("fixed_window(5)", policy.Erase[fixedwindow.State](m), tokenbucket.Proportionally, ConfigVersion{Version: 1})
	newBucket := versioned(10, 2, nil)
	_, rec := consume(t, oldWindow, nil, 2)
	res, rec := consume(t, newBucket, rec, 3)
	if res.Limit != 10 || res.Remaining != 7 {
		t.Fatalf("newer bucket Consume(3) over an older window = %+v, want a new bucket: 7 of 10", res)
	}
	if _, next, changed := oldWindow.Consume(rec, t0, 1); changed {
		t.Errorf("older window wrote % x over the newer bucket's record", next)
	}
	if _, _, next, changed := oldWindow.Reserve(rec, t0, 1, 0); changed {
		t.Errorf("older window's Reserve wrote % x over the newer bucket's record", next)
	}
	// And the other way round: an older bucket, a newer window.
	newWindow := NewVersionedMachine("fixed_window(5)", policy.Erase[fixedwindow.State](m), tokenbucket.Proportionally, ConfigVersion{Version: 3})
	_, wrec := consume(t, newWindow, rec, 1)
	oldBucket := versioned(10, 2, nil)
	if _, next, changed := oldBucket.Consume(wrec, t0, 1); changed {
		t.Errorf("older bucket wrote % x over the newer window's record", next)
	}
	read := func(*tokenbucket.Config, tokenbucket.State, int64) bool { return true }
	if next, changed, _ := oldBucket.Update(wrec, t0, read); changed {
		t.Errorf("older bucket's Update wrote % x over the newer window's record", next)
	}
}
