package docsnippets

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policyspec"
)

// The tests of this file keep docs/architecture.md's lists true: the tree
// names every directory of Go files, and adding a policy changes only the
// files "Adding a policy" lists.

const architecture = "docs/architecture.md"

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// section returns the text of md's section under heading, up to the next
// heading of its level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(md, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", architecture, heading)
	}
	if i := strings.Index(after, "\n## "); i >= 0 {
		after = after[:i]
	}
	return after
}

// treePaths returns the paths that the tree block of the section names: on
// each line that does not start with a space, the words before the first
// run of two spaces, with {a,b} expanded and "sluice/" as the root, ".".
// A word without a slash is returned as it is, for treeProblems to
// report: it is a description that lacks its two spaces.
func treePaths(tree string) []string {
	block := regexp.MustCompile("(?s)```\n(.*?)```").FindStringSubmatch(tree)
	if block == nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(block[1], "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		names, _, _ := strings.Cut(line, "  ")
		for _, name := range strings.Fields(names) {
			for _, p := range expand(name) {
				p = strings.TrimSuffix(p, "/")
				if p == "sluice" {
					p = "."
				}
				out = append(out, p)
			}
		}
	}
	return out
}

// expand expands one {a,b,...} of name.
func expand(name string) []string {
	i, j := strings.Index(name, "{"), strings.Index(name, "}")
	if i < 0 || j < i {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[i+1:j], ",") {
		out = append(out, name[:i]+alt+name[j+1:])
	}
	return out
}

// matches reports whether dir is the path p names, where <name> in p
// stands for any one directory.
func matches(p, dir string) bool {
	pattern := regexp.MustCompile(`<[a-z]+>`).ReplaceAllString(p, "*")
	ok, err := path.Match(pattern, dir)
	return err == nil && ok
}

// goDirs returns the directories under root that hold .go files, as
// slash paths relative to root. A directory with a go.mod of its own is
// another module's root: it is returned, and what lies under it is that
// module's. Hidden directories and testdata are skipped.
func goDirs(root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					seen[rel] = true
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			seen[path.Dir(rel)] = true
		}
		return nil
	})
	return slices.Sorted(func(yield func(string) bool) {
		for d := range seen {
			if !yield(d) {
				return
			}
		}
	}), err
}

// treeProblems returns what is wrong with the tree's paths against dirs,
// the directories that hold Go files, and exists, which says whether a
// path is there: a directory of Go files the tree does not name, and a
// path the tree names that is not there.
func treeProblems(paths, dirs []string, exists func(pattern string) bool) []string {
	var out []string
	for _, d := range dirs {
		if !slices.ContainsFunc(paths, func(p string) bool { return matches(p, d) }) {
			out = append(out, d+"/ holds Go files but is not in the tree")
		}
	}
	for _, p := range paths {
		if !exists(p) {
			out = append(out, p+" is in the tree but not in the repository")
		}
	}
	return out
}

// existsIn returns the exists of treeProblems for the repository at root.
func existsIn(root string) func(string) bool {
	return func(p string) bool {
		pattern := regexp.MustCompile(`<[a-z]+>`).ReplaceAllString(p, "*")
		found, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		return err == nil && len(found) > 0
	}
}

// TestArchitectureTree: the tree of docs/architecture.md names every
// directory of the module that holds Go files (and the roots of the other
// modules in the repository), and every path it names is there.
func TestArchitectureTree(t *testing.T) {
	md := readFile(t, filepath.Join(repoRoot, architecture))
	paths := treePaths(section(t, md, "## The tree"))
	if len(paths) == 0 {
		t.Fatalf("%s: the tree has no paths", architecture)
	}
	dirs, err := goDirs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range treeProblems(paths, dirs, existsIn(repoRoot)) {
		t.Errorf("%s: %s", architecture, p)
	}
}

