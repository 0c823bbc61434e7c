package memstore_test

import (
	"context"
	"encoding/binary"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkMemoryPerKey reports the heap a store holds per key: one
// million 16-byte keys with 24-byte states and a TTL, the key strings
// included. Run it once:
//
//	go test -run '^$' -bench MemoryPerKey -benchtime 1x ./memstore
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 1_000_000
	ctx := context.Background()
	state := make([]byte, 24)
	write := func([]byte) ([]byte, time.Duration, bool) { return state, time.Minute, true }
	var perKey float64
	b.ReportAllocs()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memstore.New()
		for i := range keys {
			key := string(strconv.AppendInt([]byte("user:10000000000")[:5], 10_000_000_000+int64(i), 10)) // 16 bytes
			binary.BigEndian.PutUint64(state, uint64(i))
			if err := s.Update(ctx, key, write); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / keys
		if n := s.Len(); n != keys {
			b.Fatalf("Len() = %d, want %d", n, keys)
		}
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkUpdate measures an update of a 24-byte state under contention:
// all goroutines on one key, or each on keys of its own.
func BenchmarkUpdate(b *testing.B) {
	// newInc returns an increment of a counter in a 24-byte state, writing
	// into a buffer of its own, which the store copies.
	newInc := func() func([]byte) ([]byte, time.Duration, bool) {
		next := make([]byte, 24)
		return func(state []byte) ([]byte, time.Duration, bool) {
			var n uint64
			if state != nil {
				n = binary.BigEndian.Uint64(state)
			}
			binary.BigEndian.PutUint64(next, n+1)
			return next, time.Minute, true
		}
	}
	b.Run("OneKey", func(b *testing.B) {
		s := memstore.New()
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			inc := newInc()
			for pb.Next() {
				if err := s.Update(ctx, "hot", inc); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("ManyKeys", func(b *testing.B) {
		s := memstore.New()
		ctx := context.Background()
		var worker atomic.Int64
		keys := make([][]string, runtime.GOMAXPROCS(0)*4)
		for w := range keys {
			for i := range 1024 {
				keys[w] = append(keys[w], "w"+strconv.Itoa(w)+"/"+strconv.Itoa(i))
			}
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			mine := keys[int(worker.Add(1)-1)%len(keys)]
			inc := newInc()
			i := 0
			for pb.Next() {
				if err := s.Update(ctx, mine[i%len(mine)], inc); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
