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
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
)

// ErrUsage is matched (errors.Is) by the errors Run returns for a command
// line it cannot parse; the command exits with status 2 for them.
var ErrUsage = errors.New("usage error")

// usageError is a command line that does not parse. usage is the
// command's usage line, printed after the error by Main.
type usageError struct{ msg, usage string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// commandError is the error of a command, which it names.
type commandError struct {
	cmd string
	err error
}

// Error names the command once: the packages behind a command prefix
// their errors with their own name, often the command's ("simulate: "),
// which would otherwise follow "sluice simulate: ".
func (e *commandError) Error() string {
	return "sluice " + e.cmd + ": " + strings.TrimPrefix(e.err.Error(), e.cmd+": ")
}
func (e *commandError) Unwrap() error { return e.err }

// errHelp is returned by a subcommand asked for -h; Run turns it into nil.
var errHelp = errors.New("help requested")

// command is a subcommand. run parses its own flags from args and returns
// errors without its name, which Run adds.
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
		{"plans", "read and write the plans of a running sluice serve: get, set, delete, list, import", runPlans},
		{"serve", "run the rate-limit server: HTTP API, Envoy gRPC, metrics, live page", runServe},
		{"simulate", "run limiters against a traffic pattern on a fake clock; chart it as SVG", runSimulate},
		{"version", "print the version and VCS revision of this build", runVersion},
		{"help", "show this help, or a command's flags: sluice help COMMAND", runHelp},
	}
}

// Main runs args as Run does, prints its error on stderr (followed, for a
// usage error, by the command's usage line) and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := Run(ctx, args, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		var ue *usageError
		if errors.As(err, &ue) && ue.usage != "" {
			fmt.Fprintln(stderr, ue.usage)
		}
	}
	return ExitCode(err)
}

// Run runs the sluice command line args (without the program name). Its
// errors start with "sluice COMMAND: ". It returns an error matching
// ErrUsage when args do not parse, and nil when help was asked for.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return usagef("sluice: no command given")
	}
	// Until a command says otherwise (serve's --log-format), what the
	// store clients log goes to stderr as text.
	routeLogs(slog.New(slog.NewTextHandler(stderr, nil)))
	run := func(name string, f func(context.Context, []string, io.Writer, io.Writer) error) error {
		err := f(ctx, args[1:], stdout, stderr)
		switch {
		case errors.Is(err, errHelp):
			return nil
		case err != nil:
			return &commandError{name, err}
		}
		return nil
	}
	switch args[0] {
	case "-h", "-help", "--h", "--help": // as the flag package reads them
		usage(stdout)
		return nil
	}
	if args[0] == "check-store-worker" { // hidden: a writer process of check-store
		return run(args[0], runCheckStoreWorker)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return run(c.name, c.run)
		}
	}
	return &usageError{msg: fmt.Sprintf("sluice: unknown command %q", args[0]),
		usage: "usage: sluice COMMAND [flags] [arguments]\n(sluice help lists the commands)"}
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
	fmt.Fprint(w, "\nFlags may come before or after the arguments; \"--\" ends the flags.\n")
	fmt.Fprint(w, "Run \"sluice help COMMAND\" for a command's flags.\n")
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
	return usagef("too many arguments")
}

// flagSet is the flags of a subcommand and what its help says.
type flagSet struct {
	*flag.FlagSet
	name, synopsis, doc string
	help                io.Writer // where -h prints the help
}

// newFlagSet returns the flag set of a subcommand, whose help shows
// synopsis (the arguments after the command name) and doc.
func newFlagSet(name, synopsis, doc string, help io.Writer) *flagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	// Errors are returned and printed once, by Main, with the usage line
	// rather than the whole help.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis, doc: doc, help: help}
}

// printHelp prints the usage line, the doc and the flags.
func (fs *flagSet) printHelp() {
	w := fs.help
	fmt.Fprintf(w, "Usage: sluice %s %s\n\n%s\n", fs.name, fs.synopsis, fs.doc)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags (before or after the arguments):\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// usagef returns a usage error that Main follows with the command's
// usage line.
func (fs *flagSet) usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...),
		usage: fmt.Sprintf("usage: sluice %s %s\n(sluice help %s shows the flags)", fs.name, fs.synopsis, fs.name)}
}

// parse parses args into fs, flags before, between and after the
// positional arguments, until "--", after which everything is positional;
// fs.Args() are then the positional arguments. It returns errHelp for -h,
// having printed the help, and a usage error for anything flag rejects.
func (fs *flagSet) parse(args []string) error {
	var positional []string
	for {
		if err := fs.FlagSet.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printHelp()
				return errHelp
			}
			return fs.usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.FlagSet.Parse(append([]string{"--"}, positional...))
}

// isSet reports whether the command line set the flag name.
func (fs *flagSet) isSet(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// durationFlag is a duration flag that reads what config files read:
// Go's syntax (1m30s) or a count and a unit word ("3 minutes").
type durationFlag struct{ d *time.Duration }

// duration defines a duration flag.
func (fs *flagSet) duration(name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(durationFlag{&d}, name, usage)
	return &d
}

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}
