package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "",
		"Version prints the module version of this build, the VCS revision it was built from\n"+
			"(with its time, and \"modified\" when the work tree had changes), and the Go version.", stderr)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, version(info))
	return nil
}

// version describes the build info: the module's version, the VCS
// revision, time and whether the tree was modified, and the toolchain.
// info may be nil (a binary built without module support).
func version(info *debug.BuildInfo) string {
	v, goVersion := "(unknown)", runtime.Version()
	settings := map[string]string{}
	if info != nil {
		if info.Main.Version != "" {
			v = info.Main.Version // "(devel)" for a build of a work tree
		}
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	out := "sluice " + v + "\n"
	if rev := settings["vcs.revision"]; rev != "" {
		out += "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			out += " " + t
		}
		if settings["vcs.modified"] == "true" {
			out += " (modified)"
		}
		out += "\n"
	} else {
		out += "revision unknown: built without VCS information (go run, -buildvcs=false, or not in a git clone)\n"
	}
	return out + goVersion + " " + settings["GOOS"] + "/" + settings["GOARCH"] + "\n"
}
