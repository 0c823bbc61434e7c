package compound

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/policy/fixedwindow"
	"github.com/sluicehq/sluice/internal/policy/gcra"
	"github.com/sluicehq/sluice/internal/policy/nolimit"
	"github.com/sluicehq/sluice/internal/policy/policytest"
	"github.com/sluicehq/sluice/internal/policy/shaper"
	"github.com/sluicehq/sluice/internal/policy/slidinglog"
	"github.com/sluicehq/sluice/internal/policy/slidingwindow"
	"github.com/sluicehq/sluice/internal/policy/tokenbucket"
)

// wordConfigs are compounds whose members all keep words: with and
// without reservations, with a member of no words, with a bucket of two
// bandwidths, and one of each single-state member.
func wordConfigs() []Config {
	leaky := tokenbucket.NewSingle(tokenbucket.Bandwidth{Capacity: 5, RefillTokens: 2, Period: 10, Initial: 5}, false)
	intervally := tokenbucket.NewSingle(tokenbucket.Bandwidth{Capacity: 4, RefillTokens: 4, Period: 40, Initial: 4, Intervally: true}, true)
	return []Config{
		windowAndSpacer(),
		{Members: []policy.Erased{
			policy.Erase(fixedwindow.Config{Limit: 4, Interval: 20}),
			policy.Erase[tokenbucket.BandwidthState](leaky),
		}},
		{Members: []policy.Erased{
			policy.Erase(gcra.Config{Limit: 3, Rate: 2, Period: 15}),
			policy.Erase(nolimit.Config{}),
			policy.Erase[tokenbucket.BandwidthState](intervally),
		}},
		{Members: []policy.Erased{
			policy.Erase(slidingwindow.Config{Limit: 5, Interval: 30}),
			policy.Erase(fixedwindow.Config{Limit: 2, Interval: 7}),
		}},
		{Members: []policy.Erased{
			policy.Erase[tokenbucket.State](tokenbucket.NewMulti(tokenbucket.NewConfig(
				tokenbucket.Bandwidth{Capacity: 6, RefillTokens: 6, Period: 60, Initial: 6},
				tokenbucket.Bandwidth{Capacity: 2, RefillTokens: 1, Period: 8, Initial: 1},
			))),
			policy.Erase(gcra.Config{Limit: 3, Rate: 1, Period: 5}),
		}},
		{Members: []policy.Erased{
			policy.Erase(fixedwindow.Config{Limit: 6, Interval: 50}),
			policy.Erase(shaper.Config{Amount: 2, Interval: 9, MaxQueue: 3}),
			policy.Erase(gcra.Config{Limit: 4, Rate: 3, Period: 20}),
			policy.Erase(slidingwindow.Config{Limit: 8, Interval: 60}),
		}},
	}
}

func mustWords[A any, P Array[A]](t testing.TB, c Config) Words[A, P] {
	t.Helper()
	w, ok := NewWords[A, P](c)
	if !ok {
		t.Fatalf("NewWords(%d members) refused", len(c.Members))
	}
	return w
}

// TestWordsContract runs the contract's suite on the word form.
func TestWordsContract(t *testing.T) {
	cs := wordConfigs()
	policytest.Run(t, mustWords[W4](t, cs[0]))
	policytest.Run(t, mustWords[W5](t, cs[1]), mustWords[W5](t, cs[3]))
	policytest.Run(t, mustWords[W8](t, cs[2]))
	policytest.Run(t, mustWords[W8](t, cs[4]))
	policytest.Run(t, mustWords[W12](t, cs[5]))
}

