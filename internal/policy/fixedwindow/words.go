package fixedwindow

import "github.com/sluicehq/sluice/internal/policy"

var _ policy.WordCodec[State] = Config{}

// Words is 2: a State is its Start and Hits, so that a compound keeps it
// as words (see policy.WordCodec).
func (Config) Words() int { return 2 }

// PutWords writes *s into w[:2].
func (Config) PutWords(w []int64, s *State) { w[0], w[1] = s.Start, s.Hits }

// GetWords sets *s from w[:2].
func (Config) GetWords(s *State, w []int64) { s.Start, s.Hits = w[0], w[1] }
