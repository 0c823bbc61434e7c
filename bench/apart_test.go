package bench

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkKeyedApart is the keyed benchmark of a harness built apart from
// BenchmarkKeyed (issue 28), and the variants that explain where the two
// disagree. The keys are user:0 … user:999999 made by strconv (6 to 11
// bytes); each is called once, in order, before the timer starts, and the
// timed calls go to keys picked uniformly at random by a PRNG of a fixed
// seed, serially. The regimes and implementations are BenchmarkKeyed's
// (sluice's four fixed-state policies and sethvargo); floor-key is not a
// limiter but reads the key it is given, which is what picking it costs.
//
// The picks:
//
//   - pick=slice, the harness's: keys[rng.IntN(n)], the very strings the
//     limiter was given at insertion, so that a random 16-byte header and
//     the key's bytes are read from 32 MB, and a map finds its stored key
//     equal by pointer, without reading it;
//   - pick=clone: the same, from copies of the keys, so that a map reads
//     its stored key as it does for a request's key;
//   - pick=seq: copies laid out in pick order, read one after the other as
//     BenchmarkKeyed reads its keys.
//
// first-ns/op is the CPU time per call of the calls made before the timer,
// every key's first: the harness's allowing figure when its limit is one
// token per hour, where every timed call is rejected.
func BenchmarkKeyedApart(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	clones := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		clones[i] = strings.Clone(keys[i])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	picks := make([]int32, seqLen)
	var sb strings.Builder
	for i := range picks {
		picks[i] = int32(rng.IntN(n))
		sb.WriteString(keys[picks[i]])
	}
	laid := sb.String()
	seq := make([]string, seqLen)
	for i, off := 0, 0; i < len(seq); i++ {
		w := len(keys[picks[i]])
		seq[i], off = laid[off:off+w], off+w
	}
	impls := []keyedPeer{apartFloor}
	for _, p := range keyedPeers {
		if p.name != "sluice-compound" && p.name != "xrate-syncmap" && p.name != "throttled-memstore" {
			impls = append(impls, p)
		}
	}
	for _, pick := range []string{"slice", "clone", "seq"} {
		for _, r := range keyedRegimes {
			b.Run("pick="+pick+"/regime="+r.name, func(b *testing.B) {
				for _, p := range impls {
					b.Run("impl="+p.name, func(b *testing.B) {
						allow, stop := p.start(b, r)
						defer stop()
						cpu := cpuTime(b)
						for _, k := range keys {
							if _, err := allow(k); err != nil {
								b.Fatalf("allow(%q): %v", k, err)
							}
						}
						first := float64(cpuTime(b)-cpu) / n
						rng := rand.New(rand.NewPCG(1, 2))
						b.ReportAllocs()
						cpu = cpuTime(b)
						allowed, calls := 0, 0
						for b.Loop() {
							var k string
							switch pick {
							case "slice":
								k = keys[rng.IntN(n)]
							case "clone":
								k = clones[rng.IntN(n)]
							default:
								k = seq[calls&(seqLen-1)]
							}
							if ok, _ := allow(k); ok {
								allowed++
							}
							calls++
						}
						b.ReportMetric(float64(cpuTime(b)-cpu)/float64(calls), "cpu-ns/op")
						b.ReportMetric(float64(allowed)/float64(calls), "allowed/op")
						b.ReportMetric(first, "first-ns/op")
					})
				}
			})
		}
	}
}

// apartFloor is not a limiter: it reads the last byte of the key it is
// given.
var apartFloor = keyedPeer{"floor-key", func(testing.TB, keyedRegime) (func(string) (bool, error), func()) {
	return func(key string) (bool, error) { return key[len(key)-1] == 'x', nil }, func() {}
}}
