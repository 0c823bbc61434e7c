package keyed

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/compound"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/slidingwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// tableCase is a machine run on a Table and on a Mem, which must agree.
type tableCase struct {
	name         string
	table, model Keys
}

func tableCases() []tableCase {
	tb := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 5, RefillTokens: 5, Period: minute})
	fw := fixedwindow.Config{Limit: 5, Interval: minute}
	sw := slidingwindow.Config{Limit: 5, Interval: minute}
	gc := gcra.Config{Limit: 5, Rate: 5, Period: minute}
	single := tokenbucket.NewSingle(tb.Bandwidths[0], false)
	multi := tokenbucket.NewMulti(tb)
	swp, _ := sw.Packed()
	both, ok := compound.NewWords[compound.W4](compound.Config{Members: []policy.Erased{
		policy.Erase[fixedwindow.State](fixedwindow.Config{Limit: 3, Interval: 30 * int64(time.Second)}), policy.Erase[gcra.State](gc)}})
	if !ok {
		panic("a fixed window and GCRA do not fit in 4 words")
	}
	return []tableCase{
		// The machines that lapse (policy.Lapses) decide on an expired
		// state in the table as it is; the map asks ExpiresAt first.
		{"sliding_window_packed", NewTable[slidingwindow.PackedState](swp, 0), NewMem[slidingwindow.PackedState](swp, 0)},
		{"compound", NewTable[compound.WordState[compound.W4]](both, 0), NewMem[compound.WordState[compound.W4]](both, 0)},
		{"fixed_window", NewTable[fixedwindow.State](fw, 0), NewMem[fixedwindow.State](fw, 0)},
		{"sliding_window", NewTable[slidingwindow.State](sw, 0), NewMem[slidingwindow.State](sw, 0)},
		{"gcra", NewTable[gcra.State](gc, 0), NewMem[gcra.State](gc, 0)},
		{"token_bucket", NewTable[tokenbucket.BandwidthState](single, 0), NewMem[tokenbucket.BandwidthState](single, 0)},
		{"bucket", NewTable[tokenbucket.State](multi, 0), NewMem[tokenbucket.State](multi, 0)},
	}
}

// TestTableAgreesWithMem runs the same random calls on a Table and on a
// Mem, over keys of every length class (empty, short, past the one-byte
// length, past a chunk), at times that let states expire, and compares
// every result: the table decides exactly as the map does.
func TestTableAgreesWithMem(t *testing.T) {
	long := strings.Repeat("x", maxChunk+10)
	for _, tc := range tableCases() {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			keys := []string{"", long, strings.Repeat("y", 200)}
			for i := range 3000 {
				keys = append(keys, "user:"+strconv.Itoa(i))
				if i%10 == 0 { // 12 bytes, the longest inline, and 13
					keys = append(keys, "u:"+strconv.Itoa(1e9+i), "ur:"+strconv.Itoa(1e9+i))
				}
			}
			now := t0
			var receipts []struct {
				key string
				rc  *policy.Receipt
			}
			for step := range 60_000 {
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(3) == 0 {
					key = keys[rng.IntN(20)] // hot keys
				}
				now += rng.Int64N(int64(20 * time.Millisecond))
				if rng.IntN(5000) == 0 {
					now += 2 * minute // everything expires
				}
				n := 1 + rng.Int64N(3)
				switch op := rng.IntN(22); {
				case op < 14:
					if got, want := tc.table.Consume(key, now, n), tc.model.Consume(key, now, n); got != want {
						t.Fatalf("step %d: Consume(%.10q, %d) = %+v, want %+v", step, key, n, got, want)
					}
				case op < 17:
					if got, want := tc.table.Peek(key, now, n), tc.model.Peek(key, now, n); got != want {
						t.Fatalf("step %d: Peek(%.10q, %d) = %+v, want %+v", step, key, n, got, want)
					}
				case op < 18:
					got, grc := tc.table.Reserve(key, now, n, minute)
					want, wrc := tc.model.Reserve(key, now, n, minute)
					if got != want || !reflect.DeepEqual(grc, wrc) {
						t.Fatalf("step %d: Reserve(%.10q, %d) = %+v %+v, want %+v %+v", step, key, n, got, grc, want, wrc)
					}
					if grc != nil {
						receipts = append(receipts, struct {
							key string
							rc  *policy.Receipt
						}{key, grc})
					}
				case op < 19: // Take, which must be a Reserve of no wait
					want, _ := tc.model.Reserve(key, now, n, 0)
					if got := tc.table.Take(key, now, n); got != (want.Code == policy.OK && want.Allowed) {
						t.Fatalf("step %d: Take(%.10q, %d) = %v, want %+v", step, key, n, got, want)
					}
				case op < 20:
					if len(receipts) > 0 {
						r := receipts[len(receipts)-1]
						receipts = receipts[:len(receipts)-1]
						tc.table.Cancel(r.key, now, r.rc)
						tc.model.Cancel(r.key, now, r.rc)
					}
				case op < 21: // Update, seeing the same state and keeping, dropping or leaving it
					keep := n % 3
					var seen [2][]byte
					for i, k := range []Keys{tc.table, tc.model} {
						k.Update(key, now, func(st []byte) ([]byte, bool) {
							seen[i] = bytes.Clone(st)
							return st, keep == 0 || keep == 1 && len(st) == 0
						})
					}
					if !bytes.Equal(seen[0], seen[1]) {
						t.Fatalf("step %d: Update(%.10q) saw %x, want %x", step, key, seen[0], seen[1])
					}
				default:
					tc.table.Reset(key)
					tc.model.Reset(key)
				}
			}
			for _, key := range keys {
				if got, want := tc.table.Peek(key, now, 1), tc.model.Peek(key, now, 1); got != want {
					t.Errorf("at the end: Peek(%.10q) = %+v, want %+v", key, got, want)
				}
			}
		})
	}
}

