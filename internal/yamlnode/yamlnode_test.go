package yamlnode

import (
	"errors"
	"math"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func parse(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// TestErrors: each decoder refuses what it must, at the right node, in
// the words the three callers share.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, src string
		decode    func(d *Decoder, n *yaml.Node) error
		want      string
	}{
		{"duplicate key", "a: 1\nb: 2\na: 3\n", mapping, `x.a (line 3): duplicate key "a", first at line 1`},
		{"merge key", "base: &b {a: 1}\nc:\n  <<: *b\n", func(d *Decoder, n *yaml.Node) error {
			m, _ := d.Mapping("x", n)
			_, err := d.Mapping("x.c", m.Vals[1])
			return err
		}, `x.c.<< (line 3): merge keys (<<) are not supported`},
		{"unknown key", "a: 1\nzz: 2\n", func(d *Decoder, n *yaml.Node) error {
			_, err := d.Strict("x", n, []string{"a", "b"}, nil)
			return err
		}, `x.zz (line 2): unknown key "zz"; valid keys: a, b`},
		{"missing key", "a: 1\n", func(d *Decoder, n *yaml.Node) error {
			_, err := d.Strict("x", n, []string{"a", "b"}, []string{"b"})
			return err
		}, `x (line 1): missing required key "b"`},
		{"not a mapping", "[1]\n", mapping, `x (line 1): must be a mapping, got a list`},
		{"quoted integer", `"5"`, scalar((*Decoder).Int64), `x (line 1): must be an integer, got string "5"`},
		{"leading zero", "017", scalar((*Decoder).Int64), `must not have a leading zero (octal is written 0o17), got 017`},
		{"beyond int64", "9223372036854775808", scalar((*Decoder).Int64), `overflows int64`},
		{"fraction", "1.5", scalar((*Decoder).Int64), `must be an integer, got float 1.5`},
		{"unquoted number", "8080", scalar((*Decoder).String), `must be a string, got integer 8080 (quote it)`},
		{"yes is no bool", "yes", scalar((*Decoder).Bool), `must be true or false, got string "yes"`},
		{"null", "~", scalar((*Decoder).String), `must be a string, got nothing`},
		{"bad time", "2024-13-01", scalar((*Decoder).Time), `must be an RFC 3339 time`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.decode(new(Decoder), parse(t, tt.src))
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want an *Error containing %q", err, tt.want)
			}
		})
	}
}

func mapping(d *Decoder, n *yaml.Node) error {
	_, err := d.Mapping("x", n)
	return err
}

// scalar adapts a scalar decoder to the table.
func scalar[T any](f func(*Decoder, string, *yaml.Node) (T, error)) func(*Decoder, *yaml.Node) error {
	return func(d *Decoder, n *yaml.Node) error {
		_, err := f(d, "x", n)
		return err
	}
}

func TestValues(t *testing.T) {
	d := new(Decoder)
	for src, want := range map[string]int64{"1_000_000": 1e6, "0x10": 16, "0o17": 15, "-3": -3} {
		if got, err := d.Int64("x", parse(t, src)); err != nil || got != want {
			t.Errorf("Int64(%s) = %d, %v; want %d", src, got, err, want)
		}
	}
	m, err := d.Mapping("", parse(t, "a: &v hello\nb: *v\n"))
	if err != nil {
		t.Fatal(err)
	}
	path, v := m.Value("b")
	if s, err := d.String(path, v); err != nil || s != "hello" || path != "b" {
		t.Errorf("String(%s) through an alias = %q, %v; want hello at b", path, s, err)
	}
}

// TestAliasBomb: nested aliases that would expand to billions of nodes
// stop at MaxNodes instead of running for hours.
func TestAliasBomb(t *testing.T) {
	src := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		src += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = name
	}
	d := new(Decoder)
	var walk func(path string, n *yaml.Node) error
	walk = func(path string, n *yaml.Node) error {
		n, err := d.Deref(path, n)
		if err != nil {
			return err
		}
		for i, c := range n.Content {
			if err := walk(Index(path, i), c); err != nil {
				return err
			}
		}
		return nil
	}
	err := walk("", parse(t, src))
	if err == nil || !strings.Contains(err.Error(), "document too large") {
		t.Errorf("walking 10^8 nodes = %v, want document too large", err)
	}
}

