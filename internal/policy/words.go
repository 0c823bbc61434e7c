package policy

import (
	"math"
	"reflect"
	"unsafe"
)

// WordCodec is implemented by a Machine[S] whose state is a fixed number
// of int64 words, so that a caller holding the states of several machines
// side by side (a compound policy in memory) can keep them as words, with
// no encoding and no allocation per state, rather than as bytes.
//
// PutWords and GetWords are each other's inverse: GetWords(s, w) after
// PutWords(w, s) gives back *s exactly. Neither checks the state: the
// words are only ever ones PutWords wrote.
type WordCodec[S any] interface {
	// Words is the number of words of a state; the same for every state of
	// the machine.
	Words() int
	// PutWords writes *s into w[:Words()].
	PutWords(w []int64, s *S)
	// GetWords sets *s from w[:Words()].
	GetWords(s *S, w []int64)
}

// WordMachine is an Erased whose states can also be kept as words: Erase
// returns one for a machine that implements WordCodec.
//
// The word methods take a state as w, of Words() words, and have: whether
// w holds a state at all. As for Erased, a state past its ExpiresAt at the
// call's now is no state. The methods that may change the state write the
// new one over w when they report a change, and leave w as it was
// otherwise.
type WordMachine interface {
	Erased
	// Words is the number of words of a state.
	Words() int
	// ConsumeWords is Consume on a state held as words. It also returns
	// the ExpiresAt of the state before the call, math.MinInt64 when w
	// held no live state at now, which the call had to read anyway and a
	// compound's rejection reports.
	ConsumeWords(w []int64, have bool, now, n int64) (d Decision, changed bool, expiresAt int64)
	// ReserveWords is Reserve on a state held as words, with expiresAt as
	// for ConsumeWords.
	ReserveWords(w []int64, have bool, now, n, maxWait int64) (res Result, changed bool, expiresAt int64)
	// PeekWords is Peek on a state held as words, with expiresAt as for
	// ConsumeWords.
	PeekWords(w []int64, have bool, now, n int64) (res Result, expiresAt int64)
	// CancelWords gives back the reservation r, as Undo does, writing the
	// state over w when the outcome is Changed; at Dropped the key is back
	// to no state.
	CancelWords(w []int64, have bool, now int64, r *Receipt) Outcome
	// ExpiresAtWords is ExpiresAt for a state held as words, math.MinInt64
	// for no state.
	ExpiresAtWords(w []int64, have bool) int64
	// AppendWords appends the encoding of the state w, as the machine's
	// AppendState writes it.
	AppendWords(dst []byte, w []int64) []byte
	// DecodeWords decodes src, as AppendState wrote it, into w. It reports
	// false, leaving w in an unspecified state, when src does not decode:
	// the state is then no state, as it is for Erased.
	DecodeWords(w []int64, src []byte) bool
}

// wordErased is the Erased form of a Machine[S] that is also a
// WordCodec[S]: the word methods decode w into a *S from the pool, as the
// byte methods decode bytes, unless S is words itself (see inPlace).
type wordErased[S any] struct {
	erased[S]
	wc WordCodec[S]
	// inPlace says that S is its words: a struct of Words() int64 fields,
	// field i at word i as PutWords puts it. The methods then run the
	// machine on w itself, viewed as an S, when w holds a live state: a
	// machine leaves a state it reports unchanged as it was (Machine), so
	// this is PutWords after the call without the copies, and without the
	// pool, whose Get and Put cost more than the decision of a small
	// policy.
	inPlace bool
}

func newWordErased[S any](m Machine[S], wc WordCodec[S]) *wordErased[S] {
	e := &wordErased[S]{erased: erased[S]{m: m, limits: Limits(m)}, wc: wc, inPlace: isWords[S](wc)}
	e.pool.New = func() any { return new(S) }
	return e
}

// isWords reports whether S is exactly the words wc puts it in: a struct
// of wc.Words() exported int64 fields, laid out one per word in order, and
// put by PutWords in that order.
func isWords[S any](wc WordCodec[S]) bool {
	n, t := wc.Words(), reflect.TypeFor[S]()
	if n == 0 || t.Kind() != reflect.Struct || t.NumField() != n || t.Size() != uintptr(n)*8 {
		return false
	}
	var s S
	v := reflect.ValueOf(&s).Elem()
	for i := range n {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Int64 || f.Offset != uintptr(i)*8 || !f.IsExported() {
			return false
		}
		v.Field(i).SetInt(int64(i) + 1)
	}
	w := make([]int64, n)
	wc.PutWords(w, &s)
	for i, x := range w {
		if x != int64(i)+1 {
			return false
		}
	}
	return true
}