func TestNewWords(t *testing.T) {
	tests := []struct {
		name  string
		c     Config
		words int
		ok    bool
	}{
		{"no member", Config{}, 0, true},
		{"window and spacer", windowAndSpacer(), 4, true},
		{"sliding log", Config{Members: []policy.Erased{policy.Erase(slidinglog.Config{Limit: 3, Interval: 15})}}, 0, false},
		{"a compound", Config{Members: []policy.Erased{policy.Erase(windowAndSpacer())}}, 0, false},
		{"65 members", Config{Members: make([]policy.Erased, 65)}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if words, ok := WordsOf(tt.c); words != tt.words || ok != tt.ok {
				t.Errorf("WordsOf = %d, %v, want %d, %v", words, ok, tt.words, tt.ok)
			}
		})
	}
	if _, ok := NewWords[W3](windowAndSpacer()); ok {
		t.Error("NewWords[W3] of 4 words: ok, want refused")
	}
	if _, ok := NewWords[W4](windowAndSpacer()); !ok {
		t.Error("NewWords[W4] of 4 words: refused")
	}
}

// pair is one key run through both forms of a compound, side by side.
type pair struct {
	c        Config
	w        Words[W16, *W16]
	s        State
	ws       WordState[W16]
	exists   bool
	receipts []*policy.Receipt
}

func newWordPair(t testing.TB, c Config) *pair {
	return &pair{c: c, w: mustWords[W16](t, c)}
}

// step runs one operation on both forms and compares their answers and
// their states' encodings. op mod 4 picks Consume, Reserve, Peek or the
// Undo of an earlier reservation (the one at index n among those kept).
// A state past its ExpiresAt is dropped first, as a keyed table does.
func (p *pair) step(t testing.TB, op byte, now, n, maxWait int64) {
	t.Helper()
	if p.exists && p.c.ExpiresAt(&p.s) <= now {
		if at := p.w.ExpiresAt(&p.ws); at > now {
			t.Fatalf("ExpiresAt: %d for the parts, %d for the words", p.c.ExpiresAt(&p.s), at)
		}
		p.drop()
	}
	var before []byte
	if p.exists {
		before = p.c.AppendState(nil, &p.s)
	}
	var (
		got, wgot         policy.Result
		changed, wchanged bool
	)
	switch op % 4 {
	case 0:
		got, changed = policytest.Decide(t, p.c, &p.s, p.exists, now, n)
		wgot, wchanged = policytest.Decide(t, p.w, &p.ws, p.exists, now, n)
	case 1:
		got, changed = p.c.Reserve(&p.s, p.exists, now, n, maxWait)
		wgot, wchanged = p.w.Reserve(&p.ws, p.exists, now, n, maxWait)
		if got.Allowed && changed {
			p.receipts = append(p.receipts, policy.NewReceipt(now, n, got.Wait, before, p.c.AppendState(nil, &p.s)))
		}
	case 2:
		got = p.c.Peek(&p.s, p.exists, now, n)
		wgot = p.w.Peek(&p.ws, p.exists, now, n)
	case 3:
		if len(p.receipts) == 0 {
			return
		}
		r := p.receipts[uint64(n)%uint64(len(p.receipts))]
		out := policy.Undo[State](p.c, &p.s, p.exists, now, r)
		wout := policy.Undo[WordState[W16]](p.w, &p.ws, p.exists, now, r)
		if out != wout {
			t.Fatalf("Undo(now=%d) = %v for the parts, %v for the words", now, out, wout)
		}
		if out == policy.Dropped {
			p.drop()
		}
		changed, wchanged = out == policy.Changed, out == policy.Changed
	}
	if got != wgot || changed != wchanged {
		t.Fatalf("op %d(now=%d, n=%d, maxWait=%d) from %v = %+v, %v for the parts; %+v, %v for the words",
			op%4, now, n, maxWait, before, got, changed, wgot, wchanged)
	}
	p.exists = p.exists || changed
	if !p.exists {
		return
	}
	enc, wenc := p.c.AppendState(nil, &p.s), p.w.AppendState(nil, &p.ws)
	if !bytes.Equal(enc, wenc) {
		t.Fatalf("op %d(now=%d, n=%d, maxWait=%d) from %v: state %v for the parts, %v for the words",
			op%4, now, n, maxWait, before, enc, wenc)
	}
	if got, want := p.w.ExpiresAt(&p.ws), p.c.ExpiresAt(&p.s); got != want {
		t.Fatalf("ExpiresAt = %d for the words, %d for the parts", got, want)
	}
	var back WordState[W16]
	if err := p.w.DecodeState(wenc, &back); err != nil || !bytes.Equal(p.w.AppendState(nil, &back), wenc) {
		t.Fatalf("DecodeState(%v): %v, encodes back as %v", wenc, err, p.w.AppendState(nil, &back))
	}
}

