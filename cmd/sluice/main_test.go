package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestZoneDatabase: the command embeds the zone database (time/tzdata), so
// that a calendar limiter's time_zone loads in the container image, which
// is built from scratch and has no /usr/share/zoneinfo. Without it,
// time.LoadLocation finds no zone there and the config is refused.
func TestZoneDatabase(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if deps := strings.Fields(string(out)); !slices.Contains(deps, "time/tzdata") {
		t.Errorf("the command does not import time/tzdata; its dependencies: %v", deps)
	}
}