// live returns w as the state it holds, and its ExpiresAt, when S is its
// words and w holds a state that is live at now; else nil.
func (e *wordErased[S]) live(w []int64, have bool, now int64) (*S, int64) {
	if !e.inPlace || !have {
		return nil, math.MinInt64
	}
	s := (*S)(unsafe.Pointer(unsafe.SliceData(w[:e.wc.Words()])))
	at := e.m.ExpiresAt(s)
	if at <= now {
		return nil, math.MinInt64
	}
	return s, at
}

// loadWords takes a *S from the pool and sets it from w, as load does
// from bytes: the zero S, and false, when there is no live state at now.
// at is the live state's ExpiresAt, math.MinInt64 for none. The caller
// must give s back with e.pool.Put.
func (e *wordErased[S]) loadWords(w []int64, have bool, now int64) (s *S, exists bool, at int64) {
	s = e.pool.Get().(*S)
	if have {
		e.wc.GetWords(s, w)
		if at := e.m.ExpiresAt(s); at > now {
			return s, true, at
		}
	}
	var zero S
	*s = zero
	return s, false, math.MinInt64
}

func (e *wordErased[S]) Words() int { return e.wc.Words() }

func (e *wordErased[S]) ConsumeWords(w []int64, have bool, now, n int64) (Decision, bool, int64) {
	if s, at := e.live(w, have, now); s != nil {
		res, changed := e.m.Consume(s, true, now, n)
		return res, changed, at
	}
	s, exists, at := e.loadWords(w, have, now)
	res, changed := e.m.Consume(s, exists, now, n)
	if changed {
		e.wc.PutWords(w, s)
	}
	e.pool.Put(s)
	return res, changed, at
}

func (e *wordErased[S]) ReserveWords(w []int64, have bool, now, n, maxWait int64) (Result, bool, int64) {
	if s, at := e.live(w, have, now); s != nil {
		res, changed := e.m.Reserve(s, true, now, n, maxWait)
		return res, changed, at
	}
	s, exists, at := e.loadWords(w, have, now)
	res, changed := e.m.Reserve(s, exists, now, n, maxWait)
	if changed {
		e.wc.PutWords(w, s)
	}
	e.pool.Put(s)
	return res, changed, at
}

func (e *wordErased[S]) PeekWords(w []int64, have bool, now, n int64) (Result, int64) {
	if s, at := e.live(w, have, now); s != nil {
		return e.m.Peek(s, true, now, n), at
	}
	s, exists, at := e.loadWords(w, have, now)
	res := e.m.Peek(s, exists, now, n)
	e.pool.Put(s)
	return res, at
}

func (e *wordErased[S]) CancelWords(w []int64, have bool, now int64, r *Receipt) Outcome {
	s, exists, _ := e.loadWords(w, have, now)
	out := Undo(e.m, s, exists, now, r)
	if out == Changed {
		e.wc.PutWords(w, s)
	}
	e.pool.Put(s)
	return out
}

func (e *wordErased[S]) ExpiresAtWords(w []int64, have bool) int64 {
	if !have {
		return math.MinInt64
	}
	if s, at := e.live(w, have, math.MinInt64); s != nil {
		return at
	}
	s := e.pool.Get().(*S)
	e.wc.GetWords(s, w)
	at := e.m.ExpiresAt(s)
	e.pool.Put(s)
	return at
}

func (e *wordErased[S]) AppendWords(dst []byte, w []int64) []byte {
	s := e.pool.Get().(*S)
	e.wc.GetWords(s, w)
	dst = e.m.AppendState(dst, s)
	e.pool.Put(s)
	return dst
}

func (e *wordErased[S]) DecodeWords(w []int64, src []byte) bool {
	s := e.pool.Get().(*S)
	ok := e.m.DecodeState(src, s) == nil
	if ok {
		e.wc.PutWords(w, s)
	}
	e.pool.Put(s)
	return ok
}
