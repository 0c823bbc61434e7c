package config

import (
	"errors"
	"io/fs"
	"os"
	"slices"

	"github.com/sluicehq/sluice"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/policyspec"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Section decodes one extra top-level section of a file that LoadWith
// loads: path is the section's key, n its value (possibly an alias) and f
// the limiters, already decoded, for sections that refer to them. Its
// errors should be *Error values locating the offending node, so that they
// read as Load's do; see NodeError.
type Section func(path string, n *yaml.Node, f *File) error

// LoadWith is Load for a file that has more top-level sections than
// limiters, such as a server's store and listen addresses. Each key of
// sections is a section the file may have; its function decodes it after
// the limiters are decoded, in the order the file lists the sections.
// Decoding stays strict: a top-level key that is neither limiters nor in
// sections is an error. A section the file leaves out is not decoded, and
// limiters may be left out when the file has another section (a server
// that only answers Envoy from envoyproxy/ratelimit's files needs none);
// f then has no limiters.
//
// LoadWith is a pure function of data, like Load; an error that is not an
// *Error is returned as a section function returned it.
func LoadWith(data []byte, sections map[string]Section) (*File, error) {
	f, err := loadWith(data, sections)
	// The decoders inside this module, sluice serve's sections among
	// them, walk nodes with yamlnode; its errors become *Error here.
	if ne, ok := err.(*yamlnode.Error); ok {
		return nil, fromNode(ne)
	}
	return f, err
}

func loadWith(data []byte, sections map[string]Section) (*File, error) {
	d, top, err := parseTop(data, sluiceFormat)
	if err != nil {
		return nil, err
	}
	allowed := []string{"limiters"}
	for name := range sections {
		if name != "limiters" {
			allowed = append(allowed, name)
		}
	}
	slices.Sort(allowed[1:])
	required := []string{"limiters"}
	if len(top.Keys) > 0 && len(sections) > 0 {
		required = nil
	}
	if err := top.Check(allowed, required, yamlnode.PlainUnknown(allowed)); err != nil {
		return nil, err
	}
	f := &File{Limiters: map[string]Limiter{}}
	if top.Has("limiters") {
		path, v := top.Value("limiters")
		if f, err = limiters(d, path, v); err != nil {
			return nil, err
		}
	}
	for _, k := range top.Keys {
		if k.Value == "limiters" {
			continue
		}
		path, v := top.Value(k.Value)
		if err := sections[k.Value](path, v, f); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// LoadFileWith reads the file at path and loads it with LoadWith. Its
// *Error values have File set to path, as LoadFile's do.
func LoadFileWith(path string, sections map[string]Section) (*File, error) {
	return loadFile(path, func(data []byte) (*File, error) { return LoadWith(data, sections) })
}

// loadFile reads the file at path and decodes it with load, setting File
// on its *Error.
func loadFile[T any](path string, load func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Op + ": " + pe.Err.Error()
		}
		return zero, &Error{File: path, Msg: msg, Err: err}
	}
	v, err := load(data)
	var e *Error
	if errors.As(err, &e) {
		withFile := *e
		withFile.File = path
		return zero, &withFile
	}
	return v, err
}

// NodeError returns an *Error at path for node n (nil when there is no
// node to point at), with the message format and args: for Section
// functions, so that their errors carry the line of the offending node.
func NodeError(path string, n *yaml.Node, format string, args ...any) *Error {
	return errorAt(path, n, format, args...)
}

// limiters decodes v, the limiters section at path.
func limiters(d *policyspec.Decoder, path string, v *yaml.Node) (*File, error) {
	lims, err := d.Mapping(path, v)
	if err != nil {
		return nil, err
	}
	if len(lims.Keys) == 0 {
		return nil, errorAt(path, lims.Node, "must name at least one limiter")
	}
	r := &resolver{d: d, specs: make(map[string]*policyspec.Desc, len(lims.Keys)), state: make(map[string]int, len(lims.Keys))}
	leases := make(map[string]*leaseSpec)
	plans := make(map[string]plan)
	shadows := make(map[string]bool)
	for i, k := range lims.Keys {
		name := k.Value
		if !validName.MatchString(name) {
			return nil, errorAt(path, k,
				"limiter names are letters, digits, '_' and '-', got %s", yamlnode.Describe(k))
		}
		v, ls, err := splitLease(d, yamlnode.Join(path, name), lims.Vals[i])
		if err != nil {
			return nil, err
		}
		if v, shadows[name], err = splitShadow(d, yamlnode.Join(path, name), v); err != nil {
			return nil, err
		}
		n, pl, err := splitPlan(d, yamlnode.Join(path, name), v) // version: and overrides: (plans.go)
		if err != nil {
			return nil, err
		}
		plans[name] = pl
		s, err := d.Decode(yamlnode.Join(path, name), n)
		if err != nil {
			return nil, err
		}
		r.specs[name] = s
		if ls != nil {
			leases[name] = ls
		}
		r.order = append(r.order, name)
	}
	f := &File{Limiters: make(map[string]Limiter, len(r.order)), Order: r.order}
	for i, name := range r.order {
		s, err := r.named(name, "", nil)
		if err != nil {
			return nil, err
		}
		k := lims.Keys[i]
		l := Limiter{Name: name, Policy: s.Policy, Line: k.Line, Column: k.Column, Shadow: shadows[name]}
		if ls := leases[name]; ls != nil {
			if err := ls.check(s.Policy); err != nil {
				return nil, err
			}
			l.Lease = &ls.lease
		}
		if s.Bucket != nil {
			l.Bucket = &sluice.BucketConfig{Bandwidths: slices.Clone(s.Bucket.Bandwidths)}
		}
		if l.Version, l.Overrides, err = r.plan(plans[name]); err != nil {
			return nil, err
		}
		f.Limiters[name] = l
	}
	return f, nil
}
