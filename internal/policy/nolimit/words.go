package nolimit

import "github.com/sluicehq/sluice/internal/policy"

var _ policy.WordCodec[State] = Config{}

// Words is 0: there is no state, so a compound keeps no word for it (see
// policy.WordCodec).
func (Config) Words() int { return 0 }

// PutWords writes nothing.
func (Config) PutWords([]int64, *State) {}

// GetWords reads nothing.
func (Config) GetWords(*State, []int64) {}
