package envoyrls

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/conffile"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Load returns the domains of the envoy: section, section (nil when the
// file has none), and, when s.Files, those of envoyproxy/ratelimit's
// config files in s's runtime directories, with s's settings. A domain
// may be in several files, and in the section, only with
// s.MergeDomainConfig.
//
// Every error is a *config.Error that names the file (none for the
// section), the line and the key.
func Load(section *Domains, s Settings) (*Domains, error) {
	var docs []domainDoc
	if section != nil {
		docs = append(docs, section.docs...)
	}
	if s.Files {
		paths, err := s.files()
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			data, err := conffile.Read(p)
			if err != nil {
				return nil, &config.Error{File: p, Msg: conffile.Reason(err), Err: err}
			}
			doc, err := decodeFile(p, data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, doc)
		}
	}
	roots, err := build(docs, s.MergeDomainConfig)
	if err != nil {
		return nil, asConfigError(err)
	}
	return &Domains{roots: roots, docs: docs, settings: s}, nil
}

// dir is the directory whose files are read.
func (s Settings) dir() string {
	if s.RuntimeWatchRoot {
		return filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory)
	}
	return filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory)
}

// files lists the config files, sorted, as envoyproxy/ratelimit's loader
// finds them: every file under dir, recursively, whose path relative to
// it, with '/' read as '.', starts with the app directory and a dot when
// the root is watched; without links to directories, and without dot
// files and directories if so set.
func (s Settings) files() ([]string, error) {
	dir := s.dir()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		msg := "is not a directory"
		if err != nil {
			msg = err.Error()
		}
		return nil, &config.Error{File: dir, Msg: "the runtime directory of envoyproxy/ratelimit's config files: " + msg, Err: err}
	}
	var out []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dot := strings.HasPrefix(e.Name(), ".") && path != dir
		if e.IsDir() {
			if dot && s.RuntimeIgnoreDotFiles {
				return filepath.SkipDir
			}
			return nil
		}
		if dot && s.RuntimeIgnoreDotFiles {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if s.RuntimeWatchRoot && !strings.HasPrefix(strings.ReplaceAll(filepath.ToSlash(rel), "/", "."), s.RuntimeAppDirectory+".") {
			return nil
		}
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return nil // a link to a directory, as Kubernetes' ..data: the loader reads nothing there
		}
		out = append(out, path)
		return nil
	})
	if err != nil {
		return nil, &config.Error{File: dir, Msg: err.Error(), Err: err}
	}
	slices.Sort(out)
	return out, nil
}

// Stamp is a digest of what the config files are: their paths, sizes,
// times and modes, and where the links on the way to them lead, so that
// a change of any, a link swapped at the root included, changes it. It
// is empty when s reads no files.
func (s Settings) Stamp() ([32]byte, error) {
	if !s.Files {
		return [32]byte{}, nil
	}
	h := sha256.New()
	for p := s.RuntimeRoot; ; p = filepath.Dir(p) {
		if target, err := os.Readlink(p); err == nil {
			fmt.Fprintf(h, "link %s %s\n", p, target)
		}
		if parent := filepath.Dir(p); parent == p {
			break
		}
	}
	paths, err := s.files()
	if err != nil {
		return [32]byte{}, err
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return [32]byte{}, err
		}
		fmt.Fprintf(h, "%s %d %d %v\n", p, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// build makes the trees of docs, in order. With merge, the descriptors of
// a domain in several docs are put together; without, a domain twice is
// an error, as is a final key twice at one level of a domain.
func build(docs []domainDoc, merge bool) (map[string]*node, error) {
	roots := make(map[string]*node, len(docs))
	first := make(map[string]place, len(docs))
	seen := make(map[*node]map[string]place)
	for _, doc := range docs {
		root, ok := roots[doc.name]
		if ok && !merge {
			return nil, placeError(doc.at, "duplicate domain '%s' in config file, first at %s; set merge_domain_config (MERGE_DOMAIN_CONFIG) to merge them", doc.name, first[doc.name])
		}
		if !ok {
			root = newNode()
			roots[doc.name], first[doc.name] = root, doc.at
		}
		if err := addDescriptors(root, doc.name+".", doc.descriptors, seen); err != nil {
			return nil, err
		}
	}
	return roots, nil
}

// addDescriptors adds descs under parent, whose stat key, with a trailing
// dot, is prefix. seen records where each final key under a node was
// first written.
func addDescriptors(parent *node, prefix string, descs []descriptorDoc, seen map[*node]map[string]place) error {
	for _, desc := range descs {
		fk := finalKey(desc.key, desc.value)
		if seen[parent] == nil {
			seen[parent] = make(map[string]place)
		}
		if at, dup := seen[parent][fk]; dup {
			return placeError(desc.at, "duplicate descriptor composite key '%s', first at %s", prefix+fk, at)
		}
		seen[parent][fk] = desc.at
		n := newNode()
		n.valueToMetric, n.metadata = desc.valueToMetric, desc.metadata
		if desc.share {
			n.pattern = fk
		}
		if desc.rule != nil {
			r := *desc.rule
			r.statKey = prefix + fk
			n.rule = &r
		}
		if err := addDescriptors(n, prefix+fk+".", desc.children, seen); err != nil {
			return err
		}
		parent.addChild(fk, n)
	}
	return nil
}

// fileError is a *config.Error at p.
func fileError(p place, format string, args ...any) *config.Error {
	return &config.Error{File: p.file, Path: p.path, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

// placeError is an error at p: a *config.Error in a file, a
// *yamlnode.Error in the envoy: section, which package config turns into
// a *config.Error of the server's file.
func placeError(p place, format string, args ...any) error {
	if p.file != "" {
		return fileError(p, format, args...)
	}
	return &yamlnode.Error{Path: p.path, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

// asConfigError turns a *yamlnode.Error of the envoy: section into a
// *config.Error, for errors found after the file was decoded.
func asConfigError(err error) error {
	var e *yamlnode.Error
	if errors.As(err, &e) {
		return &config.Error{Path: e.Path, Line: e.Line, Column: e.Column, Value: e.Value, Msg: e.Msg}
	}
	return err
}