// policyListed returns the paths that "Adding a policy" lists: the
// backquoted words of its numbered items that are paths (with a slash, or
// a .go or .md name).
func policyListed(section string) []string {
	var items strings.Builder
	inItem := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case regexp.MustCompile(`^[0-9]+\. `).MatchString(line):
			inItem = true
		case !strings.HasPrefix(line, " "):
			inItem = false
		}
		if inItem {
			items.WriteString(line + "\n")
		}
	}
	var out []string
	for _, m := range regexp.MustCompile("`([^`\\s]+)`").FindAllStringSubmatch(items.String(), -1) {
		w := m[1]
		if strings.ContainsAny(w, "()[]") {
			continue
		}
		if strings.Contains(w, "/") || strings.HasSuffix(w, ".go") || strings.HasSuffix(w, ".md") {
			out = append(out, strings.TrimSuffix(w, "/"))
		}
	}
	return out
}

// listedFile reports whether file (a slash path from the root) is one of
// listed, or lies in a directory that one of them names.
func listedFile(listed []string, file string) bool {
	if slices.Contains(listed, file) {
		return true
	}
	for dir := path.Dir(file); dir != "."; dir = path.Dir(dir) {
		if slices.ContainsFunc(listed, func(p string) bool { return matches(p, dir) }) {
			return true
		}
	}
	return false
}

// policyRule is what a Go file outside the listed files may not do, for
// adding a policy to need no change to it:
//
//   - import a policy's machine package, internal/policy/<name>: the
//     machines are known to the constructors (policies.go) and to one
//     another only. Two are known elsewhere on purpose: tokenbucket, the
//     state of the Bucket API (Bucket, KeyBucket, a token-bucket
//     limiter's buckets in the engine and its records), which a policy
//     added later does not change, and resilience4j, the machine of
//     package resilience's compatibility limiter, not a Policy;
//   - branch on a policy's kind: a string literal that is the Name of one
//     of policyspec's policies (those with a Policy) in a case of a switch
//     or beside == or !=, as a switch on kinds would be written. A list of
//     kinds held for another purpose (Symfony's set of policies in
//     config/symfony.go) is not a branch and stays allowed;
//   - in package sluice, use one of the Kind constants (kind...) that
//     policies.go declares, the same branch by name.
//
// A capability is asked of the machine instead (policy.Leaser,
// policy.Reserves, ...; docs/architecture.md, "The engine").
type policyRule struct {
	machines   []string            // the machine packages' import paths
	importedBy map[string][]string // a machine's import path → where else it may be imported (path prefixes)
	kinds      []string            // policyspec's policy names
	kindConsts []string            // package sluice's Kind constants
}

// newPolicyRule returns the rule of the repository at root.
func newPolicyRule(t *testing.T, root string) policyRule {
	t.Helper()
	const module = "github.com/sluicehq/sluice/"
	entries, err := os.ReadDir(filepath.Join(root, "internal/policy"))
	if err != nil {
		t.Fatal(err)
	}
	r := policyRule{importedBy: map[string][]string{
		module + "internal/policy/tokenbucket":  {""},
		module + "internal/policy/resilience4j": {"resilience/"},
	}}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "policytest" {
			r.machines = append(r.machines, module+"internal/policy/"+e.Name())
		}
	}
	for _, s := range policyspec.All() {
		if s.Policy != nil {
			r.kinds = append(r.kinds, s.Name)
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "policies.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) && slices.Contains(r.kinds, stringLit(vs.Values[i])) {
					r.kindConsts = append(r.kindConsts, name.Name)
				}
			}
		}
	}
	if len(r.machines) == 0 || len(r.kinds) == 0 || len(r.kindConsts) == 0 {
		t.Fatalf("policy rule found nothing to check: %+v", r)
	}
	return r
}

// stringLit is the value of e when it is a string literal, else "".
func stringLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		if s, err := strconv.Unquote(b.Value); err == nil {
			return s
		}
	}
	return ""
}

// problems returns what file, at the slash path name from the root,
// does against the rule.
func (r policyRule) problems(fset *token.FileSet, name string, f *ast.File) []string {
	var out []string
	for _, im := range f.Imports {
		p := stringLit(im.Path)
		if !slices.Contains(r.machines, p) {
			continue
		}
		if slices.ContainsFunc(r.importedBy[p], func(prefix string) bool { return strings.HasPrefix(name, prefix) }) {
			continue
		}
		out = append(out, fset.Position(im.Pos()).String()+": imports the machine package "+p)
	}
	kind := func(e ast.Expr) {
		if s := stringLit(e); slices.Contains(r.kinds, s) {
			out = append(out, fset.Position(e.Pos()).String()+": branches on the policy kind "+strconv.Quote(s))
		}
	}
	root := f.Name.Name == "sluice"
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CaseClause:
			for _, e := range n.List {
				kind(e)
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				kind(n.X)
				kind(n.Y)
			}
		case *ast.Ident:
			if root && slices.Contains(r.kindConsts, n.Name) {
				out = append(out, fset.Position(n.Pos()).String()+": uses the Kind constant "+n.Name)
			}
		}
		return true
	})
	return out
}

