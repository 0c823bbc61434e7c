package conformance

import (
	"fmt"
	"strings"
)

// Status is the outcome of a case.
type Status uint8

// The outcomes of a case.
const (
	Passed Status = iota + 1
	Failed
	Skipped
)

func (s Status) String() string {
	switch s {
	case Passed:
		return "passed"
	case Failed:
		return "failed"
	case Skipped:
		return "skipped"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Report is the outcome of a Run.
type Report struct {
	// Target is the name of the target run against.
	Target string
	// Files holds one report per vector file, in the order run.
	Files []FileReport
}

// FileReport is the outcome of one vector file.
type FileReport struct {
	Path  string
	Suite string
	// Err is why the file could not be read or decoded, or nil. Cases is
	// then empty.
	Err *Failure
	// Cases holds one report per case, in file order.
	Cases []CaseReport
}

// CaseReport is the outcome of one case.
type CaseReport struct {
	// Name is the case's name, or "#i" for the i-th case (from 0) when it
	// has none.
	Name   string
	Status Status
	// Reason says why a skipped case was skipped.
	Reason string
	// Failure says why a failed case failed; nil otherwise.
	Failure *Failure
}

// Failure says where a vector file, case or step went wrong and how.
type Failure struct {
	File string
	// Case is the case's name, or "" for a file that could not be read or
	// decoded.
	Case string
	// Step is the index of the failing step in the case's steps, from 0,
	// or -1 when the case itself failed (it is malformed, or building its
	// bucket or limiter went wrong).
	Step int
	// Op is the failing step's op ("advance" or "set_clock" for clock
	// steps), or "".
	Op string
	// Msg says what is wrong where there is more to say than Want and Got,
	// e.g. a malformed case.
	Msg string
	// Want and Got are the wanted and the actual outcome as vectors write
	// them: a value, an object of fields, or "error CODE". Both are "" when
	// the step could not be compared (a malformed case).
	Want, Got string
}

// Error describes the failure on one line (a panic adds its stack), e.g.
//
//	refill.json: case "greedy": step 3 (available): want 5, got 4
func (f *Failure) Error() string {
	var b strings.Builder
	b.WriteString(f.File)
	if f.Case != "" {
		fmt.Fprintf(&b, ": case %q", f.Case)
	}
	if f.Step >= 0 {
		fmt.Fprintf(&b, ": step %d", f.Step)
		if f.Op != "" {
			fmt.Fprintf(&b, " (%s)", f.Op)
		}
	}
	if f.Msg != "" {
		b.WriteString(": " + f.Msg)
	}
	if f.Want != "" || f.Got != "" {
		fmt.Fprintf(&b, ": want %s, got %s", f.Want, f.Got)
	}
	return b.String()
}

// Counts returns the number of cases passed, failed and skipped. A file
// that could not be read or decoded counts as one failed case.
func (r *Report) Counts() (passed, failed, skipped int) {
	for _, f := range r.Files {
		if f.Err != nil {
			failed++
		}
		for _, c := range f.Cases {
			switch c.Status {
			case Passed:
				passed++
			case Failed:
				failed++
			case Skipped:
				skipped++
			}
		}
	}
	return passed, failed, skipped
}

// Summary is the counts as one line: "N passed, M failed, K skipped".
func (r *Report) Summary() string {
	p, f, s := r.Counts()
	return fmt.Sprintf("%d passed, %d failed, %d skipped", p, f, s)
}

// Failures returns every failure, files' and cases', in report order.
func (r *Report) Failures() []*Failure {
	var fs []*Failure
	for _, f := range r.Files {
		if f.Err != nil {
			fs = append(fs, f.Err)
		}
		for _, c := range f.Cases {
			if c.Failure != nil {
				fs = append(fs, c.Failure)
			}
		}
	}
	return fs
}