// TestFromJSON: JSON reads as the YAML it is, escapes and integers beyond
// float64's precision included, and the strict decoders refuse what they
// refuse in YAML.
func TestFromJSON(t *testing.T) {
	n, err := FromJSON([]byte(`{"s": "a\/b\u00e9\t", "big": 9223372036854775807, "f": 2.5, "e": 1e3, "b": true, "z": null, "l": [1, {"k": "v"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	d := new(Decoder)
	m, err := d.Mapping("x", n)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.String(m.Value("s")); err != nil || s != "a/bé\t" {
		t.Errorf("String(s) = %q, %v; want %q", s, err, "a/bé\t")
	}
	if v, err := d.Int64(m.Value("big")); err != nil || v != math.MaxInt64 {
		t.Errorf("Int64(big) = %d, %v; want MaxInt64", v, err)
	}
	if v, err := d.Float64(m.Value("f")); err != nil || v != 2.5 {
		t.Errorf("Float64(f) = %v, %v; want 2.5", v, err)
	}
	if _, err := d.Int64(m.Value("e")); err == nil || !strings.Contains(err.Error(), "must be an integer, got float 1e3") {
		t.Errorf("Int64(1e3) = %v, want an error", err)
	}
	if v, err := d.Bool(m.Value("b")); err != nil || !v {
		t.Errorf("Bool(b) = %v, %v; want true", v, err)
	}
	if _, err := d.String(m.Value("z")); err == nil || !strings.Contains(err.Error(), "got nothing") {
		t.Errorf("String(null) = %v, want an error", err)
	}
	items, err := d.List(m.Value("l"))
	if err != nil || len(items) != 2 || items[1].Kind != yaml.MappingNode {
		t.Errorf("List(l) = %v, %v; want an integer and a mapping", items, err)
	}
	dup, err := FromJSON([]byte(`{"a": 1, "a": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Mapping("x", dup); err == nil || !strings.Contains(err.Error(), `duplicate key "a"`) {
		t.Errorf("Mapping of a duplicate key = %v, want an error", err)
	}
	for _, bad := range []string{``, `{`, `{"a": 1} 2`, `[1,]`} {
		if _, err := FromJSON([]byte(bad)); err == nil {
			t.Errorf("FromJSON(%q) = nil error", bad)
		}
	}
}

func TestFloat64(t *testing.T) {
	d := new(Decoder)
	for src, want := range map[string]float64{"1": 1, "2.5": 2.5, "-0.5": -0.5, "1e3": 1000} {
		if got, err := d.Float64("x", parse(t, src)); err != nil || got != want {
			t.Errorf("Float64(%s) = %v, %v; want %v", src, got, err, want)
		}
	}
	for _, src := range []string{`"1"`, ".inf", ".nan", "true", "~"} {
		if _, err := d.Float64("x", parse(t, src)); err == nil {
			t.Errorf("Float64(%s) = nil error, want one", src)
		}
	}
}

// FuzzFromJSON: any input is a tree or an error, never a panic, and a
// tree's scalars keep their text.
func FuzzFromJSON(f *testing.F) {
	f.Add([]byte(`{"policy": "gcra", "limit": 9223372036854775807, "rate": {"interval": "1s", "amount": 5}}`))
	f.Add([]byte(`[1, 2.5, "x", null, true, {"a": [{}]}]`))
	f.Add([]byte(`{"a": 1, "a": 2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := FromJSON(data)
		if err != nil {
			return
		}
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
				if _, err := new(Decoder).Int64("x", n); err != nil && !strings.Contains(err.Error(), "overflows") && !strings.Contains(err.Error(), "leading zero") {
					t.Fatalf("Int64(%q) = %v", n.Value, err)
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(n)
	})
}
