package storeerr

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/driver"
)

func TestClassify(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	cause := errors.New("cause")
	tests := []struct {
		name  string
		ctx   context.Context
		write bool
		out   Outcome
		want  []error // each must match with errors.Is
		bare  bool    // the result is ctx.Err() itself
	}{
		{"conflict", live, true, Conflict, []error{driver.ErrConflict, cause}, false},
		{"refused write", live, true, Refused, []error{driver.ErrUnavailable, cause}, false},
		{"refused after the context ended", ended, true, Refused, nil, true},
		{"unsent write", live, true, NotSent, []error{driver.ErrUnavailable, cause}, false},
		{"unsent after the context ended", ended, true, NotSent, nil, true},
		{"unanswered read", live, false, NoAnswer, []error{driver.ErrUnavailable, cause}, false},
		{"unanswered read after the context ended", ended, false, NoAnswer, nil, true},
		{"unanswered write", live, true, NoAnswer, []error{driver.ErrIndeterminate, cause}, false},
		{"unanswered write after the context ended", ended, true, NoAnswer, []error{driver.ErrIndeterminate, context.Canceled, cause}, false},
		{"fault of a write", live, true, Fault, []error{driver.ErrIndeterminate, cause}, false},
		{"fault of a read", live, false, Fault, []error{driver.ErrUnavailable, cause}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.ctx, cause, tt.write, tt.out)
			if tt.bare && got != context.Canceled {
				t.Errorf("Classify = %v, want context.Canceled itself", got)
			}
			for _, w := range tt.want {
				if !errors.Is(got, w) {
					t.Errorf("Classify = %v, want it to match %v", got, w)
				}
			}
		})
	}
}

func TestWrap(t *testing.T) {
	if got := Wrap("x", context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("Wrap(bare deadline) = %v, want it as it is", got)
	}
	err := Wrap("pgstore: ping", driver.ErrUnavailable)
	if !errors.Is(err, driver.ErrUnavailable) || err.Error() != "pgstore: ping: "+driver.ErrUnavailable.Error() {
		t.Errorf("Wrap = %q, want the prefix and the error wrapped", err)
	}
}
