package record

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

const t0 = int64(1_700_000_000) * int64(time.Second)

// compile stands for the root package's compile, which is stricter: it
// keeps the arithmetic's preconditions, so that a fuzzed configuration
// cannot divide by zero.
func compile(c *tokenbucket.Config) (*tokenbucket.Config, error) {
	for _, b := range c.Bandwidths {
		if b.Capacity <= 0 || b.RefillTokens <= 0 || b.Period <= 0 || b.RefillTokens > b.Period ||
			(b.HasInitial && b.Initial < 0) || (b.Aligned && b.FirstRefill < 0) {
			return nil, errors.New("invalid")
		}
	}
	return tokenbucket.NewConfig(c.Bandwidths...), nil
}

func window(limit int64) *Machine {
	m := fixedwindow.Config{Limit: limit, Interval: int64(time.Minute)}
	return NewMachine("fixed_window", policy.Erase[fixedwindow.State](m), tokenbucket.Proportionally)
}

func bucket(capacity int64, o BucketOptions) *Bucket {
	o.Compile = compile
	cfg := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: capacity, RefillTokens: capacity, Period: int64(time.Hour)})
	return NewBucket(cfg, o)
}

// consume runs c.Consume and returns the record to keep.
func consume(t *testing.T, c Codec, rec []byte, n int64) (policy.Result, []byte) {
	t.Helper()
	res, next, changed := c.Consume(rec, t0, n)
	if changed {
		return res, next
	}
	return res, rec
}

func TestMachine(t *testing.T) {
	c := window(2)
	var rec []byte
	for i, want := range []bool{true, true, false} {
		var res policy.Result
		if res, rec = consume(t, c, rec, 1); res.Allowed != want {
			t.Errorf("Consume %d = %+v, want allowed %v", i, res, want)
		}
	}
	if rec[0] != Version || rec[1] != kindMachine {
		t.Errorf("record header = % x, want version %d, kind %d", rec[:2], Version, kindMachine)
	}
	// Another configuration of the same policy keeps the count, unless
	// its inheritance is a reset.
	bigger := fixedwindow.Config{Limit: 3, Interval: int64(time.Minute)}
	keep := NewMachine("fixed_window(3)", policy.Erase[fixedwindow.State](bigger), tokenbucket.AsIs)
	if res := keep.Peek(rec, t0, 1); !res.Allowed || res.Remaining != 0 {
		t.Errorf("Peek under a limit of 3 keeping the state = %+v, want 1 token left", res)
	}
	drop := NewMachine("fixed_window(3)", policy.Erase[fixedwindow.State](bigger), tokenbucket.ResetStrategy)
	if res := drop.Peek(rec, t0, 1); !res.Allowed || res.Remaining != 2 {
		t.Errorf("Peek under a limit of 3 dropping the state = %+v, want a fresh window", res)
	}
	for _, bad := range [][]byte{nil, {}, {Version}, append([]byte{VersionOrdered + 1}, rec[1:]...), rec[:headerLen]} {
		if res := c.Peek(bad, t0, 1); !res.Allowed || res.Remaining != 1 {
			t.Errorf("Peek of record % x = %+v, want no state", bad, res)
		}
	}
	next, changed := c.Reset(rec)
	if !changed || c.Peek(next, t0, 2).Remaining != 0 || !c.Peek(next, t0, 2).Allowed {
		t.Errorf("Reset = % x, %v; want a record of no state", next, changed)
	}
	if _, changed := c.Reset(nil); changed {
		t.Error("Reset of no record wrote one")
	}
}

func TestBucketMigration(t *testing.T) {
	small := bucket(100, BucketOptions{Inherit: tokenbucket.Proportionally})
	_, rec := consume(t, small, nil, 60)
	big := bucket(200, BucketOptions{Inherit: tokenbucket.Proportionally})
	res, next, changed := big.Consume(rec, t0, 1)
	if !changed || !res.Allowed || res.Remaining != 79 {
		t.Errorf("Consume(1) after a migration of 40 of 100 to 200 = %+v, %v; want 79 left, written", res, changed)
	}
	if cfg := big.Configuration(next, t0); cfg.Bandwidths[0].Capacity != 200 {
		t.Errorf("configuration after the migration = %+v, want capacity 200", cfg.Bandwidths)
	}
	kept := bucket(200, BucketOptions{Inherit: tokenbucket.Proportionally, KeepStored: true})
	if cfg := kept.Configuration(rec, t0); cfg.Bandwidths[0].Capacity != 100 {
		t.Errorf("configuration kept = %+v, want the stored capacity 100", cfg.Bandwidths)
	}
	if res := kept.Peek(rec, t0, 1); res.Remaining != 39 {
		t.Errorf("Peek(1) keeping the stored bucket = %+v, want 39 left", res)
	}
}

