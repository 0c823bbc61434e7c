package resilience4j

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
	"testing"
)

const sec = int64(1e9)

func TestRefresh(t *testing.T) {
	c := Config{Limit: 5, Period: sec}
	tests := []struct {
		name string
		s    State
		now  int64
		want State
	}{
		{"same cycle keeps the permissions", State{Start: 100, Cycle: 0, Permissions: 2}, 100 + sec - 1, State{Start: 100, Cycle: 0, Permissions: 2}},
		{"cycles count from Start", State{Start: 100, Cycle: 0, Permissions: 2}, 100 + sec, State{Start: 100, Cycle: 1, Permissions: 5}},
		{"one cycle adds Limit up to Limit", State{Cycle: 3, Permissions: -2}, 4 * sec, State{Cycle: 4, Permissions: 3}},
		{"debt is repaid by cycles", State{Cycle: 3, Permissions: -12}, 6*sec + 1, State{Cycle: 6, Permissions: 3}},
		{"no accumulation beyond Limit", State{Cycle: 0, Permissions: 3}, 100 * sec, State{Cycle: 100, Permissions: 5}},
		{"permissions above a lowered Limit drop at the next cycle", State{Cycle: 0, Permissions: 8}, sec, State{Cycle: 1, Permissions: 5}},
		{"clock back to an earlier cycle changes nothing", State{Cycle: 7, Permissions: -3}, 2 * sec, State{Cycle: 7, Permissions: -3}},
		{"clock before Start changes nothing", State{Start: 10 * sec, Cycle: 0, Permissions: 1}, 0, State{Start: 10 * sec, Cycle: 0, Permissions: 1}},
		{"elapsed beyond int64 saturates", State{Start: math.MinInt64, Cycle: 0, Permissions: -7}, math.MaxInt64, State{Start: math.MinInt64, Cycle: math.MaxInt64 / sec, Permissions: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Refresh(tt.s, tt.now); got != tt.want {
				t.Errorf("Refresh(%+v, %d) = %+v, want %+v", tt.s, tt.now, got, tt.want)
			}
		})
	}
}

func TestRefreshOverflow(t *testing.T) {
	c := Config{Limit: math.MaxInt64 / 2, Period: 1}
	s := State{Permissions: math.MinInt64 + 1}
	want := State{Cycle: 10, Permissions: c.Limit}
	if got := c.Refresh(s, 10); got != want {
		t.Errorf("Refresh(%+v, 10) = %+v, want %+v", s, got, want)
	}
}

func TestWait(t *testing.T) {
	c := Config{Limit: 10, Period: sec}
	tests := []struct {
		name        string
		permissions int64
		now         int64
		n           int64
		want        int64
	}{
		{"enough permissions", 10, 0, 10, 0},
		{"one short waits for the next cycle", 0, 3 * sec / 10, 1, 7 * sec / 10},
		{"a full next cycle", 0, 3 * sec / 10, 10, 7 * sec / 10},
		{"25 from 0 needs two more cycles", 0, 3 * sec / 10, 25, 7*sec/10 + 2*sec},
		{"21 from 0", 0, 0, 21, 3 * sec},
		{"debt adds cycles", -15, 0, 1, 2 * sec},
		{"overflow is Never", math.MinInt64 + 1, 0, math.MaxInt64, Never},
		{"cycles overflow is Never", 0, 0, math.MaxInt64, Never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Permissions: tt.permissions}
			if got := c.Wait(s, tt.now, tt.n); got != tt.want {
				t.Errorf("Wait(p=%d, now=%d, n=%d) = %d, want %d", tt.permissions, tt.now, tt.n, got, tt.want)
			}
		})
	}
}

