package smooth

import "math"

// guava is the state of Guava's SmoothRateLimiter (SmoothBursty or
// SmoothWarmingUp) and its arithmetic, transcribed operation for operation
// from com.google.common.util.concurrent.SmoothRateLimiter so that every
// wait comes out as Guava's, to the microsecond.
//
// This file holds the package's only floating-point arithmetic. Guava
// computes in doubles and truncates waits to whole microseconds;
// exact rational arithmetic differs from it in the last microsecond in
// about one operation in a thousand (see the package doc), so the doubles
// are kept. Go's float64 is IEEE 754 binary64, as Java's double, with the
// same rounding; every product is converted explicitly with float64(...)
// so that no compiler fuses it into a multiply-add (which Java never does).
//
// Time is microseconds since the limiter's creation. guava is not safe for
// concurrent use; its owner holds a lock.
type guava struct {
	storedPermits        float64
	maxPermits           float64
	stableIntervalMicros float64
	nextFreeTicketMicros int64 // may be in the past or the future

	warm bool // SmoothWarmingUp; SmoothBursty otherwise

	// SmoothBursty.
	maxBurstSeconds float64

	// SmoothWarmingUp.
	warmupPeriodMicros int64
	coldFactor         float64
	slope              float64
	thresholdPermits   float64
}

// setRate is RateLimiter.setRate without its check: permitsPerSecond > 0
// and not NaN.
func (g *guava) setRate(permitsPerSecond float64, nowMicros int64) {
	g.resync(nowMicros)
	g.stableIntervalMicros = 1e6 / permitsPerSecond
	if g.warm {
		g.setRateWarmingUp()
	} else {
		g.setRateBursty(permitsPerSecond)
	}
}

// rate is RateLimiter.getRate.
func (g *guava) rate() float64 { return 1e6 / g.stableIntervalMicros }

func (g *guava) setRateBursty(permitsPerSecond float64) {
	oldMaxPermits := g.maxPermits
	g.maxPermits = float64(g.maxBurstSeconds * permitsPerSecond)
	switch {
	case math.IsInf(oldMaxPermits, 1):
		g.storedPermits = g.maxPermits
	case oldMaxPermits == 0:
		g.storedPermits = 0 // initial state
	default:
		g.storedPermits = float64(g.storedPermits*g.maxPermits) / oldMaxPermits
	}
}

func (g *guava) setRateWarmingUp() {
	oldMaxPermits := g.maxPermits
	stable := g.stableIntervalMicros
	warmup := float64(g.warmupPeriodMicros)
	coldIntervalMicros := float64(stable * g.coldFactor)
	g.thresholdPermits = float64(0.5*warmup) / stable
	g.maxPermits = g.thresholdPermits + float64(2.0*warmup)/(stable+coldIntervalMicros)
	g.slope = (coldIntervalMicros - stable) / (g.maxPermits - g.thresholdPermits)
	switch {
	case math.IsInf(oldMaxPermits, 1):
		g.storedPermits = 0
	case oldMaxPermits == 0:
		g.storedPermits = g.maxPermits // initial state is cold
	default:
		g.storedPermits = float64(g.storedPermits*g.maxPermits) / oldMaxPermits
	}
}

// resync stores the permits idle time has brought, up to maxPermits, when
// nextFreeTicketMicros is in the past.
//
// Unlike Guava, it stores nothing when maxPermits is 0 (a warm-up period of
// 0): Guava then divides by a cool-down interval of 0/0 = NaN, its stored
// permits become NaN and every later acquire is free.
func (g *guava) resync(nowMicros int64) {
	if nowMicros <= g.nextFreeTicketMicros {
		return
	}
	if g.maxPermits > 0 {
		newPermits := float64(nowMicros-g.nextFreeTicketMicros) / g.coolDownIntervalMicros()
		g.storedPermits = math.Min(g.maxPermits, g.storedPermits+newPermits)
	}
	g.nextFreeTicketMicros = nowMicros
}

// canAcquire reports whether a request at nowMicros would get its ticket
// within timeoutMicros (≥ 0); equality succeeds.
func (g *guava) canAcquire(nowMicros, timeoutMicros int64) bool {
	return g.nextFreeTicketMicros-timeoutMicros <= nowMicros
}

// reserve takes permits (> 0) at nowMicros and returns how long the caller
// must wait for them, in microseconds. The wait is that of the previous
// request: a request is never delayed by its own size.
func (g *guava) reserve(permits, nowMicros int64) int64 {
	return max(g.reserveEarliestAvailable(permits, nowMicros)-nowMicros, 0)
}

func (g *guava) reserveEarliestAvailable(permits, nowMicros int64) int64 {
	g.resync(nowMicros)
	returnValue := g.nextFreeTicketMicros
	required := float64(permits)
	storedPermitsToSpend := math.Min(required, g.storedPermits)
	freshPermits := required - storedPermitsToSpend
	// Guava adds these two longs without saturating; sluice saturates.
	waitMicros := saturatedAdd(g.storedPermitsToWaitTime(g.storedPermits, storedPermitsToSpend),
		javaLong(float64(freshPermits*g.stableIntervalMicros)))
	g.nextFreeTicketMicros = saturatedAdd(g.nextFreeTicketMicros, waitMicros)
	g.storedPermits -= storedPermitsToSpend
	return returnValue
}

// storedPermitsToWaitTime is the cost, in microseconds, of taking
// permitsToTake of storedPermits: nothing for SmoothBursty; for
// SmoothWarmingUp the integral of the ramp above thresholdPermits (the
// trapezoid between permitsToTime of both ends) plus stableIntervalMicros
// per permit below it.
func (g *guava) storedPermitsToWaitTime(storedPermits, permitsToTake float64) int64 {
	if !g.warm {
		return 0
	}
	availablePermitsAboveThreshold := storedPermits - g.thresholdPermits
	var micros int64
	if availablePermitsAboveThreshold > 0 {
		permitsAboveThresholdToTake := math.Min(availablePermitsAboveThreshold, permitsToTake)
		length := g.permitsToTime(availablePermitsAboveThreshold) +
			g.permitsToTime(availablePermitsAboveThreshold-permitsAboveThresholdToTake)
		micros = javaLong(float64(permitsAboveThresholdToTake*length) / 2.0)
		permitsToTake -= permitsAboveThresholdToTake
	}
	return saturatedAdd(micros, javaLong(float64(g.stableIntervalMicros*permitsToTake)))
}

func (g *guava) permitsToTime(permits float64) float64 {
	return g.stableIntervalMicros + float64(permits*g.slope)
}

func (g *guava) coolDownIntervalMicros() float64 {
	if g.warm {
		return float64(g.warmupPeriodMicros) / g.maxPermits
	}
	return g.stableIntervalMicros
}

// javaLong converts f as Java's (long) cast does: toward zero, NaN to 0,
// and saturating at the int64 bounds (where Go's conversion is undefined).
func javaLong(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= 0x1p63:
		return math.MaxInt64
	case f <= -0x1p63:
		return math.MinInt64
	}
	return int64(f)
}

// saturatedAdd is Guava's LongMath.saturatedAdd.
func saturatedAdd(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}
