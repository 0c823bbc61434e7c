package policyspec

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../../"

func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(root + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// fields is a policy's fields as a doc states them.
type fields struct{ required, optional []string }

// want returns what the table says of every policy, with or without the
// compatibility policies.
func want(compat bool) map[string]fields {
	out := map[string]fields{}
	for _, s := range All() {
		if s.Compat != nil && !compat {
			continue
		}
		var f fields
		for _, fd := range s.Fields {
			if fd.Required {
				f.required = append(f.required, fd.Name)
			} else {
				f.optional = append(f.optional, fd.Name)
			}
		}
		out[s.Name] = f
	}
	return out
}

// list splits a cell of names: "`limit`, `interval`", "limit, interval",
// "-" or "".
func list(cell string) []string {
	cell = strings.TrimSpace(strings.ReplaceAll(cell, "`", ""))
	if cell == "" || cell == "-" {
		return nil
	}
	return strings.Split(cell, ", ")
}

func checkFields(t *testing.T, doc string, got, want map[string]fields) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s does not list policy %s", doc, name)
		case !slices.Equal(g.required, w.required) || !slices.Equal(g.optional, w.optional):
			t.Errorf("%s: policy %s takes %v and optionally %v, want %v and optionally %v",
				doc, name, g.required, g.optional, w.required, w.optional)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s lists policy %s, which the table does not have", doc, name)
		}
	}
}

// TestConfigDoc checks the policy table of package config's doc: every
// policy of config files with its required and optional keys, and nothing
// else.
func TestConfigDoc(t *testing.T) {
	doc := readDoc(t, "config/doc.go")
	_, table, ok := strings.Cut(doc, "//\tpolicy          required         optional  sluice constructor\n")
	if !ok {
		t.Fatal("config/doc.go has no policy table (policy, required, optional, sluice constructor)")
	}
	table, _, _ = strings.Cut(table, "//\n")
	cols := regexp.MustCompile(`\s{2,}`)
	got := map[string]fields{}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		c := cols.Split(strings.TrimPrefix(line, "//\t"), 4)
		if len(c) != 4 {
			t.Fatalf("config/doc.go: policy row %q does not have 4 columns", line)
		}
		got[c[0]] = fields{list(c[1]), list(c[2])}
	}
	checkFields(t, "config/doc.go", got, want(false))
}

// TestFormatDoc checks the LIMITER table of the vector format: every
// policy, the compatibility ones included, with its fields.
func TestFormatDoc(t *testing.T) {
	doc := readDoc(t, "conformance/FORMAT.md")
	_, table, ok := strings.Cut(doc, "| policy | required fields | optional fields |\n|---|---|---|\n")
	if !ok {
		t.Fatal("conformance/FORMAT.md has no LIMITER table (policy, required fields, optional fields)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	got := map[string]fields{}
	for _, row := range strings.Split(table, "\n") {
		c := strings.Split(row, "|")
		if len(c) != 5 {
			t.Fatalf("FORMAT.md: row %q does not have 3 cells", row)
		}
		got[strings.Trim(strings.TrimSpace(c[1]), "`")] = fields{list(c[2]), list(c[3])}
	}
	checkFields(t, "conformance/FORMAT.md", got, want(true))
}

// firstCells returns the backquoted names in the first cell of each row of
// the markdown table under the header line header.
func firstCells(t *testing.T, doc, path, header string) []string {
	t.Helper()
	_, table, ok := strings.Cut(doc, header+"\n")
	if !ok {
		t.Fatalf("%s has no table %q", path, header)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var names []string
	for _, row := range strings.Split(table, "\n")[1:] { // after |---|
		first := strings.Split(row, "|")[1]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// TestPoliciesDoc checks docs/policies.md: its comparison table has a row
// for every policy of config files and no other, and each has its section.
// The other tables by policy in the docs name only policies of the table.
func TestPoliciesDoc(t *testing.T) {
	doc := readDoc(t, "docs/policies.md")
	w := want(false)
	glance := firstCells(t, doc, "docs/policies.md", "| policy | most in one interval | smoothness | state per key | exactness | reserve | use it for |")
	for name := range w {
		if !slices.Contains(glance, name) {
			t.Errorf("docs/policies.md: the comparison table has no row for %s", name)
		}
		if !strings.Contains(doc, "\n## "+name+"\n") {
			t.Errorf("docs/policies.md has no section ## %s", name)
		}
	}
	for _, h := range regexp.MustCompile(`(?m)^## ([a-z0-9_]+)$`).FindAllStringSubmatch(doc, -1) {
		if _, ok := w[h[1]]; !ok {
			t.Errorf("docs/policies.md has a section ## %s, a policy the table does not have", h[1])
		}
	}
	others := [][3]string{
		{"docs/policies.md", doc, "| policy | what Cancel gives back once later requests were taken |"},
		{"docs/deploy.md", readDoc(t, "docs/deploy.md"), "| policy | bytes per key |"},
	}
	for _, o := range others {
		names := firstCells(t, o[1], o[0], o[2])
		if o[0] == "docs/policies.md" {
			names = append(names, glance...)
		}
		for _, name := range names {
			if _, ok := w[name]; !ok {
				t.Errorf("%s names policy %s in a table by policy; the table has no such policy", o[0], name)
			}
		}
	}
}

// TestDocsNameKnownPolicies: wherever the docs write a description
// ("policy: NAME" in YAML, "policy": "NAME" in JSON), NAME is a policy of
// the table.
func TestDocsNameKnownPolicies(t *testing.T) {
	files := []string{"README.md", "config/doc.go", "conformance/FORMAT.md", "conformance/doc.go"}
	md, err := os.ReadDir(root + "docs")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range md {
		if strings.HasSuffix(e.Name(), ".md") {
			files = append(files, "docs/"+e.Name())
		}
	}
	w := want(true)
	// In YAML the name ends the line or a flow mapping's entry; prose
	// ("every policy: more tokens") does neither.
	re := regexp.MustCompile(`(?m)(?:\bpolicy: |"policy": *")([a-z0-9_]+)(?:[",}]|$)`)
	found := 0
	for _, f := range files {
		for _, m := range re.FindAllStringSubmatch(readDoc(t, f), -1) {
			found++
			if _, ok := w[m[1]]; !ok {
				t.Errorf("%s describes a limiter of policy %s, which the table does not have", f, m[1])
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d descriptions in the docs, want at least 10: is the pattern stale?", found)
	}
}
