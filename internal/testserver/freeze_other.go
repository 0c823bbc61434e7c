//go:build !unix

package testserver

import (
	"errors"
	"os"
)

// freeze is not supported outside Unix.
func freeze(p *os.Process, frozen bool) error {
	return errors.New("testserver: freezing a server needs Unix signals")
}
