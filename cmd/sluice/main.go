// Command sluice is the rate limiter's command line: a rate-limit server
// (serve), a simulator of limiters on traffic patterns (simulate), the
// conformance vectors' runner (conformance), a check of a shared store
// (check-store), a demonstration of a bucket (demo) and the build's
// version (version). Run "sluice help" for the commands and
// "sluice help COMMAND" for one's flags; package internal/app/cli implements
// them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	// The zone database, for a calendar limiter's time_zone: the image is
	// built from scratch, with no /usr/share/zoneinfo to read.
	_ "time/tzdata"

	"github.com/sluicehq/sluice/internal/app/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
