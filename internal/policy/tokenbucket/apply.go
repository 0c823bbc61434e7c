package tokenbucket

// Op names an operation of the state machine.
type Op uint8

// The operations. Each refills every bandwidth at now first.
const (
	OpAvailable                    Op = iota + 1 // Value: available tokens
	OpTryConsume                                 // Consumed
	OpTryConsumeAndReturnRemaining               // Consumed, Remaining, WaitForRefill, WaitForReset
	OpEstimate                                   // Consumed (can be), Remaining, WaitForRefill
	OpConsumeAsMuchAsPossible                    // Value: tokens consumed, at most Tokens
	OpConsumeIgnoringRateLimits                  // Value: the violation in ns; Code on a Never wait
	OpReserve                                    // Consumed, Value: the wait; rejected past MaxWait
	OpAddTokens                                  // no value
	OpForceAddTokens                             // no value
	OpReset                                      // no value
	OpReturnTokens                               // a cancelled reservation: as OpAddTokens
)

// Code is an argument error found by Apply. Apply reports changed=false
// with one, so the caller stores nothing (st may hold a refill by then).
type Code uint8

// The argument errors.
const (
	OK                  Code = iota
	NonPositiveTokens        // Tokens ≤ 0
	NonPositiveMaxWait       // MaxWait ≤ 0 for OpReserve
	ReservationOverflow      // the wait for Tokens is Never, so they cannot be reserved
	UnknownOp                // Op is none of the operations
)

// Request is one call of an operation.
type Request struct {
	Op      Op
	Tokens  int64 // tokens to consume, estimate or add; the limit for OpConsumeAsMuchAsPossible
	MaxWait int64 // nanoseconds, for OpReserve; Never means no limit
}

// Result is what an operation returned. Only the fields its Op names are set.
type Result struct {
	Code          Code
	Consumed      bool
	Value         int64
	Remaining     int64 // clamped at 0, as Bucket4j's probes are
	WaitForRefill int64 // ns until the tokens asked for are there (0 when consumed)
	WaitForReset  int64 // ns until the bucket is full
}

// Apply runs req on st at now. st is changed in place, including by the
// refill that every operation starts with; changed reports whether the
// operation must be stored. When it is false the caller should keep the
// state it had before, as Bucket4j does: a rejected or read-only call stores
// nothing, which matters only when the clock goes backwards.
func Apply(cfg *Config, st State, now int64, req Request) (res Result, changed bool) {
	n := req.Tokens
	switch req.Op {
	case OpAvailable, OpReset:
	case OpReserve:
		if req.MaxWait <= 0 {
			return Result{Code: NonPositiveMaxWait}, false
		}
		fallthrough
	case OpTryConsume, OpTryConsumeAndReturnRemaining, OpEstimate, OpConsumeAsMuchAsPossible,
		OpConsumeIgnoringRateLimits, OpAddTokens, OpForceAddTokens, OpReturnTokens:
		if n <= 0 {
			return Result{Code: NonPositiveTokens}, false
		}
	default:
		return Result{Code: UnknownOp}, false
	}
	Refill(cfg, st, now)
	switch req.Op {
	case OpAvailable:
		res.Value = Available(st)
		return res, false
	case OpTryConsume:
		if n > Available(st) {
			return res, false
		}
		Consume(st, n)
		res.Consumed = true
		return res, true
	case OpTryConsumeAndReturnRemaining:
		avail := Available(st)
		if n > avail {
			res.Remaining = max(avail, 0)
			res.WaitForRefill = Delay(cfg, st, n, now, true)
			res.WaitForReset = TimeToFull(cfg, st, now)
			return res, false
		}
		Consume(st, n)
		res.Consumed = true
		res.Remaining = max(avail-n, 0)
		res.WaitForReset = TimeToFull(cfg, st, now)
		return res, true
	case OpEstimate:
		avail := Available(st)
		res.Remaining = max(avail, 0)
		if n > avail {
			res.WaitForRefill = Delay(cfg, st, n, now, true)
			return res, false
		}
		res.Consumed = true
		return res, false
	case OpConsumeAsMuchAsPossible:
		// Bucket4j before 8.6 (#417) returned a negative count here when the
		// bucket was overdrawn, and added tokens; nothing is taken instead.
		take := min(n, Available(st))
		if take <= 0 {
			return res, false
		}
		Consume(st, take)
		res.Value = take
		res.Consumed = true
		return res, true
	case OpConsumeIgnoringRateLimits:
		d := Delay(cfg, st, n, now, false)
		if d == Never {
			return Result{Code: ReservationOverflow}, false
		}
		Consume(st, n)
		res.Value = d
		res.Consumed = true
		return res, true
	case OpReserve:
		d := Delay(cfg, st, n, now, false)
		if d == Never {
			if req.MaxWait == Never {
				return Result{Code: ReservationOverflow}, false
			}
			res.Value = Never
			return res, false
		}
		if d > req.MaxWait {
			res.Value = d
			return res, false
		}
		Consume(st, n)
		res.Value = d
		res.Consumed = true
		return res, true
	case OpAddTokens, OpReturnTokens:
		AddTokens(cfg, st, n)
		return res, true
	case OpForceAddTokens:
		ForceAddTokens(st, n)
		return res, true
	case OpReset:
		Reset(cfg, st)
		return res, true
	}
	return Result{Code: UnknownOp}, false
}