// TestAddingAPolicy: the files that "Adding a policy" lists are there, and
// no other Go file of the module (tests aside, which may name any policy)
// knows the policies by policyRule: so that adding one changes only the
// listed files.
func TestAddingAPolicy(t *testing.T) {
	md := readFile(t, filepath.Join(repoRoot, architecture))
	listed := policyListed(section(t, md, "## Adding a policy"))
	if len(listed) == 0 {
		t.Fatalf("%s: \"Adding a policy\" lists no files", architecture)
	}
	for _, p := range listed {
		if !existsIn(repoRoot)(p) {
			t.Errorf("%s: \"Adding a policy\" lists %s, which is not in the repository", architecture, p)
		}
	}
	r := newPolicyRule(t, repoRoot)
	dirs, err := goDirs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(repoRoot, d, "go.mod")); err == nil && d != "." {
			continue // another module
		}
		files, _ := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(d), "*.go"))
		for _, file := range files {
			name := path.Join(d, filepath.Base(file))
			if strings.HasSuffix(name, "_test.go") || listedFile(listed, name) {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range r.problems(fset, name, f) {
				t.Errorf("%s: adding a policy could need a change here, and %s's \"Adding a policy\" does not list this file", p, architecture)
			}
		}
	}
}

// TestArchitectureCheckersCatchDrift: a tree that misses a directory or
// names one that is gone, and a file outside the list that imports a
// machine, switches on a kind or uses a Kind constant, are reported, so
// that the tests above can fail.
func TestArchitectureCheckersCatchDrift(t *testing.T) {
	tree := "```\nsluice/      the API\ninternal/{a,b}/  two\ninternal/p/<name>/  machines\ngone/  a path no more\n```\n"
	paths := treePaths(tree)
	if want := []string{".", "internal/a", "internal/b", "internal/p/<name>", "gone"}; !slices.Equal(paths, want) {
		t.Fatalf("treePaths = %q, want %q", paths, want)
	}
	dirs := []string{".", "internal/a", "internal/b", "internal/p/x", "internal/c"}
	exists := func(p string) bool { return p != "gone" }
	got := treeProblems(paths, dirs, exists)
	want := []string{"internal/c/ holds Go files but is not in the tree", "gone is in the tree but not in the repository"}
	if !slices.Equal(got, want) {
		t.Errorf("treeProblems = %q, want %q", got, want)
	}

	r := newPolicyRule(t, repoRoot)
	src := `package sluice

import _ "github.com/sluicehq/sluice/internal/policy/gcra"

func f(k string) bool {
	switch k {
	case "sliding_log":
	}
	return k == "fixed_window" || k == kindGCRA
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "drift.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.problems(fset, "drift.go", f); len(got) != 4 {
		t.Errorf("problems of a file that imports a machine, switches on a kind, compares with one and uses a Kind constant = %q, want 4", got)
	}
	listed := policyListed("Intro `not/listed`.\n\n1. `internal/p/<name>/`: the machine\n2. `policies.go`: `sluice.Foo(...)` over\n   `machinePolicy`, `docs/x.md`\n\nAfter `not/either`.\n")
	if want := []string{"internal/p/<name>", "policies.go", "docs/x.md"}; !slices.Equal(listed, want) {
		t.Errorf("policyListed = %q, want %q", listed, want)
	}
	for file, want := range map[string]bool{"policies.go": true, "internal/p/gcra/gcra.go": true, "limiter.go": false, "internal/p/x.go": false} {
		if got := listedFile(listed, file); got != want {
			t.Errorf("listedFile(%q) = %v, want %v", file, got, want)
		}
	}
}
