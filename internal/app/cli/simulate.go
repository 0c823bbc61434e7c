package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/app/server"
	"github.com/sluicehq/sluice/internal/app/simulate"
)

const simulateDoc = `Simulate runs limiters of a config file against a traffic pattern on a fake
clock, instantly and deterministically, with every request on one key
unless a replayed file names keys (key K below). It
prints how many requests each limiter accepted and rejected in every time
slice, the tokens left at the end of each slice, the busiest window of the
limit's own length (the real burst a client can get through), and with
-max-wait the delays that waiting added. -out also draws it as an SVG chart.

A traffic SPEC is clauses separated by ";":

	steady RATE [from T to T]             evenly spaced, e.g. steady 20/s
	burst N at T                          N at once, e.g. burst 50 at 2s
	ramp RATE to RATE [from T to T]       e.g. ramp 0/s to 100/s from 0s to 30s
	poisson RATE [seed N] [from T to T]   random arrivals, e.g. poisson 20/s seed 7
	replay FILE [column C] [key K]        a timestamp or access log line per line, or column C of a CSV

A RATE is N/DURATION (20/s, 100/1m, 5/100ms); T is an offset from the start
(2s, 1m30s). Replayed timestamps are RFC 3339 times, Unix seconds (with a
fraction) or offsets; a line may also be an nginx or Apache access log line
(Common Log Format), whose requests of one second are spread over it. C is
a column number from 1 or a header name. With key K each request is on its
own key: field K of its line (key 1 is an access log's client address) or
column K of the CSV; the level shown is then the busiest key's.

A limiter with a lease key (quota leasing) is run as -processes processes
sharing one store, the requests dealt to them in turn, each deciding from
its own leases: compare it with the same policy without the key to see
what leasing costs (at most processes × max fewer, never more).

A limiter in shadow mode (shadow: true in the file, or -shadow for all)
accepts every request, and its slices count those its policy would have
rejected: replay a log against a new limit to see whom it would refuse.

Durations (-duration, -slice, -window, -max-wait) are written as in config
files: 90s, 1m30s or a count and a unit word, '3 minutes'.

Without -config it runs the limiters of sluice serve's built-in example.

Example:

	sluice simulate -config limits.yaml -compare fixed,sliding \
		-traffic 'steady 5/s; burst 40 at 59s' -duration 2m -out chart.svg`

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", "[-config FILE] (-limiter NAME | -compare NAME,NAME,...) -traffic SPEC [flags]", simulateDoc, stderr)
	file := fs.String("config", "", "the config `file`, as sluice serve reads it (default: serve's built-in example)")
	limiter := fs.String("limiter", "", "the `name` of the limiter to run")
	compare := fs.String("compare", "", "several limiter `names`, separated by commas, to run side by side")
	spec := fs.String("traffic", "", "the traffic `spec`")
	duration := fs.duration("duration", 0, "the `duration` to simulate (default 10s, or enough to cover the spec's times)")
	slice := fs.duration("slice", 0, "the `duration` of a reporting slice (default: about 60 slices)")
	window := fs.duration("window", 0, "the `duration` of the window in which to find the busiest burst (default: the policy's own)")
	maxWait := fs.duration("max-wait", 0, "let each request wait up to this `duration` for its turn (Reserve) instead of refusing it")
	shadow := fs.Bool("shadow", false, "run the limiters in shadow mode, as a limiter's shadow: true does: accept every request, and count those the policy would have rejected")
	processes := fs.Int("processes", 1, "with a limiter that has a lease key, how many `processes` share it, each spending its own leases")
	out := fs.String("out", "", "write an SVG chart to this `file`")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	var names []string
	for _, n := range strings.Split(*limiter+","+*compare, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	switch {
	case len(names) == 0:
		return fs.usagef("name a limiter with -limiter or several with -compare")
	case *spec == "":
		return fs.usagef("-traffic is required, for example -traffic 'steady 20/s'")
	case *duration < 0 || *slice < 0 || *window < 0 || *maxWait < 0:
		return fs.usagef("-duration, -slice, -window and -max-wait must not be negative")
	}
	// Options read 0 as "the default"; given on the command line, 0 is a
	// mistake, not a request for the default.
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"duration", *duration}, {"slice", *slice}, {"window", *window}} {
		if f.d == 0 && fs.isSet(f.name) {
			return fs.usagef("-%s %v: want a positive duration, or leave the flag out for its default", f.name, f.d)
		}
	}
	if *processes < 1 || *processes > simulate.MaxProcesses {
		return fs.usagef("-processes must be 1 to %d, got %d", simulate.MaxProcesses, *processes)
	}

	var cfg *server.Config
	var err error
	if *file == "" {
		cfg, err = server.LoadConfig(server.Example())
	} else {
		cfg, err = server.LoadConfigFile(*file)
	}
	if err != nil {
		return err
	}
	t, err := simulate.ParseTraffic(*spec)
	if err != nil {
		return err
	}
	reports, err := simulate.Limiters(cfg.Limiters, names, t, simulate.Options{
		Duration: *duration, Slice: *slice, Window: *window, MaxWait: *maxWait, Processes: *processes, Shadow: *shadow,
	})
	if err != nil {
		return err
	}
	if *out != "" {
		var b bytes.Buffer
		if err := simulate.WriteSVG(&b, t.String(), reports); err != nil {
			return err
		}
		if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if err := simulate.WriteText(stdout, t.String(), reports); err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(stdout, "\nchart written to %s\n", *out)
	}
	return nil
}
