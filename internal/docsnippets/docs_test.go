package docsnippets

import (
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// imports are the packages a snippet may use without importing them, by
// the name it uses.
var imports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"log":         "log",
	"netip":       "net/netip",
	"time":        "time",
	"redis":       "github.com/redis/go-redis/v9",
	"sluice":      "github.com/sluicehq/sluice",
	"config":      "github.com/sluicehq/sluice/config",
	"grpc":        "google.golang.org/grpc",
	"codes":       "google.golang.org/grpc/codes",
	"grpclimit":   "github.com/sluicehq/sluice/grpclimit",
	"driver":      "github.com/sluicehq/sluice/driver",
	"dynamostore": "github.com/sluicehq/sluice/dynamostore",
	"httplimit":   "github.com/sluicehq/sluice/httplimit",
	"memstore":    "github.com/sluicehq/sluice/memstore",
	"mysqlstore":  "github.com/sluicehq/sluice/mysqlstore",
	"pgstore":     "github.com/sluicehq/sluice/pgstore",
	"redisstore":  "github.com/sluicehq/sluice/redisstore",
	"resilience":  "github.com/sluicehq/sluice/resilience",
	"smooth":      "github.com/sluicehq/sluice/smooth",
	"atomic":      "sync/atomic",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"promhttp":    "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":        "go.opentelemetry.io/otel",
	"sluiceprom":  "github.com/sluicehq/sluice/sluiceprom",
	"sluiceotel":  "github.com/sluicehq/sluice/sluiceotel",
}

// names are the names a snippet may use without declaring them, with
// their types; fileNames are those of one file, where a name's type
// differs from the table's.
var (
	names = map[string]string{
		"ctx":       "context.Context",
		"store":     "driver.Store",
		"userID":    "string",
		"addr":      "string",
		"api":       "http.Handler",
		"batchSize": "httplimit.CostFunc",
		"exports":   "*sluice.Limiter",
	}
	fileNames = map[string]map[string]string{
		"grpc.md": {
			"batchSize": "grpclimit.CostFunc",
			"auth":      "struct{ Unary grpc.UnaryServerInterceptor; Stream grpc.StreamServerInterceptor }",
		},
	}
)

// namesOf returns the names a snippet of file may leave undeclared.
func namesOf(file string) map[string]string {
	out := maps.Clone(names)
	maps.Copy(out, fileNames[filepath.Base(file)])
	return out
}

// snippet is one ```go block of a Markdown file.
type snippet struct {
	where string // file:line of its first line
	file  string
	src   string
}

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippets returns the Go blocks of the files.
func snippets(t *testing.T, files []string) []snippet {
	t.Helper()
	var out []snippet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllSubmatchIndex(b, -1) {
			line := 1 + strings.Count(string(b[:m[2]]), "\n")
			out = append(out, snippet{where: fmt.Sprintf("%s:%d", f, line), file: f, src: string(b[m[2]:m[3]])})
		}
	}
	return out
}

// docFiles is README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// TestSnippetsCompile type-checks every Go snippet of the documentation.
func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module's packages from source")
	}
	all := snippets(t, docFiles(t))
	if len(all) == 0 {
		t.Fatal("no Go snippets found in README.md and docs/*.md")
	}
	c := newChecker()
	for _, s := range all {
		if err := c.check(s.src, namesOf(s.file)); err != nil {
			t.Errorf("%s: the snippet does not compile:\n%v", s.where, err)
		}
	}
}

// TestCheckerCatchesDrift: a snippet that uses what the API does not have
// fails, so that the test above can fail.
func TestCheckerCatchesDrift(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module's packages from source")
	}
	c := newChecker()
	names := namesOf("README.md")
	for _, src := range []string{
		"b, err := sluice.NewBucket(sluice.Config{})", // the old name of BucketConfig
		"l, _ := sluice.NewLimiter(sluice.NoLimit())\nok := l.Allow(ctx, userID)\nif ok {}",
		"x := undeclaredName",
		"if err != nil { ... }",
	} {
		if err := c.check(src, names); err == nil {
			t.Errorf("check(%q) = nil, want an error", src)
		}
	}
	if err := c.check("l, err := sluice.NewLimiter(sluice.NoLimit())\nres, err := l.Allow(ctx, userID)", names); err != nil {
		t.Errorf("check of a good snippet = %v", err)
	}
}

// checker type-checks snippets; its importer keeps the packages it has
// checked, so that each is checked once.
type checker struct {
	fset *token.FileSet
	imp  types.Importer
}

func newChecker() *checker {
	fset := token.NewFileSet()
	return &checker{fset: fset, imp: importer.ForCompiler(fset, "source", nil)}
}

