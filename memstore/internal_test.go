package memstore

import (
	"fmt"
	"testing"
	"time"
)

func TestShrink(t *testing.T) {
	s := New(WithMaxKeys(2000)) // one shard
	if len(s.shards) != 1 {
		t.Fatalf("a store of 2000 keys has %d shards, want 1", len(s.shards))
	}
	sh := &s.shards[0]
	write := func([]byte) ([]byte, time.Duration, bool) { return []byte("state"), 0, true }
	for i := range 2000 {
		if err := s.Update(t.Context(), fmt.Sprint(i), write); err != nil {
			t.Fatal(err)
		}
	}
	if sh.peak != 2000 {
		t.Fatalf("peak = %d, want 2000", sh.peak)
	}
	for i := range 1499 {
		if err := s.Delete(t.Context(), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if sh.peak != 2000 {
		t.Errorf("peak with 501 keys left = %d, want 2000 (no rebuild yet)", sh.peak)
	}
	if err := s.Delete(t.Context(), "1499"); err != nil {
		t.Fatal(err)
	}
	if sh.peak != 500 {
		t.Errorf("peak after the keys fell to a quarter of it = %d, want 500 (the map rebuilt)", sh.peak)
	}
	for i := 1500; i < 2000; i++ {
		if _, ok := sh.m[fmt.Sprint(i)]; !ok {
			t.Fatalf("key %d lost in the rebuild", i)
		}
	}
}

func TestShardCount(t *testing.T) {
	tests := []struct {
		maxKeys, shards int
	}{
		{0, maxShards},
		{1, 1},
		{2047, 1},
		{2048, 2},
		{maxShards * minKeysPerShard, maxShards},
		{1 << 30, maxShards},
	}
	for _, tt := range tests {
		s := New(WithMaxKeys(tt.maxKeys))
		if got := len(s.shards); got != tt.shards {
			t.Errorf("New(WithMaxKeys(%d)) has %d shards, want %d", tt.maxKeys, got, tt.shards)
		}
		sum := 0
		for i := range s.shards {
			sum += s.shards[i].max
		}
		if sum != tt.maxKeys {
			t.Errorf("New(WithMaxKeys(%d)): shard bounds add up to %d", tt.maxKeys, sum)
		}
	}
}
