package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// File is a loaded limiter file: every limiter it names, each with a
// validated policy. A File is not changed by this package after Load
// returns it.
type File struct {
	// Limiters holds the limiters by name.
	Limiters map[string]Limiter
	// Order is the limiters' names in the order the file lists them.
	Order []string
	// Notes are what a file in another library's format (LoadSymfony)
	// says that sluice accepts but does not apply, in file order. Load's
	// files have none.
	Notes []Note
}

// Note is a setting that a loader accepted but does not apply, or applies
// differently than the library the file was written for: for instance
// Symfony's storage_service, whose place a driver.Store takes.
type Note struct {
	// Path, Line and Column locate the setting, as an Error's do.
	Path         string
	Line, Column int
	// Msg says what sluice does with it.
	Msg string
}

// String returns the note as "limiters.api.cache_pool (line 4): ...".
func (n Note) String() string {
	if n.Line > 0 {
		return n.Path + " (line " + strconv.Itoa(n.Line) + "): " + n.Msg
	}
	return n.Path + ": " + n.Msg
}

// Limiter is one named limiter of a file.
type Limiter struct {
	// Name is the key under limiters.
	Name string
	// Policy is the limiter's policy, ready for sluice.NewLimiter, which
	// accepts every policy Load returns, a bucket with intervally_aligned
	// refill only on a wall clock (sluice.WithClock(sluice.WallClock())):
	// a keyed limiter's default clock is not one. See also Bucket.
	Policy sluice.Policy
	// Bucket is the configuration of a bucket policy, for a single
	// sluice.NewBucket (for instance with intervally_aligned refill, which
	// needs sluice.WallClock). It is nil for every other policy.
	Bucket *sluice.BucketConfig
	// Lease is the limiter's quota leasing (its lease key), for
	// sluice.WithLease; nil when the file sets none. Load has checked it
	// against the policy.
	Lease *sluice.Lease
	// Line and Column locate the limiter's name in the file, counting
	// from 1.
	Line, Column int
	// Version is the limiter's configuration version (version:), for
	// sluice.WithConfigVersion; 0 when the file gives none.
	Version uint64
	// Overrides are the policies of particular keys and key prefixes
	// (overrides:), in file order; see PolicyFor.
	Overrides []Override
	// Shadow is the limiter's shadow: key, for sluice.WithShadow: decide
	// and count, but let every request through.
	Shadow bool
}

// Load decodes and validates a limiter file. It is a pure function of
// data: it reads no files and keeps no state.
//
// Every error is an *Error that says where in the document the problem is;
// one that a sluice policy constructor found also matches
// sluice.ErrInvalidConfig. Load returns the first error: it checks each
// limiter in file order (keys, types, then the policy's own rules), and
// then the names that compound limiters refer to.
func Load(data []byte) (*File, error) {
	return LoadWith(data, nil)
}

// LoadFile reads the file at path and loads it with Load. Its errors are
// *Error values with File set to path; when the file cannot be read, Err
// is the error of the read (errors.Is(err, fs.ErrNotExist) and so on).
func LoadFile(path string) (*File, error) {
	return LoadFileWith(path, nil)
}

// validName is what a limiter may be called: its name appears in error
// paths and in compound references.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// yamlLine picks the line out of the parser's messages, which read
// "yaml: line 3: mapping values are not allowed in this context".
var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

// format is what parse says, in the words of a file format, of a file
// without a document and of a second document.
type format struct{ empty, second string }

// sluiceFormat is the format of Load's files.
var sluiceFormat = format{
	empty:  `the file is empty; it must name at least one limiter under "limiters"`,
	second: "a file must hold one YAML document, found a second one",
}

// parse parses data, which must hold a single YAML document of format f,
// and returns the document's root node.
func parse(data []byte, f format) (root *yaml.Node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: f.empty}
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, &Error{Line: extra.Line, Column: extra.Column, Msg: f.second}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{Msg: f.empty}
	}
	return doc.Content[0], nil
}

// parseTop parses data, a document of format f, whose root must be a
// mapping of limiter descriptions and other keys, and returns the decoder
// of its descriptions and the root's mapping.
func parseTop(data []byte, f format) (*policyspec.Decoder, *yamlnode.Mapping, error) {
	root, err := parse(data, f)
	if err != nil {
		return nil, nil, err
	}
	d := policyspec.NewDecoder(policyspec.Options{})
	top, err := d.Mapping("", root)
	return d, top, err
}

// yamlError turns a parser error into an *Error. The parser's line is
// sometimes that of the construct it was in rather than of the character
// it stumbled on.
func yamlError(err error) *Error {
	e := &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if line, convErr := strconv.Atoi(m[1]); convErr == nil {
			e.Line, e.Msg = line, m[2]
		}
	}
	return e
}

// The resolution states of a named limiter.
const (
	unresolved = iota
	resolving
	resolved
)

// resolver builds compound policies, whose members may name other
// limiters, in dependency order.
type resolver struct {
	d     *policyspec.Decoder
	specs map[string]*policyspec.Desc
	order []string
	state map[string]int
	stack []string // names being resolved, outermost first
}

// named resolves the limiter called name. refPath and ref are the reference
// to it, or "" and nil for a top-level limiter.
func (r *resolver) named(name, refPath string, ref *yaml.Node) (*policyspec.Desc, error) {
	s, ok := r.specs[name]
	if !ok {
		return nil, errorAt(refPath, ref, "unknown limiter %q; the file names %s", name, nameList(r.order))
	}
	switch r.state[name] {
	case resolved:
		return s, nil
	case resolving:
		cycle := ""
		for i, n := range r.stack {
			if n == name {
				for _, m := range r.stack[i:] {
					cycle += m + " -> "
				}
				break
			}
		}
		return nil, errorAt(refPath, ref, "compound limiters form a cycle: %s%s", cycle, name)
	}
	r.state[name] = resolving
	r.stack = append(r.stack, name)
	if err := r.d.Resolve(s, r.member); err != nil {
		return nil, err
	}
	r.stack = r.stack[:len(r.stack)-1]
	r.state[name] = resolved
	return s, nil
}

// member resolves a compound's member that names another limiter.
func (r *resolver) member(m policyspec.Member) (*policyspec.Desc, error) {
	return r.named(m.Name, m.Path, m.Node)
}

// nameList lists names for a message, at most ten of them.
func nameList(names []string) string {
	const most = 10
	out := ""
	for i, n := range names {
		if i == most {
			return out + fmt.Sprintf(" and %d more", len(names)-most)
		}
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// ParseDuration parses a duration as config files write it: either Go syntax
// (time.ParseDuration: "1h30m", "1.5s", "250ms") or a whole count and a
// unit word, singular or plural, with or without a space ("1 second",
// "60 minutes", "2 weeks", "1day"). A day is 24 hours and a week 7 days;
// months and years, whose length varies, are rejected. A duration that
// does not fit time.Duration is an error, never a wrapped value. The sign
// is kept: whether a negative or zero duration is allowed is for the
// policy to say.
func ParseDuration(s string) (time.Duration, error) { return yamlnode.ParseDuration(s) }
