package bench

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// storeLimit is the limit of every implementation in the store benchmarks:
// GCRA (or its peers' equivalent) at storeRate per second with a burst of
// storeRate. It is far above what one machine can send, so every decision
// is allowed and writes a new state: each implementation takes its full
// read-modify-write path on every call. allowed/op shows it.
const storeRate = 1_000_000

// storeKeys returns n key names, "k:0" to "k:<n-1>".
func storeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k:" + strconv.Itoa(i)
	}
	return keys
}

// decide makes one decision on key and reports whether it was allowed.
type decide func(key string) (bool, error)

// runWorkers runs b.N decisions from exactly goroutines goroutines, each
// making its share (b.N/goroutines, the remainder spread over the first
// ones) one after another. Goroutine g starts at key g·len(keys)/goroutines
// and walks the keys round-robin, so with one key every call hits it and
// with many the goroutines rarely meet on one key. Each call's duration is
// recorded into a slice allocated before the timer starts.
//
// It reports decisions/s (b.N over the wall time of the whole run),
// p50-µs and p99-µs (of all calls' durations) and allowed/op, and fails
// the benchmark on the first error. The caller starts nothing it measures
// before runWorkers, which resets the timer.
func runWorkers(b *testing.B, goroutines int, keys []string, fn decide) {
	b.Helper()
	lat := make([][]time.Duration, goroutines)
	for g := range lat {
		n := b.N / goroutines
		if g < b.N%goroutines {
			n++
		}
		lat[g] = make([]time.Duration, n)
	}
	allowed := make([]int, goroutines)
	errs := make([]error, goroutines)
	var start sync.WaitGroup
	start.Add(1)
	var done sync.WaitGroup
	for g := range goroutines {
		done.Go(func() {
			start.Wait()
			k := g * len(keys) / goroutines
			for i := range lat[g] {
				t0 := time.Now()
				ok, err := fn(keys[k])
				lat[g][i] = time.Since(t0)
				if err != nil {
					errs[g] = fmt.Errorf("decision %d on %q: %w", i, keys[k], err)
					return
				}
				if ok {
					allowed[g]++
				}
				if k++; k == len(keys) {
					k = 0
				}
			}
		})
	}
	b.ResetTimer()
	t0 := time.Now()
	start.Done()
	done.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	var nAllowed int
	for _, a := range allowed {
		nAllowed += a
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(percentile(all, 0.50))/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(all, 0.99))/1e3, "p99-µs")
	b.ReportMetric(float64(nAllowed)/float64(b.N), "allowed/op")
}

// percentile returns the q-quantile of sorted by the nearest-rank method,
// 0 for no samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// warm makes one decision on every key, from up to 16 goroutines, so that
// the timed decisions are on keys that have state (and, for sluice, keys
// its state cache knows).
func warm(b *testing.B, keys []string, fn decide) {
	b.Helper()
	const workers = 16
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if _, err := fn(keys[i]); err != nil {
					errs[w] = fmt.Errorf("warm %q: %w", keys[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
