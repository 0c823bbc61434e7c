package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// devVersion is the version of a build from a clone of the repository:
// the next release's, with the pre-release tag dev, so that it sorts
// before the release and after the one before. The commit tagged for a
// release sets it to the release's version, and the next commit to the
// following release's, with -dev (docs/deploy.md, "Releases").
const devVersion = "v0.2.0-dev"

// The build's VCS stamp, set with -ldflags -X by deploy/image/build.sh
// (make image) where Go does not stamp it: under -buildvcs=false,
// in a git worktree, or from a tarball. Go's own stamp (vcs.revision,
// vcs.time, vcs.modified), when there, wins.
var (
	vcsRevision string // the commit, 40 hex digits
	vcsTime     string // its commit time, RFC 3339
	vcsModified string // "true" when the work tree had changes
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "",
		"Version prints the semantic version of this build: the module's version for\n"+
			"go install ...@VERSION, else "+devVersion+" with the VCS revision; then the\n"+
			"revision (with its time, and \"modified\" when the work tree had changes), and the Go version.", stderr)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, describe(info, stamp{vcsRevision, vcsTime, vcsModified}))
	return nil
}

// stamp is a build's VCS stamp from -ldflags -X.
type stamp struct{ revision, time, modified string }

// describe describes the build: its version, the VCS revision, time and
// whether the tree was modified, and the toolchain. info may be nil (a
// binary built without module support).
//
// The version is the main module's when the binary was built from a
// module download (go install github.com/sluicehq/sluice/cmd/sluice@v0.1.0
// or @latest, which gives a tag or Go's pseudo-version). A build of a work
// tree has "(devel)" there, or, with Go's VCS stamp, a pseudo-version of
// v0.0.0 until a tag exists; it gets devVersion and, as semantic
// versioning's build metadata, the revision's first 12 hex digits and
// "dirty" when the tree was modified: v0.2.0-dev+f0b5f8c1a2b3.dirty.
func describe(info *debug.BuildInfo, ld stamp) string {
	goVersion := runtime.Version()
	settings := map[string]string{}
	var module string
	if info != nil {
		module = info.Main.Version
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	if settings["vcs.revision"] == "" && ld.revision != "" {
		settings["vcs.revision"], settings["vcs.time"], settings["vcs.modified"] = ld.revision, ld.time, ld.modified
	}
	rev := settings["vcs.revision"]
	v := module
	if module == "" || module == "(devel)" || rev != "" { // a work tree, not a module download
		v = devVersion
		if rev != "" {
			v += "+" + rev[:min(12, len(rev))]
			if settings["vcs.modified"] == "true" {
				v += ".dirty"
			}
		}
	}
	out := "sluice " + v + "\n"
	if rev != "" {
		out += "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			out += " " + t
		}
		if settings["vcs.modified"] == "true" {
			out += " (modified)"
		}
		out += "\n"
	} else if module == "" || module == "(devel)" {
		out += "revision unknown: built without VCS information (-buildvcs=false, a git worktree, or not in a git clone; make image's build stamps it)\n"
	}
	return out + goVersion + " " + settings["GOOS"] + "/" + settings["GOARCH"] + "\n"
}
