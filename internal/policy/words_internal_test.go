package policy

import "testing"

// codec is a WordCodec of S whose PutWords the test writes.
type codec[S any] struct {
	n   int
	put func(w []int64, s *S)
}

func (c codec[S]) Words() int               { return c.n }
func (c codec[S]) PutWords(w []int64, s *S) { c.put(w, s) }
func (c codec[S]) GetWords(s *S, w []int64) {}

// TestIsWords: a state is viewed in place as its words only when its
// layout and PutWords's order both match them word for word; anything
// else would read one field as another.
func TestIsWords(t *testing.T) {
	type two struct{ A, B int64 }
	type mixed struct {
		A    int64
		B, C int32
	}
	type hidden struct{ a, b int64 }
	type three struct{ A, B, C int64 }
	type none struct{}
	inOrder := func(w []int64, s *two) { w[0], w[1] = s.A, s.B }
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"two int64 fields put in order", isWords[two](codec[two]{2, inOrder}), true},
		{"put swapped", isWords[two](codec[two]{2, func(w []int64, s *two) { w[0], w[1] = s.B, s.A }}), false},
		{"more words than fields", isWords[two](codec[two]{3, func(w []int64, s *two) { inOrder(w, s) }}), false},
		{"fields of another size", isWords[mixed](codec[mixed]{2, func(w []int64, s *mixed) { w[0], w[1] = s.A, int64(s.B) }}), false},
		{"unexported fields", isWords[hidden](codec[hidden]{2, func(w []int64, s *hidden) { w[0], w[1] = s.a, s.b }}), false},
		{"three in order", isWords[three](codec[three]{3, func(w []int64, s *three) { w[0], w[1], w[2] = s.A, s.B, s.C }}), true},
		{"no words", isWords[none](codec[none]{0, func([]int64, *none) {}}), false},
		{"not a struct", isWords[[]two](codec[[]two]{2, func([]int64, *[]two) {}}), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: isWords = %v, want %v", c.name, c.got, c.want)
		}
	}
}
