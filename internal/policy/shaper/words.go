package shaper

import "github.com/sluicehq/sluice/internal/policy"

var _ policy.WordCodec[State] = Config{}

// Words is 2: a State is its Next and Frac, so that a compound keeps it as
// words (see policy.WordCodec).
func (Config) Words() int { return 2 }

// PutWords writes *s into w[:2].
func (Config) PutWords(w []int64, s *State) { w[0], w[1] = s.Next, s.Frac }

// GetWords sets *s from w[:2].
func (Config) GetWords(s *State, w []int64) { s.Next, s.Frac = w[0], w[1] }
