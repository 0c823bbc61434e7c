package conformance_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/sluicehq/sluice/conformance"
)

// TestVectors runs the repository's own vector files.
func TestVectors(t *testing.T) {
	conformance.RunT(t, conformance.Local{}, "vectors")
}

// sharedExamples is the directory of the project's shared example vectors,
// beside the repository in a checkout of the whole project.
const sharedExamples = "../../shared/conformance/examples"

// TestSharedExamples runs the shared example vectors. Outside CI they may be
// absent (a clone of this repository alone); under CI=true they must exist.
func TestSharedExamples(t *testing.T) {
	if _, err := os.Stat(sharedExamples); errors.Is(err, fs.ErrNotExist) && os.Getenv("CI") != "true" {
		t.Skipf("%s is absent (set CI=true to require it)", sharedExamples)
	}
	conformance.RunT(t, conformance.Local{}, sharedExamples)
}
