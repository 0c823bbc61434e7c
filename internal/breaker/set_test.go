package breaker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newTestSet returns a set of threshold whose keys' partitions are the
// map's (a key not in it is in the partition of its own name), on a fake
// time which the returned function advances, and the states it reported.
func newTestSet(threshold int, parts map[string]string) (*Set, func(time.Duration), *[]State) {
	var states []State
	partition := func(key string) string {
		if p, ok := parts[key]; ok {
			return p
		}
		return key
	}
	s := NewSet(threshold, func(st State) { states = append(states, st) }, partition)
	now := time.Unix(1e9, 0)
	s.now = func() time.Time { return now }
	return s, func(d time.Duration) { now = now.Add(d) }, &states
}

// TestSetOnePartitionFails: failures of one partition open its circuit
// only; the set reports open while it is, and closed once its probe
// succeeds.
func TestSetOnePartitionFails(t *testing.T) {
	s, advance, states := newTestSet(2, map[string]string{"a1": "A", "a2": "A", "b1": "B"})
	for range 2 {
		s.For("a1").Result(errDown)
	}
	if _, err := s.For("a2").Allow(); !errors.Is(err, ErrOpen) {
		t.Errorf("Allow of another key of the failed partition = %v, want ErrOpen", err)
	}
	if _, err := s.For("b1").Allow(); err != nil {
		t.Errorf("Allow of a key of a healthy partition = %v, want nil", err)
	}
	s.For("b1").Result(nil)
	if fmt.Sprint(*states) != "[1]" {
		t.Errorf("states = %v, want [open]", *states)
	}
	advance(MinOpen)
	probe, err := s.For("a2").Allow()
	if err != nil || probe == 0 {
		t.Fatalf("Allow at MinOpen = %d, %v, want a probe", probe, err)
	}
	if fmt.Sprint(*states) != "[1 2]" {
		t.Errorf("states = %v, want [open half-open]", *states)
	}
	s.For("a2").Result(nil)
	s.For("a2").EndProbe(probe)
	if fmt.Sprint(*states) != "[1 2 0]" {
		t.Errorf("states = %v, want [open half-open closed]", *states)
	}
}

// TestSetOpenWhileAnyOpen: the set is open while any partition is, and
// half-open only when none is open.
func TestSetOpenWhileAnyOpen(t *testing.T) {
	s, advance, states := newTestSet(1, nil)
	s.For("A").Result(errDown)
	s.For("B").Result(errDown)
	advance(MinOpen)
	probe, _ := s.For("A").Allow() // A half-open, B still open
	s.For("A").Result(nil)         // A closed
	s.For("A").EndProbe(probe)
	if fmt.Sprint(*states) != "[1]" {
		t.Errorf("states = %v, want [open] while B is open", *states)
	}
	probe, _ = s.For("B").Allow()
	s.For("B").Result(nil)
	s.For("B").EndProbe(probe)
	if fmt.Sprint(*states) != "[1 2 0]" {
		t.Errorf("states = %v, want [open half-open closed]", *states)
	}
}

// TestSetDropsIdlePartitions: a partition whose keys moved elsewhere (its
// master failed over) is dropped once no call asked for it in
// IdleAfter, and the set closes, though its circuit never saw a success.
func TestSetDropsIdlePartitions(t *testing.T) {
	parts := map[string]string{"k": "old"}
	s, advance, states := newTestSet(1, parts)
	s.For("k").Result(errDown)
	parts["k"] = "new" // the key moved
	if _, err := s.For("k").Allow(); err != nil {
		t.Fatalf("Allow of the key in its new partition = %v, want nil", err)
	}
	advance(IdleAfter / 2)
	s.For("k").Result(nil)
	if fmt.Sprint(*states) != "[1]" {
		t.Errorf("states = %v, want [open]: the old partition is not idle long enough", *states)
	}
	advance(IdleAfter)
	s.For("k")
	if fmt.Sprint(*states) != "[1 0]" {
		t.Errorf("states = %v, want [open closed] once the old partition is dropped", *states)
	}
	if n := len(*s.parts.Load()); n != 1 {
		t.Errorf("%d partitions kept, want 1", n)
	}
}

// TestSetWhole: without partitions, and for a key whose partition is
// not known, a set is one breaker.
func TestSetWhole(t *testing.T) {
	s := NewSet(1, nil, nil)
	if s.For("a") != s.For("b") {
		t.Error("a set without partitions has more than one breaker")
	}
	s, _, _ = newTestSet(1, map[string]string{"a": "", "b": ""})
	if s.For("a") != s.For("b") || s.For("a") == s.For("c") {
		t.Error(`keys of partition "" do not share the whole store's breaker`)
	}
}

// TestSetConcurrent runs calls on many partitions at once, for the race
// detector, and checks that the set ends closed.
func TestSetConcurrent(t *testing.T) {
	var mu sync.Mutex
	var last State
	s := NewSet(2, func(st State) { mu.Lock(); last = st; mu.Unlock() }, func(key string) string { return key[:1] })
	var now atomic.Int64
	s.now = func() time.Time { return time.Unix(0, now.Add(1000)) } // 1µs a call
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				key := fmt.Sprint(g%3, i)
				br := s.For(key)
				probe, err := br.Allow()
				if err != nil {
					continue
				}
				if i%7 == 0 {
					br.Result(errDown)
				} else {
					br.Result(nil)
				}
				br.EndProbe(probe)
			}
		})
	}
	wg.Wait()
	for p := range 3 { // close every circuit
		br := s.For(fmt.Sprint(p))
		now.Add(int64(MaxOpen))
		probe, _ := br.Allow()
		br.Result(nil)
		br.EndProbe(probe)
	}
	mu.Lock()
	defer mu.Unlock()
	if last != Closed {
		t.Errorf("last state = %v, want closed", last)
	}
}