// TestTableCollidingTags puts keys of one tag in one shard: they stay
// apart, and each removal leaves the others found.
func TestTableCollidingTags(t *testing.T) {
	var sh tableShard[gcra.State]
	sh.slots = make([]slot[gcra.State], 64)
	const h = uint64(0xbeef42) << 40
	var keys []string
	for i := range 40 {
		key := "k" + strconv.Itoa(i)
		if i%2 == 1 {
			key += "-longer-than-inline"
		}
		p := pack(key, h)
		if p.long() {
			ref, _ := sh.keys.add(key)
			p.k1 = uint64(ref)
		}
		sh.place(p, &gcra.State{TAT: int64(i)})
		keys = append(keys, key)
	}
	for len(keys) > 0 {
		for _, key := range keys {
			j := sh.find(key, pack(key, h))
			if j < 0 {
				t.Fatalf("find(%q) = -1 with %d keys of one tag", key, len(keys))
			}
			if want, _ := strconv.Atoi(strings.TrimSuffix(key[1:], "-longer-than-inline")); sh.slots[j].st.TAT != int64(want) {
				t.Fatalf("find(%q) found the state of key k%d", key, sh.slots[j].st.TAT)
			}
			if sh.find(key+"x", pack(key+"x", h)) >= 0 || sh.find(key, pack(key, h+1<<40)) >= 0 {
				t.Fatalf("find of an absent key sharing %q's tag or bytes found a slot", key)
			}
		}
		j := sh.find(keys[0], pack(keys[0], h))
		sh.remove(j)
		keys = keys[1:]
	}
	if sh.n != 0 || sh.keys.live != 0 {
		t.Errorf("after removing every key: n = %d, live bytes = %d, want 0, 0", sh.n, sh.keys.live)
	}
}

// TestTableMaxKeys: a bounded table never holds more than its bound, and
// holds it all when every key is live.
func TestTableMaxKeys(t *testing.T) {
	fw := fixedwindow.Config{Limit: 5, Interval: minute}
	for _, bound := range []int{1, 7, 1000, 5000, 100_000} {
		k := NewTable[fixedwindow.State](fw, bound)
		for i := range 3 * bound {
			k.Consume("key"+strconv.Itoa(i), t0, 1)
			if got := k.Len(); got > bound {
				t.Fatalf("bound %d: Len() = %d after %d keys, want at most %d", bound, got, i+1, bound)
			}
		}
		if got := k.Len(); got != bound {
			t.Errorf("bound %d: Len() = %d after %d live keys, want %d", bound, got, 3*bound, bound)
		}
	}
}

