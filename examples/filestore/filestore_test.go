//go:build unix && !aix && !solaris

package filestore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/drivertest"
	"github.com/sluicehq/sluice/examples/filestore"
)

func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, drivertest.HarnessFunc(
		func(ctx context.Context, t *testing.T) (driver.Store, error) {
			return filestore.New(t.TempDir())
		}))
}

// helperDirEnv names the directory TestHelperProcess increments in; unset,
// the test does nothing.
const helperDirEnv = "FILESTORE_HELPER_DIR"

const (
	helpers    = 3
	increments = 100
	counterKey = "counter"
)

// TestMultiProcess runs helpers copies of the test binary that, like this
// process, each increment one key's counter increments times at once.
func TestMultiProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, helpers)
	outs := make([]bytes.Buffer, helpers)
	for i := range cmds {
		cmds[i] = exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$")
		cmds[i].Env = append(os.Environ(), helperDirEnv+"="+dir)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	incrementN(t, s)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, &outs[i])
		}
	}
	if got, want := count(t, s), uint64((helpers+1)*increments); got != want {
		t.Errorf("counter = %d, want %d", got, want)
	}
}

// TestHelperProcess is a helper of TestMultiProcess, run in a process of
// its own.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("run by TestMultiProcess")
	}
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	incrementN(t, s)
}

// incrementN increments counterKey's counter increments times.
func incrementN(t *testing.T, s *filestore.Store) {
	t.Helper()
	for range increments {
		err := s.Update(t.Context(), counterKey, func(state []byte) ([]byte, time.Duration, bool) {
			var n uint64
			if len(state) == 8 {
				n = binary.BigEndian.Uint64(state)
			}
			return binary.BigEndian.AppendUint64(nil, n+1), 0, true
		})
		if err != nil {
			t.Fatalf("Update(%q) = %v", counterKey, err)
		}
	}
}

// count returns counterKey's counter.
func count(t *testing.T, s *filestore.Store) uint64 {
	t.Helper()
	var n uint64
	err := s.Update(t.Context(), counterKey, func(state []byte) ([]byte, time.Duration, bool) {
		if len(state) == 8 {
			n = binary.BigEndian.Uint64(state)
		}
		return nil, 0, false
	})
	if err != nil {
		t.Fatalf("Update(%q) = %v", counterKey, err)
	}
	return n
}

func TestDeleteExpired(t *testing.T) {
	dir := t.TempDir()
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, ttl time.Duration) {
		t.Helper()
		err := s.Update(t.Context(), key, func([]byte) ([]byte, time.Duration, bool) {
			return []byte(key), ttl, true
		})
		if err != nil {
			t.Fatalf("Update(%q) = %v", key, err)
		}
	}
	put("expired", time.Nanosecond)
	put("kept", time.Hour)
	put("forever", 0)
	time.Sleep(time.Millisecond) // outlasts the 1ns TTL on any clock resolution
	if err := s.DeleteExpired(t.Context()); err != nil {
		t.Fatalf("DeleteExpired() = %v", err)
	}
	states, err := filepath.Glob(filepath.Join(dir, "*.state"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(states), 2; got != want {
		t.Errorf("%d state files after DeleteExpired, want %d: %v", got, want, states)
	}
}

// TestWaitEndsWithContext: an update waiting for a lock another update
// holds returns when its context ends.
func TestWaitEndsWithContext(t *testing.T) {
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	locked, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Update(t.Context(), "k", func([]byte) ([]byte, time.Duration, bool) {
			close(locked)
			<-release
			return nil, 0, false
		})
	}()
	<-locked
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	err = s.Update(ctx, "k", func([]byte) ([]byte, time.Duration, bool) {
		t.Error("fn called without the lock")
		return nil, 0, false
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Update() while locked = %v, want %v", err, context.DeadlineExceeded)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Update() holding the lock = %v", err)
	}
}
