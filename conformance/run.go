package conformance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/yamlnode"
	"github.com/sluicehq/sluice/sluicetest"
)

// Run runs the vector files at paths against target and reports every case.
// A path is a file, or a directory whose *.json files are run in name
// order. A file or case that cannot be read or decoded is reported as
// failed; it never stops the others.
//
// Run returns an error only when ctx ends, together with the report of the
// cases run so far, or when paths is empty.
func Run(ctx context.Context, target Target, paths ...string) (*Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("conformance: no vector files given")
	}
	r := &Report{Target: target.Name()}
	for _, path := range paths {
		for _, f := range loadPath(path) {
			fr := FileReport{Path: f.path, Suite: f.suite, Err: f.err}
			for _, c := range f.cases {
				if err := ctx.Err(); err != nil {
					r.Files = append(r.Files, fr)
					return r, err
				}
				fr.Cases = append(fr.Cases, c.run(ctx, target))
			}
			r.Files = append(r.Files, fr)
		}
	}
	return r, nil
}

// RunT runs the vector files at paths against target as subtests of t: one
// per file, named by its base name, and in it one per case, named by the
// case. A failed case fails its subtest with the failure; a skipped case
// calls t.Skip with the reason. Paths are as for Run.
func RunT(t *testing.T, target Target, paths ...string) {
	t.Helper()
	if len(paths) == 0 {
		t.Fatal("conformance: no vector files given")
	}
	for _, path := range paths {
		for _, f := range loadPath(path) {
			t.Run(filepath.Base(f.path), func(t *testing.T) {
				if f.err != nil {
					t.Fatal(f.err)
				}
				for _, c := range f.cases {
					t.Run(c.name, func(t *testing.T) {
						r := c.run(t.Context(), target)
						switch r.Status {
						case Failed:
							t.Error(r.Failure)
						case Skipped:
							t.Skip(r.Reason)
						}
					})
				}
			})
		}
	}
}

// run runs c on a new bucket or limiter of target. A panic of the subject
// under test fails the case instead of the whole run.
func (c *testCase) run(ctx context.Context, target Target) (r CaseReport) {
	r.Name = c.name
	if c.bad != nil {
		r.Status, r.Failure = Failed, c.bad
		return r
	}
	fail := func(f *Failure) CaseReport {
		return CaseReport{Name: c.name, Status: Failed, Failure: f}
	}
	at := -1 // the step running, for a panic
	defer func() {
		if v := recover(); v != nil {
			op := ""
			if at >= 0 {
				op = c.steps[at].op
			}
			r = fail(c.failure(at, op, fmt.Sprintf("panic: %v\n%s", v, debug.Stack())))
		}
	}()

	e := &env{clock: sluicetest.NewFakeClock(c.start)}
	skip, err := c.subject.build(ctx, target, e)
	if skip != "" {
		r.Status, r.Reason = Skipped, skip
		return r
	}
	if f := c.checkBuild(err); f != nil {
		return fail(f)
	}
	if c.wantConfig != nil { // and building failed as wanted
		r.Status = Passed
		return r
	}
	if c.blocking && e.blocking == nil {
		r.Status, r.Reason = Skipped, fmt.Sprintf("target %s has no blocking operations", target.Name())
		return r
	}
	if c.debts && e.debts == nil {
		r.Status, r.Reason = Skipped, fmt.Sprintf("target %s has no debt operations", target.Name())
		return r
	}
	if c.slots && e.slots == nil {
		r.Status, r.Reason = Skipped, fmt.Sprintf("target %s's limiters hold no slots", target.Name())
		return r
	}
	for i := range c.steps {
		at = i
		s := &c.steps[i]
		if f := s.check(ctx, e); f != nil {
			f.File, f.Case, f.Step, f.Op = c.file, c.name, i, s.op
			return fail(f)
		}
	}
	r.Status = Passed
	return r
}

// checkBuild checks the error of building c's subject against the case's
// want_config_error. A configuration error is a *sluice.ConfigError, of
// its rule, or a LIMITER that the decoder of limiter descriptions refused
// (a *yamlnode.Error without one), of no rule.
func (c *testCase) checkBuild(err error) *Failure {
	f := c.failure(-1, "", "building the "+c.subject.what())
	var (
		ce *sluice.ConfigError
		de *yamlnode.Error
	)
	switch {
	case c.wantConfig == nil && err == nil:
		return nil
	case c.wantConfig == nil:
		f.Want, f.Got = "no error", describeError(err)
	case errors.As(err, &ce):
		if c.wantConfig.rule == "" || ce.Rule == c.wantConfig.rule {
			return nil
		}
		f.Want, f.Got = c.wantConfig.String(), fmt.Sprintf("config error %s (%v)", ce.Rule, err)
	case errors.As(err, &de):
		if c.wantConfig.rule == "" {
			return nil
		}
		f.Want, f.Got = c.wantConfig.String(), fmt.Sprintf("config error of no rule (%v)", err)
	default:
		f.Want, f.Got = c.wantConfig.String(), "no error"
		if err != nil {
			f.Got = describeError(err)
		} else if c.wantConfig.rule == "invalid_interval" {
			f.Msg += ": " + invalidInterval
		}
	}
	return f
}

func (w *wantConfig) String() string {
	if w.rule == "" {
		return "a config error"
	}
	return "config error " + string(w.rule)
}