// TestTableSweepAndShrink: idle keys are swept by later insertions, the
// shards shrink, and the arena's garbage is compacted away.
func TestTableSweepAndShrink(t *testing.T) {
	fw := fixedwindow.Config{Limit: 5, Interval: minute}
	k := NewTable[fixedwindow.State](fw, 0)
	for i := range 100_000 {
		k.Consume("old:"+strconv.Itoa(i), t0, 1)
	}
	later := t0 + 2*minute
	for i := range 20_000 {
		k.Consume("new:"+strconv.Itoa(i), later, 1)
	}
	if got := k.Len(); got >= 100_000 {
		t.Errorf("Len() = %d after 20k insertions past the old keys' expiry, want old keys swept", got)
	}
	// Another pass of insertions sweeps the rest: each sweeps 4 slots.
	for i := range 100_000 {
		k.Consume("new:"+strconv.Itoa(i), later, 1)
	}
	if got := k.Len(); got != 100_000 {
		t.Errorf("Len() = %d, want 100000 (the new keys only)", got)
	}
	slots, garbage, live := 0, 0, 0
	for i := range k.shards {
		slots += len(k.shards[i].slots)
		garbage += k.shards[i].keys.garbage
		live += k.shards[i].keys.live
	}
	if slots > 2*100_000+64*minSlots {
		t.Errorf("%d slots for 100000 keys, want at most 2 per key", slots)
	}
	if garbage > live+64*minChunk {
		t.Errorf("arena garbage %d bytes for %d live, want compacted", garbage, live)
	}
	for i := range 100_000 {
		want := int64(3) // 5, less one hit, less the token peeked at
		if i < 20_000 {
			want-- // the keys hit twice
		}
		if res := k.Peek("new:"+strconv.Itoa(i), later, 1); res.Remaining != want {
			t.Fatalf("Peek(new:%d) = %+v, want %d left", i, res, want)
		}
	}
}

// TestTableAllocs: a decision on an existing key allocates nothing, and
// an insertion at most one allocation, amortised.
func TestTableAllocs(t *testing.T) {
	gc := gcra.Config{Limit: 100, Rate: 100, Period: int64(time.Hour)}
	k := NewTable[gcra.State](gc, 0)
	k.Consume("user:1", t0, 1)
	if a := testing.AllocsPerRun(1000, func() { k.Consume("user:1", t0, 1) }); a != 0 {
		t.Errorf("Consume on an existing key: %v allocations, want 0", a)
	}
	if a := testing.AllocsPerRun(1000, func() { k.Peek("user:1", t0, 1) }); a != 0 {
		t.Errorf("Peek on an existing key: %v allocations, want 0", a)
	}
	keys := make([]string, 200_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	i := 0
	if a := testing.AllocsPerRun(len(keys)-1, func() { k.Consume(keys[i], t0, 1); i++ }); a > 1 {
		t.Errorf("insertion: %v allocations amortised, want at most 1", a)
	}
}

// BenchmarkKeys compares Table with Mem on existing keys, with the time
// given: the engine's share of a Limiter's decision.
func BenchmarkKeys(b *testing.B) {
	fw := fixedwindow.Config{Limit: 100, Interval: minute}
	for _, n := range []int{1, 1000, 1_000_000} {
		keys := make([]string, 1<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(1e6+rng.IntN(n))
		}
		for _, im := range []struct {
			name string
			k    Keys
		}{
			{"table", NewTable[fixedwindow.State](fw, 0)},
			{"mem", NewMem[fixedwindow.State](fw, 0)},
		} {
			b.Run("keys="+strconv.Itoa(n)+"/impl="+im.name, func(b *testing.B) {
				for _, key := range keys {
					im.k.Consume(key, t0, 1)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					im.k.Consume(keys[i&(1<<20-1)], t0, 1)
					i++
				}
			})
		}
	}
}

// TestTableBuckets: a Table of a token bucket is a Buckets too, and what
// WithBucket takes the decisions see.
func TestTableBuckets(t *testing.T) {
	if b := NewTable[fixedwindow.State](fixedwindow.Config{Limit: 1, Interval: minute}, 0).Buckets(); b != nil {
		t.Errorf("a fixed window's Buckets() = %v, want nil", b)
	}
	cfg := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: 10, RefillTokens: 10, Period: minute})
	for _, k := range []Keys{
		NewTable[tokenbucket.BandwidthState](tokenbucket.NewSingle(cfg.Bandwidths[0], true), 0),
		NewTable[tokenbucket.State](tokenbucket.NewMulti(cfg), 0),
	} {
		b := k.Buckets()
		if b == nil {
			t.Fatalf("%T: Buckets() = nil", k)
		}
		take := func(cfg *tokenbucket.Config, st tokenbucket.State) bool {
			tokenbucket.Consume(st, 2)
			return true
		}
		b.WithBucket("k", t0, take) // a new key
		b.WithBucket("k", t0, take) // an existing one
		if res := k.Peek("k", t0, 1); res.Remaining != 5 {
			t.Errorf("%T: Peek(1) after taking 4 through Buckets = %+v, want 5 left", k, res)
		}
	}
}