func TestAcquire(t *testing.T) {
	c := Config{Limit: 10, Period: sec}
	tests := []struct {
		name         string
		permissions  int64
		now, n       int64
		timeout      int64
		wantWait     int64
		wantReserved bool
		wantPerms    int64
	}{
		{"at once", 10, 0, 4, 0, 0, true, 6},
		{"reserved ahead goes negative", 0, 0, 5, 2 * sec, sec, true, -5},
		{"timeout equal to the wait succeeds", 0, 0, 1, sec, sec, true, -1},
		{"timeout one below the wait fails", 0, 0, 1, sec - 1, sec, false, 0},
		{"refused stores the refresh", 0, sec, 11, 0, sec, false, 10},
		{"Never is refused even with the longest timeout", 0, 0, math.MaxInt64, math.MaxInt64, Never, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := State{Permissions: tt.permissions}
			wait, ok := c.Acquire(&s, tt.now, tt.n, tt.timeout)
			if wait != tt.wantWait || ok != tt.wantReserved || s.Permissions != tt.wantPerms || s.NanosToWait != tt.wantWait {
				t.Errorf("Acquire(p=%d, now=%d, n=%d, timeout=%d) = (%d, %v), permissions %d, NanosToWait %d; want (%d, %v), permissions %d",
					tt.permissions, tt.now, tt.n, tt.timeout, wait, ok, s.Permissions, s.NanosToWait, tt.wantWait, tt.wantReserved, tt.wantPerms)
			}
		})
	}
}

func TestDrain(t *testing.T) {
	c := Config{Limit: 5, Period: sec}
	tests := []struct {
		name      string
		s         State
		now       int64
		wantTook  int64
		wantPerms int64
	}{
		{"current cycle", State{Permissions: 3}, 0, 3, 0},
		// Resilience4j drains the stale 3 and leaves 2.
		{"after idle cycles takes the refreshed count", State{Permissions: 3}, 2 * sec, 5, 0},
		// Resilience4j erases the debt to 0.
		{"debt stays", State{Permissions: -4}, 0, 0, -4},
		{"debt partly repaid stays", State{Permissions: -8}, sec, 0, -3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			if took := c.Drain(&s, tt.now); took != tt.wantTook || s.Permissions != tt.wantPerms {
				t.Errorf("Drain(%+v, %d) = %d, permissions %d; want %d, %d", tt.s, tt.now, took, s.Permissions, tt.wantTook, tt.wantPerms)
			}
		})
	}
}

// TestCancel gives back reservations, alone and with later ones: 5
// permits per 1s cycle, counted from 0.
func TestCancel(t *testing.T) {
	c := Config{Limit: 5, Period: sec}
	acquire := func(s *State, now, n int64) (before, after State) {
		t.Helper()
		before = *s
		if _, ok := c.Acquire(s, now, n, 10*sec); !ok {
			t.Fatalf("Acquire(%+v, %d, %d) refused", before, now, n)
		}
		return before, *s
	}
	t.Run("alone, exactly", func(t *testing.T) {
		s := New(c, 0)
		acquire(&s, 0, 5)
		prior := s
		before, after := acquire(&s, 100, 3) // due at 1s
		c.Cancel(&s, 200, before, after, 3)
		if s != prior {
			t.Errorf("Cancel = %+v, want %+v", s, prior)
		}
	})
	t.Run("a later reservation keeps its permits", func(t *testing.T) {
		s := New(c, 0)
		acquire(&s, 0, 5)
		before, after := acquire(&s, 0, 5) // due at 1s, repaid then
		acquire(&s, 0, 3)                  // due at 2s
		c.Cancel(&s, 0, before, after, 5)
		if s.Permissions != -8+2 {
			t.Errorf("Cancel of 5 with 3 acquired after them: permissions %d, want -6", s.Permissions)
		}
	})
	t.Run("a later reservation repaid in the same cycle", func(t *testing.T) {
		s := New(c, 0)
		acquire(&s, 0, 3)
		before, after := acquire(&s, 0, 3) // due at 1s, leaves 4 of that cycle
		acquire(&s, 0, 2)                  // due at 1s too, on the permits of that cycle
		// Giving back all 3 would leave 5 permits in cycle 1 besides the
		// 2 the later caller uses then.
		c.Cancel(&s, 0, before, after, 3)
		if s.Permissions != -2 {
			t.Errorf("Cancel: permissions %d, want -2", s.Permissions)
		}
	})
	t.Run("capped at Limit", func(t *testing.T) {
		s := State{Permissions: 2} // a permit came back since
		c.Cancel(&s, 0, State{Permissions: 4}, State{Permissions: 1}, 3)
		if s.Permissions != 5 {
			t.Errorf("Cancel: permissions %d, want 5", s.Permissions)
		}
	})
	t.Run("above a lowered Limit stays", func(t *testing.T) {
		s := State{Permissions: 8}
		c.Cancel(&s, 0, State{Permissions: 9}, State{Permissions: 7}, 2)
		if s.Permissions != 8 {
			t.Errorf("Cancel: permissions %d, want 8", s.Permissions)
		}
	})
}