// drop forgets the key in both forms.
func (p *pair) drop() {
	p.s, p.ws, p.exists = State{}, WordState[W16]{}, false
}

// TestWordsMatchConfig runs random traffic, reservations and their undoing
// through both forms of each compound: the same answers, the same states.
func TestWordsMatchConfig(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range wordConfigs() {
		p := newWordPair(t, c)
		now := int64(0)
		for range 5_000 {
			now += rng.Int64N(12) - 2
			n := 1 + rng.Int64N(4)
			maxWait := rng.Int64N(120) - 2
			p.step(t, byte(rng.IntN(4)), now, n, maxWait)
		}
	}
}

// FuzzWordsMatchConfig runs arbitrary operations, times and token counts,
// valid or not, through both forms of a compound: the same answers, the
// same states. Steps are as FuzzDecisions's, but op mod 4, where 3 is the
// Undo of an earlier reservation.
func FuzzWordsMatchConfig(f *testing.F) {
	f.Add(uint8(0), fuzzSeed(
		fuzzStep(0, 0, 1, 0), fuzzStep(0, 5, 1, 0), fuzzStep(1, 0, 1, 50), fuzzStep(1, 0, 1, 50), fuzzStep(3, 2, 0, 0), fuzzStep(1, 15, 2, 100), fuzzStep(2, 25, 1, 0)))
	f.Add(uint8(1), fuzzSeed(
		fuzzStep(0, math.MinInt64, 2, 0), fuzzStep(1, math.MaxInt64, math.MaxInt64, math.MaxInt64), fuzzStep(3, 0, 1, 0)))
	f.Add(uint8(4), fuzzSeed(
		fuzzStep(1, math.MaxInt64, 1, math.MaxInt64), fuzzStep(0, math.MinInt64, 1, 0), fuzzStep(1, 0, 0, -1), fuzzStep(7, 0, 0, 0)))
	configs := wordConfigs()
	f.Fuzz(func(t *testing.T, which uint8, steps []byte) {
		p := newWordPair(t, configs[int(which)%len(configs)])
		eachStep(steps, func(op byte, now, n, maxWait int64) { p.step(t, op, now, n, maxWait) })
	})
}

// FuzzWordsDecodeState: policytest's checks of a decoder, on the word
// form, and states that decode in one form decode in the other.
func FuzzWordsDecodeState(f *testing.F) {
	f.Add([]byte{1, 9, 8, 1, 1, 0, 2, 8, 1, 5, 20, 0})
	f.Add([]byte{1, 9, 0, 0})
	f.Add([]byte{1, 9, 1, 0, 4, 1, 5, 2, 0})
	c := windowAndSpacer()
	w := mustWords[W4](f, c)
	f.Fuzz(func(t *testing.T, src []byte) {
		s := policytest.DecodeState(t, w, src)
		var parts State
		if err := c.DecodeState(src, &parts); (err == nil) != (s != nil) {
			t.Fatalf("DecodeState(%v): %v for the parts, %v for the words", src, err, s != nil)
		}
	})
}

// steadyWords is steady's compound in the word form.
func steadyWords(t testing.TB) (Words[W4, *W4], *WordState[W4], int64) {
	c, _, now := steady()
	return mustWords[W4](t, c), &WordState[W4]{}, now
}

func TestWordsAllocs(t *testing.T) {
	c, s, now := steadyWords(t)
	noAllocs(t, policy.Machine[WordState[W4]](c), s, now, true)
}

// BenchmarkWordsConsume is BenchmarkConsume on the word form.
func BenchmarkWordsConsume(b *testing.B) {
	c, s, now := steadyWords(b)
	c.Consume(s, false, now, 1)
	b.ReportAllocs()
	for b.Loop() {
		now += 10
		if res, _ := c.Consume(s, true, now, 1); !res.Allowed {
			b.Fatal("rejected")
		}
	}
}
