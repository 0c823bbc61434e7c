package timing

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// bounded lists the test functions allowed to bound a measured duration
// from above, by file (from the repository's root) and function, each with
// why. An entry that no longer bounds anything fails the guard, so the
// list only shrinks.
var bounded = map[string]string{
	// The bounds on real-world events, measured with a generous
	// deadline and asserted with margin; see the comments beside them.
	"redisstore/failover_test.go:runFailover":          "the issue's 5 s from a replica's promotion to working decisions; 0.2-0.8 s measured",
	"pgstore/sweep_test.go:TestSweep":                  "the sweep's issue bound: expired rows gone within the interval (ms) plus a minute",
	"mysqlstore/sweep_test.go:TestSweep":               "the sweep's issue bound: expired rows gone within the interval (ms) plus a minute",
	"internal/app/server/sweep_test.go:TestStoreSweep": "the sweep's issue bound: expired rows gone within sweep_interval (1 s) plus a minute",
}

// TestNoBoundOnElapsedTime fails on a test that compares a duration it
// measured on the real clock (from time.Since, time.Until or the Sub of
// a time.Now) and fails when it is too long: on a loaded machine under
// -race any such bound fails now and then. Such a test asserts the
// mechanism instead, runs on a fake clock, moves the figure to a
// benchmark, or logs it through AtMost, which bounds it only when told
// to; a wait for a real event is written as a deadline (time.Now().After).
// The check is syntactic, by names within a package's test files: it
// misses a duration that travels through a struct, and a bound spelled
// as a select on time.After.
func TestNoBoundOnElapsedTime(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 20 {
		t.Fatalf("found test files in %d directories under %s, want the repository's", len(dirs), root)
	}
	seen := map[string]bool{}
	for _, files := range dirs {
		for _, f := range findBounds(t, files) {
			rel, err := filepath.Rel(root, f.file)
			if err != nil {
				t.Fatal(err)
			}
			key := filepath.ToSlash(rel) + ":" + f.fn
			seen[key] = true
			if _, ok := bounded[key]; !ok {
				t.Errorf("%s:%d: %s bounds a duration measured on the real clock (%s); assert the mechanism, "+
					"use a fake clock or a benchmark, log it with timing.AtMost, or wait with a deadline (see package timing)",
					filepath.ToSlash(rel), f.line, f.fn, f.expr)
			}
		}
	}
	for key := range bounded {
		if !seen[key] {
			t.Errorf("%s is listed in bounded but bounds no measured duration: remove it from the list", key)
		}
	}
}