// check wraps src as a file, adds the imports it uses from the table and
// the undeclared names it uses from names, and type-checks it.
func (c *checker) check(src string, names map[string]string) error {
	f := file{types: names}
	if err := f.parse(src); err != nil {
		return err
	}
	for range 2 * (len(imports) + len(names)) {
		undefined, err := c.typeCheck(f.String())
		if err == nil {
			return nil
		}
		if len(undefined) == 0 {
			return err
		}
		for _, name := range undefined {
			switch {
			case imports[name] != "" && !f.imports[imports[name]]:
				f.imports[imports[name]] = true
			case names[name] != "" && !f.names[name]:
				f.names[name] = true
			default:
				return fmt.Errorf("%w\n(%s is in neither table of docs_test.go)", err, name)
			}
		}
	}
	return errors.New("the imports and names never settled")
}

// typeCheck returns the names the file uses undeclared, and the errors.
func (c *checker) typeCheck(src string) (undefined []string, err error) {
	af, err := parser.ParseFile(c.fset, "snippet.go", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, numbered(src))
	}
	var errs []string
	seen := map[string]bool{}
	conf := types.Config{Importer: c.imp, Error: func(err error) {
		var te types.Error
		if errors.As(err, &te) && strings.HasPrefix(te.Msg, "undefined: ") {
			if name := strings.TrimPrefix(te.Msg, "undefined: "); !seen[name] {
				seen[name] = true
				undefined = append(undefined, name)
			}
		}
		errs = append(errs, err.Error())
	}}
	if _, err := conf.Check("snippet", c.fset, []*ast.File{af}, nil); err == nil {
		return nil, nil
	}
	sort.Strings(undefined)
	return undefined, fmt.Errorf("%s\n%s", strings.Join(errs, "\n"), numbered(src))
}

// numbered returns src with line numbers, for messages.
func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

// file is a snippet made a Go file.
type file struct {
	whole   bool              // the snippet is a file of its own
	types   map[string]string // the names it may leave undeclared, with their types
	imports map[string]bool   // by path
	names   map[string]bool   // the table's names to declare
	decls   string            // declarations, as written
	body    string            // statements, wrapped in a function
	used    []string          // the variables body declares, to mark used
}

var importLine = regexp.MustCompile(`(?m)^import\s+(?:"([^"]+)"|\(([^)]*)\))\s*$`)

// parse splits src into its imports and the rest, which is a whole file,
// declarations, or statements.
func (f *file) parse(src string) error {
	f.imports, f.names = map[string]bool{}, map[string]bool{}
	if strings.HasPrefix(strings.TrimSpace(src), "package ") {
		f.whole, f.decls = true, src
		return nil
	}
	for _, m := range importLine.FindAllStringSubmatch(src, -1) {
		for _, p := range append([]string{m[1]}, strings.Fields(m[2])...) {
			if p = strings.Trim(p, `"`); p != "" {
				f.imports[p] = true
			}
		}
	}
	rest := importLine.ReplaceAllString(src, "")
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package snippet\n"+rest, 0); err == nil {
		f.decls = rest
		return nil
	}
	af, err := parser.ParseFile(fset, "", "package snippet\nfunc _() {\n"+rest+"\n}", 0)
	if err != nil {
		return fmt.Errorf("neither declarations nor statements: %w\n%s", err, numbered(rest))
	}
	f.body = rest
	seen := map[string]bool{}
	for _, st := range af.Decls[0].(*ast.FuncDecl).Body.List {
		as, ok := st.(*ast.AssignStmt)
		if !ok || as.Tok != token.DEFINE {
			continue
		}
		for _, lhs := range as.Lhs {
			if id, ok := lhs.(*ast.Ident); ok && id.Name != "_" && !seen[id.Name] {
				seen[id.Name] = true
				f.used = append(f.used, id.Name)
			}
		}
	}
	return nil
}

// String is the Go file.
func (f *file) String() string {
	if f.whole {
		return f.decls
	}
	var b strings.Builder
	b.WriteString("package snippet\n\n")
	for _, p := range sortedKeys(f.imports) {
		fmt.Fprintf(&b, "import %q\n", p)
	}
	for _, n := range sortedKeys(f.names) {
		fmt.Fprintf(&b, "var %s %s\n", n, f.types[n])
	}
	b.WriteString(f.decls)
	if f.body != "" {
		b.WriteString("\nfunc _() error {\n")
		b.WriteString(f.body)
		for _, n := range f.used {
			fmt.Fprintf(&b, "\n_ = %s", n)
		}
		b.WriteString("\nreturn nil\n}\n")
	}
	return b.String()
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
