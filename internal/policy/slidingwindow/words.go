package slidingwindow

import "github.com/sluicehq/sluice/internal/policy"

var _ policy.WordCodec[State] = Config{}

// Words is 3: a State is its Start, Prev and Hits, so that a compound
// keeps it as words (see policy.WordCodec).
func (Config) Words() int { return 3 }

// PutWords writes *s into w[:3].
func (Config) PutWords(w []int64, s *State) { w[0], w[1], w[2] = s.Start, s.Prev, s.Hits }

// GetWords sets *s from w[:3].
func (Config) GetWords(s *State, w []int64) { s.Start, s.Prev, s.Hits = w[0], w[1], w[2] }