// TestFindBounds pins what the guard flags and what it lets pass.
func TestFindBounds(t *testing.T) {
	const src = `package p

import "time"

func TestFlagged(t *testing.T) {
	start := time.Now()
	if d := time.Since(start); d > time.Second { // line 7
		t.Error(d)
	}
	if err != nil || time.Second < time.Since(start) { // line 10
		t.Fatal(err)
	}
	lat := make([]time.Duration, 3)
	for i := range lat {
		lat[i] = time.Now().Sub(start)
	}
	if p99 := quantile(lat, .99); p99 <= time.Second { // line 17
		t.Log(p99)
	} else {
		t.Errorf("p99 %v", p99)
	}
	for _, d := range lat {
		if d >= time.Second { // line 23
			t.Error(d)
		}
	}
	if timed() > time.Second { // line 27
		t.Error()
	}
	if time.Since(start) > time.Minute { // line 30: a deadline, but spelled as a bound
		t.Fatal("no event within a minute")
	}
}

func timed() time.Duration {
	start := time.Now()
	return time.Since(start)
}

func TestPasses(t *testing.T) {
	start := time.Now()
	if el := time.Since(start); el < time.Millisecond { // a lower bound
		t.Error(el)
	}
	for deadline := time.Now().Add(time.Minute); !done(); {
		if time.Now().After(deadline) { // a deadline
			t.Fatal()
		}
	}
	for time.Since(start) < time.Minute && !done() { // a deadline
	}
	if d := time.Until(start); d > 0 { // time left
		time.Sleep(d)
	}
	if time.Since(start) > time.Second { // control flow
		return
	}
	lat := []time.Duration{timed(), timed()}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if lat[0] > lat[1] { // measured against measured
		t.Error()
	}
	if n := len(lat); n > 3 { // a count
		t.Error()
	}
}

func BenchmarkPasses(b *testing.B) {
	start := time.Now()
	if time.Since(start) > time.Second {
		b.Fatal()
	}
}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "p_test.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findBounds(t, []string{path}) {
		got = append(got, fmt.Sprintf("%d %s", f.line, f.fn))
	}
	want := []string{"7 TestFlagged", "10 TestFlagged", "17 TestFlagged", "23 TestFlagged", "27 TestFlagged", "30 TestFlagged"}
	if !slices.Equal(got, want) {
		t.Errorf("findBounds = %q, want %q", got, want)
	}
}

// A finding is an upper bound on a measured duration.
type finding struct {
	file, fn string
	line     int
	expr     string
}

// findBounds returns the upper bounds on measured durations in files, the
// test files of one package, outside benchmarks. A name is a duration when
// it is assigned (or ranges over) an expression that holds a call of
// time.Since or time.Until, the Sub of a time.Now or of a name assigned
// one, a call of a function of the package that returns a duration, or
// a duration's name; names are told apart by function only, which errs
// toward flagging. A bound is a comparison in the condition of an if
// statement that fails the test, when true or when false, with a
// duration on the side that fails (not against 0 or another duration).
func findBounds(t *testing.T, files []string) []finding {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	a := &analysis{durFuncs: map[string]bool{}, instants: map[*ast.FuncDecl]map[string]bool{}, durs: map[*ast.FuncDecl]map[string]bool{}}
	for changed := true; changed; {
		changed = false
		for _, f := range parsed {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					changed = a.taint(fd) || changed
				}
			}
		}
	}
	var out []finding
	for _, f := range parsed {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || strings.HasPrefix(fd.Name.Name, "Benchmark") {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				is, ok := n.(*ast.IfStmt)
				if !ok {
					return true
				}
				// A comparison that fails the test when true is a bound
				// if its greater side is measured; one that fails it
				// when false, if its lesser side is.
				var flip []bool
				if fails(is.Body) {
					flip = append(flip, false)
				}
				if is.Else != nil && fails(is.Else) {
					flip = append(flip, true)
				}
				for _, flipped := range flip {
					ast.Inspect(is.Cond, func(n ast.Node) bool {
						be, ok := n.(*ast.BinaryExpr)
						if !ok {
							return true
						}
						var greater, other ast.Expr
						switch be.Op {
						case token.GTR, token.GEQ:
							greater, other = be.X, be.Y
						case token.LSS, token.LEQ:
							greater, other = be.Y, be.X
						default:
							return true
						}
						if flipped {
							greater, other = other, greater
						}
						if a.isDuration(fd, greater) && !a.isDuration(fd, other) && !isZero(other) {
							pos := fset.Position(be.Pos())
							out = append(out, finding{file: pos.Filename, fn: fd.Name.Name, line: pos.Line, expr: render(fset, be)})
						}
						return true
					})
				}
				return true
			})
		}
	}
	slices.SortFunc(out, func(x, y finding) int {
		if c := strings.Compare(x.file, y.file); c != 0 {
			return c
		}
		return x.line - y.line
	})
	return out
}

// analysis holds the names found to be instants (of time.Now) and
// durations, by function, and the package's functions that return a
// duration.
type analysis struct {
	durFuncs map[string]bool
	instants map[*ast.FuncDecl]map[string]bool
	durs     map[*ast.FuncDecl]map[string]bool
}

// taint marks the instants and durations of fd and, when it or a function
// literal in it returns a duration, its name; it reports whether it marked
// anything new.
func (a *analysis) taint(fd *ast.FuncDecl) bool {
	if a.instants[fd] == nil {
		a.instants[fd], a.durs[fd] = map[string]bool{}, map[string]bool{}
	}
	changed := false
	mark := func(set map[string]bool, lhs ast.Expr) {
		if name := baseName(lhs); name != "" && name != "_" && !set[name] {
			set[name], changed = true, true
		}
	}
	assign := func(lhs []ast.Expr, rhs []ast.Expr) {
		for i, l := range lhs {
			r := rhs[0]
			if len(rhs) == len(lhs) {
				r = rhs[i]
			}
			if a.isInstant(fd, r) {
				mark(a.instants[fd], l)
			}
			if a.isDuration(fd, r) {
				mark(a.durs[fd], l)
			}
		}
	}
	// named are the function literals of fd assigned to a name, and funcs
	// the names of fd and of the literals around the node being walked,
	// innermost last, for the return statements within them.
	named := map[*ast.FuncLit]string{}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
			for i, r := range as.Rhs {
				if fl, ok := r.(*ast.FuncLit); ok {
					named[fl] = baseName(as.Lhs[i])
				}
			}
		}
		return true
	})
	var funcs []string
	var walk func(body *ast.BlockStmt, name string)
	walk = func(body *ast.BlockStmt, name string) {
		funcs = append(funcs, name)
		defer func() { funcs = funcs[:len(funcs)-1] }()
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				assign(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				if len(n.Values) > 0 {
					lhs := make([]ast.Expr, len(n.Names))
					for i, id := range n.Names {
						lhs[i] = id
					}
					assign(lhs, n.Values)
				}
			case *ast.RangeStmt:
				if n.Value != nil && a.isDuration(fd, n.X) {
					mark(a.durs[fd], n.Value)
				}
			case *ast.ReturnStmt:
				if fn := funcs[len(funcs)-1]; fn != "" && !a.durFuncs[fn] && slices.ContainsFunc(n.Results, func(e ast.Expr) bool { return a.isDuration(fd, e) }) {
					a.durFuncs[fn], changed = true, true
				}
			case *ast.FuncLit:
				walk(n.Body, named[n])
				return false
			}
			return true
		})
	}
	walk(fd.Body, fd.Name.Name)
	return changed
}

// fails reports whether n, a branch of an if statement, fails the test
// itself, outside any function literal: it calls a method named as
// testing.TB's Error, Errorf, Fatal, Fatalf, Fail or FailNow.
func fails(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Error", "Errorf", "Fatal", "Fatalf", "Fail", "FailNow":
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// isInstant reports whether e is time.Now() or a name of fd assigned one.
func (a *analysis) isInstant(fd *ast.FuncDecl, e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		return isPkgCall(e, "time", "Now")
	case *ast.Ident:
		return a.instants[fd][e.Name]
	case *ast.IndexExpr:
		return a.isInstant(fd, e.X)
	}
	return false
}

// isDuration reports whether e holds a duration measured on the real
// clock: see findBounds. Field names, keys and types are not names.
func (a *analysis) isDuration(fd *ast.FuncDecl, e ast.Expr) bool {
	found := false
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit, *ast.StructType, *ast.InterfaceType, *ast.FuncType, *ast.MapType, *ast.ChanType, *ast.ArrayType:
			return false
		case *ast.SelectorExpr:
			ast.Inspect(n.X, visit)
			return false
		case *ast.KeyValueExpr:
			ast.Inspect(n.Value, visit)
			return false
		case *ast.CompositeLit:
			for _, e := range n.Elts {
				ast.Inspect(e, visit)
			}
			return false
		case *ast.Ident:
			found = a.durs[fd][n.Name]
		case *ast.CallExpr:
			switch fn := ast.Unparen(n.Fun).(type) {
			case *ast.Ident:
				if fn.Name == "len" || fn.Name == "cap" {
					return false
				}
				found = a.durFuncs[fn.Name]
			case *ast.SelectorExpr:
				if isPkgCall(n, "time", "Since") || isPkgCall(n, "time", "Until") {
					found = true
				} else if fn.Sel.Name == "Sub" && len(n.Args) == 1 && (a.isInstant(fd, fn.X) || a.isInstant(fd, n.Args[0])) {
					found = true
				}
			}
		}
		return !found
	}
	ast.Inspect(e, visit)
	return found
}

// baseName is the name a write to e assigns: x for x, x[i], x.f, *x.
func baseName(e ast.Expr) string {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.Ident:
			return x.Name
		case *ast.IndexExpr:
			e = x.X
		case *ast.SelectorExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		default:
			return ""
		}
	}
}

// isPkgCall reports whether c calls pkg.name.
func isPkgCall(c *ast.CallExpr, pkg, name string) bool {
	sel, ok := ast.Unparen(c.Fun).(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func isZero(e ast.Expr) bool {
	lit, ok := ast.Unparen(e).(*ast.BasicLit)
	return ok && lit.Value == "0"
}

func render(fset *token.FileSet, e ast.Expr) string {
	p := fset.Position(e.Pos())
	q := fset.Position(e.End())
	b, err := os.ReadFile(p.Filename)
	if err != nil || q.Offset > len(b) {
		return "?"
	}
	return string(b[p.Offset:q.Offset])
}