// javaModel is AtomicRateLimiter's calculateNextState transcribed in
// arbitrary precision, with sluice's guard for a clock going back.
type javaModel struct {
	start, cycle, perms *big.Int
}

var maxInt64 = big.NewInt(math.MaxInt64)

// divTrunc divides as Java does, toward zero.
func divTrunc(a, b *big.Int) *big.Int { return new(big.Int).Quo(a, b) }

func (m *javaModel) acquire(c Config, now, n, timeout int64) (int64, bool) {
	limit, period := big.NewInt(c.Limit), big.NewInt(c.Period)
	currentNanos := new(big.Int).Sub(big.NewInt(now), m.start)
	currentCycle := divTrunc(currentNanos, period)
	if currentCycle.Cmp(m.cycle) > 0 {
		elapsed := new(big.Int).Sub(currentCycle, m.cycle)
		acc := new(big.Int).Mul(elapsed, limit)
		p := new(big.Int).Add(m.perms, acc)
		if p.Cmp(limit) > 0 {
			p.Set(limit)
		}
		m.cycle, m.perms = currentCycle, p
	}
	wait := new(big.Int)
	// sluice's bound: n - permissions must fit in int64, so that the
	// permissions after a reservation do.
	if new(big.Int).Sub(big.NewInt(n), m.perms).Cmp(maxInt64) > 0 {
		return Never, false
	}
	if m.perms.Cmp(big.NewInt(n)) < 0 {
		// nextCycleTimeInNanos - currentNanos, from the active cycle.
		toNext := new(big.Int).Add(m.cycle, big.NewInt(1))
		toNext.Mul(toNext, period).Sub(toNext, currentNanos)
		// divCeil(-(permissionsAtTheStartOfNextCycle - permits), limit)
		x := new(big.Int).Add(m.perms, limit)
		x.Sub(big.NewInt(n), x)
		full := divTrunc(x.Add(x, limit).Sub(x, big.NewInt(1)), limit)
		wait.Mul(full, period).Add(wait, toNext)
	}
	if wait.Cmp(maxInt64) >= 0 {
		return Never, false
	}
	if wait.Cmp(big.NewInt(timeout)) <= 0 {
		m.perms.Sub(m.perms, big.NewInt(n))
		return wait.Int64(), true
	}
	return wait.Int64(), false
}

// fraction returns k/16 of period, or up to about 16 periods, saturated.
func fraction(period int64, k byte) int64 {
	hi, lo := bits.Mul64(uint64(period/16+1), uint64(k))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// FuzzAcquire checks Acquire against Resilience4j's formulas computed in
// arbitrary precision, and that Permissions never exceeds Limit.
func FuzzAcquire(f *testing.F) {
	f.Add(int64(10), int64(1e9), int64(0), []byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(int64(3), int64(7), int64(-5), []byte{200, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 127, 9})
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64), []byte{255, 255, 255, 255, 255, 255, 255, 127, 2, 0, 0, 0, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, limit, period, start int64, ops []byte) {
		if limit < 1 || period < 1 {
			return
		}
		c := Config{Limit: limit, Period: period}
		s := New(c, start)
		m := &javaModel{start: big.NewInt(start), cycle: new(big.Int), perms: big.NewInt(limit)}
		now := start
		for len(ops) >= 17 {
			adv := int64(binary.LittleEndian.Uint64(ops))
			bound := uint64(limit)
			if bound <= math.MaxInt64/3 {
				bound *= 3 // asks for up to three cycles' worth
			}
			n := int64(binary.LittleEndian.Uint64(ops[8:])%bound) + 1
			timeout := fraction(period, ops[16])
			ops = ops[17:]
			// Keep now - start within int64, where the model and the
			// saturating code agree.
			if next, ok := add(now, adv); ok {
				if _, ok := sub(next, start); ok {
					now = next
				}
			}
			wait, ok := c.Acquire(&s, now, n, timeout)
			mw, mok := m.acquire(c, now, n, timeout)
			if wait != mw || ok != mok || s.Permissions != m.perms.Int64() {
				t.Fatalf("Acquire(now=%d, n=%d, timeout=%d) = (%d, %v), permissions %d; model (%d, %v), %v",
					now, n, timeout, wait, ok, s.Permissions, mw, mok, m.perms)
			}
			if s.Permissions > limit {
				t.Fatalf("permissions %d > limit %d", s.Permissions, limit)
			}
		}
	})
}
