package tokenbucket

import (
	"slices"
	"testing"
)

// TestReplace follows ConfigurationReplacementSpecification (SEMANTICS §2).
// Most cases start from simple(3, 5ns), empty, replaced 3ns later: 9
// token·ns, so 1 token with an error of 4 (0.8 of the next).
func TestReplace(t *testing.T) {
	simple3 := []Bandwidth{greedyBW(3, 3, 5)}
	empty := State{{0, 0, 0}}
	type check struct {
		now  int64
		want int64 // Available
	}
	tests := []struct {
		name     string
		old      []Bandwidth
		st       State
		now      int64
		next     []Bandwidth
		strategy Strategy
		want     State
		later    []check // Available on the new state at later times
	}{
		// Error carried as (1000/5)·4 = 800; +4ns adds 240: a second token.
		{"as is to greedy", simple3, empty, 3, []Bandwidth{greedyBW(60, 60, 1000)}, AsIs,
			State{{3, 1, 800}}, []check{{6, 1}, {7, 2}}},
		{"as is to intervally drops the fraction", simple3, empty, 3, []Bandwidth{intervallyBW(60, 60, 1000)}, AsIs,
			State{{3, 1, 0}}, []check{{3 + 999, 1}, {3 + 1000, 60}}},
		{"additive", simple3, empty, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Additive,
			State{{3, 58, 800}}, []check{{6, 58}, {7, 59}}},
		// (1 + 4/5)·60/3 = 36 exactly: no error.
		{"proportionally", simple3, empty, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Proportionally,
			State{{3, 36, 0}}, []check{{3 + 16, 36}, {3 + 17, 37}}},
		{"reset", simple3, empty, 3, []Bandwidth{greedyBW(60, 60, 1000)}, ResetStrategy,
			State{{3, 60, 0}}, nil},
		{"reset with initial tokens", simple3, empty, 3, []Bandwidth{greedyBW(60, 60, 1000).withInitial(7)}, ResetStrategy,
			State{{3, 7, 0}}, nil},

		// Above capacity through ForceAddTokens: full after, whatever the new capacity.
		{"proportionally from above capacity", simple3, State{{0, 13, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Proportionally,
			State{{3, 60, 0}}, nil},
		{"proportionally from above capacity to smaller", simple3, State{{0, 13, 0}}, 3, []Bandwidth{greedyBW(2, 2, 5)}, Proportionally,
			State{{3, 2, 0}}, nil},
		{"proportionally from full", simple3, State{{0, 3, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Proportionally,
			State{{3, 60, 0}}, nil},

		// 6 per 8ns, empty, +3ns: 18 token·ns = 2.25 tokens. Half the
		// capacity: 1.125 = 1 token and 1/8 of 8ns.
		{"proportionally keeps the fraction", []Bandwidth{greedyBW(6, 6, 8)}, State{{0, 0, 0}}, 3, []Bandwidth{greedyBW(3, 3, 8)}, Proportionally,
			State{{3, 1, 1}}, nil},
		// -5 + 2.25 = -2.75 tokens; halved, -1.375 = -2 + 0.625 (5/8).
		{"proportionally floors a negative count", []Bandwidth{greedyBW(6, 6, 8)}, State{{0, -5, 0}}, 3, []Bandwidth{greedyBW(3, 3, 8)}, Proportionally,
			State{{3, -2, 5}}, nil},
		{"proportionally to intervally drops the fraction", []Bandwidth{greedyBW(6, 6, 8)}, State{{0, 0, 0}}, 3, []Bandwidth{intervallyBW(3, 3, 8)}, Proportionally,
			State{{3, 1, 0}}, nil},
		// 2.25·8/6 = 3 exactly: no error.
		// -MaxInt64·MaxInt64 tokens do not fit: the most negative int64.
		{"proportionally saturates a huge overdraft", []Bandwidth{greedyBW(1, 1, 1)}, State{{0, -maxI, 0}}, 0, []Bandwidth{greedyBW(maxI, 1, 1)}, Proportionally,
			State{{0, minI, 0}}, nil},
		{"proportionally scales up exactly", []Bandwidth{greedyBW(6, 6, 8)}, State{{0, 0, 0}}, 3, []Bandwidth{greedyBW(8, 8, 8)}, Proportionally,
			State{{3, 3, 0}}, nil},

		{"as is cut to a smaller capacity", []Bandwidth{greedyBW(100, 100, 1000)}, State{{0, 50, 300}}, 0, []Bandwidth{greedyBW(10, 10, 1000)}, AsIs,
			State{{0, 10, 0}}, nil},
		{"as is at exactly the new capacity", []Bandwidth{greedyBW(100, 100, 1000)}, State{{0, 10, 300}}, 0, []Bandwidth{greedyBW(10, 10, 1000)}, AsIs,
			State{{0, 10, 0}}, nil},
		// Period 5 → 12: the ratio 2.4 is floored to 2, error 4 → 8.
		{"as is floors the period ratio", simple3, empty, 3, []Bandwidth{greedyBW(60, 12, 12)}, AsIs,
			State{{3, 1, 8}}, nil},
		// Period 5 → 4: the ratio 0.8 is floored to 0; the fraction is lost.
		{"as is to a shorter period drops the fraction", simple3, empty, 3, []Bandwidth{greedyBW(60, 4, 4)}, AsIs,
			State{{3, 1, 0}}, nil},
		{"as is keeps an overdraft", simple3, State{{0, -7, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, AsIs,
			State{{3, -6, 800}}, nil},

		{"additive to a smaller capacity is as is", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 7, 30}}, 0, []Bandwidth{greedyBW(8, 8, 100)}, Additive,
			State{{0, 7, 30}}, nil},
		{"additive to a much smaller capacity", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 7, 30}}, 0, []Bandwidth{greedyBW(5, 5, 100)}, Additive,
			State{{0, 5, 0}}, nil},
		{"additive to the same capacity", []Bandwidth{greedyBW(10, 10, 100)}, State{{0, 7, 30}}, 0, []Bandwidth{greedyBW(10, 10, 100)}, Additive,
			State{{0, 7, 30}}, nil},
		{"additive from full", simple3, State{{0, 3, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Additive,
			State{{3, 60, 0}}, nil},
		{"additive from above capacity", simple3, State{{0, 13, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Additive,
			State{{3, 60, 0}}, nil},
		{"additive to intervally drops the fraction", simple3, empty, 3, []Bandwidth{intervallyBW(60, 60, 1000)}, Additive,
			State{{3, 58, 0}}, nil},
		{"additive to an overdraft", simple3, State{{0, -7, 0}}, 3, []Bandwidth{greedyBW(60, 60, 1000)}, Additive,
			State{{3, 51, 800}}, nil},

		// Matched bandwidths keep LastRefill: an intervally one keeps its grid.
		{"matched intervally keeps its grid", []Bandwidth{intervallyBW(100, 10, 100)}, State{{0, 0, 0}}, 150, []Bandwidth{intervallyBW(100, 10, 100)}, AsIs,
			State{{100, 10, 0}}, []check{{199, 10}, {200, 20}}},
	}
	for _, tt := range tests {
		for _, oldForm := range configForms(tt.old...) {
			for _, nextForm := range configForms(tt.next...) {
				t.Run(tt.name+"/"+oldForm.name+"-"+nextForm.name, func(t *testing.T) {
					st := slices.Clone(tt.st)
					got := Replace(oldForm.cfg, st, tt.now, nextForm.cfg, tt.strategy)
					if !slices.Equal(got, tt.want) {
						t.Fatalf("Replace(%+v, %d) = %+v, want %+v", tt.st, tt.now, got, tt.want)
					}
					for _, c := range tt.later {
						if res, _ := Apply(nextForm.cfg, got, c.now, Request{Op: OpAvailable}); res.Value != c.want {
							t.Errorf("Available at %d after Replace = %d, want %d", c.now, res.Value, c.want)
						}
					}
				})
			}
		}
	}
}

// TestReplaceMatching: bandwidths are matched by ID only; an absent ID
// matches an absent ID only while each side has at most one (SEMANTICS §2).
// The old bandwidths hold 1 token of 10, so a match keeps 1 under AsIs and a
// fresh bandwidth starts at its new capacity.
func TestReplaceMatching(t *testing.T) {
	bw := func(capacity int64) Bandwidth { return greedyBW(capacity, capacity, 1000) }
	tests := []struct {
		name     string
		old      []Bandwidth
		next     []Bandwidth
		asIs     []int64 // sizes after Replace with AsIs
		additive []int64 // with Additive: a matched 1 of 10 gains the capacity added
	}{
		{"one unnamed each side match", []Bandwidth{bw(10)}, []Bandwidth{bw(20)}, []int64{1}, []int64{11}},
		{"two unnamed old: nothing matches", []Bandwidth{bw(10), bw(10)}, []Bandwidth{bw(20), bw(30)}, []int64{20, 30}, []int64{20, 30}},
		{"two unnamed new: nothing matches", []Bandwidth{bw(10)}, []Bandwidth{bw(20), bw(30)}, []int64{20, 30}, []int64{20, 30}},
		{"two unnamed old, one new: no match", []Bandwidth{bw(10), bw(10)}, []Bandwidth{bw(20)}, []int64{20}, []int64{20}},
		{"named match whatever the position", []Bandwidth{bw(10).withID("a"), bw(10).withID("b")}, []Bandwidth{bw(20).withID("b"), bw(30).withID("c")},
			[]int64{1, 30}, []int64{11, 30}},
		{"unnamed and named swap places", []Bandwidth{bw(10), bw(10).withID("a")}, []Bandwidth{bw(20).withID("a"), bw(30)},
			[]int64{1, 1}, []int64{11, 21}},
		{"named still match beside two unnamed", []Bandwidth{bw(10), bw(10), bw(10).withID("a")}, []Bandwidth{bw(20).withID("a"), bw(30)},
			[]int64{1, 30}, []int64{11, 30}},
		{"unnamed does not match named", []Bandwidth{bw(10).withID("a")}, []Bandwidth{bw(20)}, []int64{20}, []int64{20}},
		{"named does not match unnamed", []Bandwidth{bw(10)}, []Bandwidth{bw(20).withID("a")}, []int64{20}, []int64{20}},
		{"named and unnamed both matched", []Bandwidth{bw(10).withID("a"), bw(10)}, []Bandwidth{bw(20).withID("a"), bw(30)},
			[]int64{1, 1}, []int64{11, 21}},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			name     string
			strategy Strategy
			want     []int64
		}{{"as is", AsIs, tt.asIs}, {"additive", Additive, tt.additive}} {
			t.Run(tt.name+"/"+c.name, func(t *testing.T) {
				old := NewConfig(slices.Clone(tt.old)...)
				st := New(old, 0)
				for i := range st {
					st[i].Size = 1
				}
				got := Replace(old, st, 0, NewConfig(slices.Clone(tt.next)...), c.strategy)
				sizes := make([]int64, len(got))
				for i := range got {
					sizes[i] = got[i].Size
				}
				if !slices.Equal(sizes, c.want) {
					t.Errorf("Replace sizes = %v, want %v", sizes, c.want)
				}
			})
		}
	}
}

// TestReplaceUnmatchedStartsFresh: an unmatched bandwidth starts as in a new
// bucket at now, adaptive and aligned rules included.
func TestReplaceUnmatchedStartsFresh(t *testing.T) {
	first := 1000 * min1
	old := NewConfig(greedyBW(10, 10, 100).withID("old"))
	st := State{{0, 2, 30}}
	now := first - 40*sec
	next := NewConfig(
		alignedBW(400, 400, min1, first, true).withID("new"),
		greedyBW(50, 5, 100).withInitial(4).withID("other"),
	)
	got := Replace(old, st, now, next, AsIs)
	want := State{{first - min1, 266, 0}, {now, 4, 0}}
	if !slices.Equal(got, want) {
		t.Errorf("Replace = %+v, want %+v", got, want)
	}
}
