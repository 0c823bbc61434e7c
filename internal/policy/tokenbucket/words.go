package tokenbucket

import "github.com/sluicehq/sluice/internal/policy"

var _ policy.WordCodec[BandwidthState] = Single{}

// Words is 3: a BandwidthState is its LastRefill, Size and Err, so that a
// compound keeps it as words (see policy.WordCodec).
func (Single) Words() int { return 3 }

// PutWords writes *s into w[:3].
func (Single) PutWords(w []int64, s *BandwidthState) { w[0], w[1], w[2] = s.LastRefill, s.Size, s.Err }

// GetWords sets *s from w[:3].
func (Single) GetWords(s *BandwidthState, w []int64) { s.LastRefill, s.Size, s.Err = w[0], w[1], w[2] }

var _ policy.WordCodec[State] = Multi{}

// Words is 3 per bandwidth: a State is each bandwidth's LastRefill, Size
// and Err, in order, so that a compound keeps it as words (see
// policy.WordCodec).
func (m Multi) Words() int { return 3 * len(m.cfg.Bandwidths) }

// PutWords writes *s, which has one element per bandwidth as every state
// the machine leaves has, into w[:Words()].
func (m Multi) PutWords(w []int64, s *State) {
	for i, b := range *s {
		w[3*i], w[3*i+1], w[3*i+2] = b.LastRefill, b.Size, b.Err
	}
}

// GetWords sets *s from w[:Words()], reusing its array when it has one
// element per bandwidth.
func (m Multi) GetWords(s *State, w []int64) {
	if len(*s) != len(m.cfg.Bandwidths) {
		*s = make(State, len(m.cfg.Bandwidths))
	}
	for i := range *s {
		(*s)[i] = BandwidthState{LastRefill: w[3*i], Size: w[3*i+1], Err: w[3*i+2]}
	}
}
