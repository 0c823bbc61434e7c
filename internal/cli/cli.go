// Package cli implements the sluice command: Run parses the command line and
// runs a subcommand, writing to the given stdout and stderr, so that main
// stays a few lines and the commands can be tested in process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// ErrUsage is matched (errors.Is) by the errors Run returns for a command
// line it cannot parse; the command exits with status 2 for them.
var ErrUsage = errors.New("usage error")

type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// errHelp is returned by a subcommand asked for -h; Run turns it into nil.
var errHelp = errors.New("help requested")

// command is a subcommand. run parses its own flags from args.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands returns the subcommands, in the order usage lists them.
func commands() []command {
	return []command{
		{"check-store", "check that a store loses no update and passes the vectors: sluice check-store URL", runCheckStore},
		{"conformance", "run conformance vector files against the buckets and limiters", runConformance},
		{"demo", "throttle a burst of requests with a token bucket, in real time", runDemo},
		{"serve", "run the rate-limit server: HTTP API, Envoy gRPC, metrics, live page", runServe},
		{"simulate", "run limiters against a traffic pattern on a fake clock; chart it as SVG", runSimulate},
		{"version", "print the version and VCS revision of this build", runVersion},
		{"help", "show this help, or a command's flags: sluice help COMMAND", runHelp},
	}
}

// Run runs the sluice command line args (without the program name). It
// returns an error matching ErrUsage when args do not parse, and nil when
// help was asked for.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return usagef("sluice: no command given")
	}
	// Until a command says otherwise (serve's --log-format), what the
	// store clients log goes to stderr as text.
	routeLogs(slog.New(slog.NewTextHandler(stderr, nil)))
	if args[0] == "check-store-worker" { // hidden: a writer process of check-store
		return runCheckStoreWorker(ctx, args[1:], stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			if errors.Is(err, errHelp) {
				return nil
			}
			return err
		}
	}
	usage(stderr)
	return usagef("sluice: unknown command %q", args[0])
}

// ExitCode is the exit status for the error Run returned: 0 for nil, 2 for
// a usage error, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}

func usage(w io.Writer) {
	fmt.Fprint(w, "sluice is a rate limiter: Bucket4j's token bucket and the classic policies, in exact integer arithmetic.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tsluice COMMAND [flags] [arguments]\n\nCommands:\n\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "\t%-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"sluice help COMMAND\" for a command's flags.\n")
}

func runHelp(ctx context.Context, args []string, stdout, _ io.Writer) error {
	switch len(args) {
	case 0:
		usage(stdout)
		return nil
	case 1:
		if args[0] != "help" {
			return Run(ctx, []string{args[0], "-h"}, stdout, stdout)
		}
		usage(stdout)
		return nil
	}
	return usagef("sluice help: too many arguments")
}

// newFlagSet returns the flag set of a subcommand, whose usage message
// shows synopsis (the arguments after the command name) and doc.
func newFlagSet(name, synopsis, doc string, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: sluice %s %s\n\n%s\n", name, synopsis, doc)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args into fs. It returns errHelp for -h and a usage error
// for anything flag rejects (which flag has already reported).
func parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	}
	return usagef("%s: %v", fs.Name(), err)
}