func TestBucketUpdate(t *testing.T) {
	read := func(*tokenbucket.Config, tokenbucket.State, int64) bool { return false }
	lazy := NewBucket(nil, BucketOptions{Compile: compile})
	if _, changed, noConfig := lazy.Update(nil, t0, read); changed || !noConfig {
		t.Errorf("Update without configuration or state = changed %v, noConfig %v; want noConfig", changed, noConfig)
	}
	if _, changed, _ := bucket(10, BucketOptions{}).Update(nil, t0, read); changed {
		t.Error("a read created the state of a Limiter's key")
	}
	next, changed, _ := bucket(10, BucketOptions{CreateOnRead: true}).Update(nil, t0, read)
	if !changed {
		t.Fatal("a read did not create the state of a proxy's key")
	}
	// A lazy codec takes the stored configuration as it is.
	if _, changed, noConfig := lazy.Update(next, t0, read); changed || noConfig {
		t.Errorf("Update of a stored bucket without configuration = changed %v, noConfig %v", changed, noConfig)
	}
}

// TestBucketReplace: a replaced configuration keeps the record's origin,
// so that the codec does not migrate it back, and a reservation taken
// before is not given back into it.
func TestBucketReplace(t *testing.T) {
	c := bucket(10, BucketOptions{Inherit: tokenbucket.Proportionally})
	res, rc, rec, changed := c.Reserve(nil, t0, 4, 0)
	if !changed || rc == nil || !res.Allowed {
		t.Fatalf("Reserve(4) = %+v, %v, %v", res, rc, changed)
	}
	wide := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 100, RefillTokens: 100, Period: int64(time.Hour)})
	rec, changed, _ = c.Replace(rec, t0, wide, tokenbucket.AsIs, nil)
	if !changed {
		t.Fatal("Replace wrote nothing")
	}
	_, rec = consume(t, c, rec, 1)
	if cfg := c.Configuration(rec, t0); cfg.Bandwidths[0].Capacity != 100 {
		t.Errorf("configuration after Replace and Consume = %+v, want the replaced capacity 100", cfg.Bandwidths)
	}
	if _, changed := c.Cancel(rec, t0, rc); changed {
		t.Error("Cancel gave tokens back into a replaced configuration")
	}
	if res := c.Peek(rec, t0, 1); res.Remaining != 4 {
		t.Errorf("Peek(1) = %+v, want 5 tokens as AsIs kept them, less the one consumed", res)
	}
}

// FuzzRecord: a record from a store is outside input. Whatever its bytes,
// every operation of both codecs answers without panicking, and what they
// write decodes again.
func FuzzRecord(f *testing.F) {
	w, b := window(5), bucket(5, BucketOptions{Inherit: tokenbucket.Proportionally, CreateOnRead: true})
	_, wrec, _ := w.Consume(nil, t0, 1)
	_, brec, _ := b.Consume(nil, t0, 1)
	f.Add(wrec, int64(0), int64(1))
	f.Add(brec, int64(0), int64(1))
	f.Add(appendBucketRecord(nil, header{origin: 1}, []byte{1, 0, 2, 2, 2, 0, 0, 0}, tokenbucket.State{{}}), int64(5), int64(2))
	wv := NewVersionedMachine("fixed_window", w.m, tokenbucket.ResetStrategy, ConfigVersion{Version: 7})
	bv := versioned(9, 7, nil)
	_, wvrec, _ := wv.Consume(nil, t0, 1)
	_, bvrec, _ := bv.Consume(nil, t0, 1)
	f.Add(wvrec, int64(0), int64(1))
	f.Add(bvrec, int64(0), int64(1))
	f.Fuzz(func(t *testing.T, rec []byte, dt, n int64) {
		now := t0 + dt%int64(time.Hour)
		lazy := NewBucket(nil, BucketOptions{Compile: compile})
		lazy.ExpiresAt(rec)
		lazy.Reset(rec)
		for _, c := range []Codec{w, b, wv, bv} {
			c.ExpiresAt(rec)
			c.Peek(rec, now, n)
			if _, next, changed := c.Consume(rec, now, n); changed {
				if res := c.Peek(next, now, 1); res.Remaining < 0 {
					t.Errorf("%T: Peek after Consume = %+v", c, res)
				}
			}
			if _, rc, next, changed := c.Reserve(rec, now, n, int64(time.Second)); rc != nil && changed {
				c.Cancel(next, now, rc)
			}
			c.Reset(rec)
		}
		for _, c := range []*Bucket{b, lazy} {
			next, changed, noConfig := c.Update(rec, now, func(cfg *tokenbucket.Config, st tokenbucket.State, now int64) bool {
				_, ch := tokenbucket.Apply(cfg, st, now, tokenbucket.Request{Op: tokenbucket.OpAvailable})
				return ch
			})
			if changed && (noConfig || c.Configuration(next, now) == nil) {
				t.Errorf("Update wrote % x, which has no configuration", next)
			}
			if changed && next[1] != kindBucket {
				t.Errorf("Update wrote % x, not a bucket record", next)
			}
		}
	})
}