// FuzzTableAgreesWithMem decodes calls from the input (3 bytes each: the
// operation and tokens, the key out of 64 of every length class, the time
// step) and runs them on a Table and a Mem of each policy, which must
// return the same results.
func FuzzTableAgreesWithMem(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{0x10, 0, 0, 0x20, 0, 255, 0x30, 63, 255, 0x41, 1, 1})
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = strings.Repeat("k", i%16) + strconv.Itoa(i) // 1 to 17 bytes
	}
	keys[63] = strings.Repeat("z", maxChunk+1)
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, tc := range tableCases() {
			now := t0
			for i := 0; i+2 < len(in); i += 3 {
				op, key := in[i], keys[in[i+1]%64]
				now += int64(in[i+2]) * int64(time.Second)
				n := int64(op&3) + 1
				switch op >> 4 & 3 {
				case 0, 1:
					if got, want := tc.table.Consume(key, now, n), tc.model.Consume(key, now, n); got != want {
						t.Fatalf("%s: call %d: Consume(%.10q, %d) = %+v, want %+v", tc.name, i/3, key, n, got, want)
					}
				case 2:
					if got, want := tc.table.Peek(key, now, n), tc.model.Peek(key, now, n); got != want {
						t.Fatalf("%s: call %d: Peek(%.10q, %d) = %+v, want %+v", tc.name, i/3, key, n, got, want)
					}
				default:
					tc.table.Reset(key)
					tc.model.Reset(key)
				}
			}
		}
	})
}

// TestTableConcurrentChurn decides on hot keys from several goroutines,
// mostly without the shard's lock, while others insert and remove keys of
// every length in the same shards, so that hot keys move under the
// decisions (runs shifted both ways, shards grown and shrunk): every hot
// key is admitted exactly its limit.
func TestTableConcurrentChurn(t *testing.T) {
	const limit, hot, deciders, calls, churners, churn = 1000, 16, 4, 8000, 2, 6000
	hour := int64(time.Hour)
	fw := fixedwindow.Config{Limit: limit, Interval: hour}
	gc := gcra.Config{Limit: limit, Rate: 1, Period: hour}
	swp, _ := slidingwindow.Config{Limit: limit, Interval: hour}.Packed()
	tb := tokenbucket.NewConfig(tokenbucket.Bandwidth{Capacity: limit, RefillTokens: 1, Period: hour})
	both, ok := compound.NewWords[compound.W4](compound.Config{Members: []policy.Erased{
		policy.Erase[fixedwindow.State](fw), policy.Erase[gcra.State](gcra.Config{Limit: 2 * limit, Rate: 1, Period: hour})}})
	if !ok {
		t.Fatal("a fixed window and GCRA do not fit in 4 words")
	}
	for _, tc := range []struct {
		name string
		keys Keys
	}{
		{"fixed_window", NewTable[fixedwindow.State](fw, 0)},
		{"gcra", NewTable[gcra.State](gc, 0)},
		{"sliding_window_packed", NewTable[slidingwindow.PackedState](swp, 0)},
		{"token_bucket", NewTable[tokenbucket.BandwidthState](tokenbucket.NewSingle(tb.Bandwidths[0], false), 0)},
		{"compound", NewTable[compound.WordState[compound.W4]](both, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			admitted := make([][hot]int, deciders)
			for g := range deciders {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range calls {
						k := rng.IntN(hot)
						if tc.keys.Consume("hot"+strconv.Itoa(k), t0, 1).Allowed {
							admitted[g][k]++
						}
					}
				})
			}
			for g := range churners {
				wg.Go(func() {
					for i := range churn {
						key := "c" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
						if i%3 == 0 {
							key += "-longer-than-inline"
						}
						tc.keys.Consume(key, t0, 1)
						if i%4 != 0 { // keep a quarter: shards grow, and shrink as the rest goes
							tc.keys.Reset(key)
						}
					}
				})
			}
			wg.Wait()
			for k := range hot {
				got := 0
				for g := range deciders {
					got += admitted[g][k]
				}
				if got != limit {
					t.Errorf("hot%d admitted %d times, want exactly %d", k, got, limit)
				}
			}
		})
	}
}
