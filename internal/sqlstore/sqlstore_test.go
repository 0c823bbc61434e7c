package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

type identErr struct{ option, name string }

func (e *identErr) Error() string { return e.option + ": " + e.name }

var testDialect = Dialect{
	Pkg:             "teststore",
	MaxIdent:        63,
	Strategies:      2,
	IdentifierError: func(option, name string) error { return &identErr{option, name} },
}

type option func(*Config)

func TestConfigureNames(t *testing.T) {
	tests := []struct {
		name    string
		opt     option
		wantBad string // the name refused, "" for none
	}{
		{"default", func(*Config) {}, ""},
		{"longest", func(c *Config) { c.SetTable(strings.Repeat("t", 63)) }, ""},
		{"too long", func(c *Config) { c.SetTable(strings.Repeat("t", 64)) }, strings.Repeat("t", 64)},
		{"schema", func(c *Config) { c.SetTable("s_1.t_2") }, ""},
		{"bad schema", func(c *Config) { c.SetTable("1s.t") }, "1s.t"},
		{"underscore first", func(c *Config) { c.Key = "_k" }, ""},
		{"digit first", func(c *Config) { c.Key = "9k" }, "9k"},
		{"space", func(c *Config) { c.State = "s t" }, "s t"},
		{"non-ASCII letter", func(c *Config) { c.Expires = "é" }, "é"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Configure(testDialect, []option{tt.opt})
			var ie *identErr
			switch {
			case tt.wantBad == "" && err != nil:
				t.Errorf("Configure = %v, want nil", err)
			case tt.wantBad != "" && (!errors.As(err, &ie) || ie.name != tt.wantBad):
				t.Errorf("Configure = %v, want the identifier error of %q", err, tt.wantBad)
			}
		})
	}
}

func TestConfigureBounds(t *testing.T) {
	fold := testDialect
	fold.FoldCase = true
	tests := []struct {
		name string
		d    Dialect
		opt  option
		ok   bool
	}{
		{"same column", testDialect, func(c *Config) { c.Key, c.State = "a", "a" }, false},
		{"columns differing in case", testDialect, func(c *Config) { c.Key, c.State = "a", "A" }, true},
		{"columns differing in case, case-insensitive", fold, func(c *Config) { c.Key, c.State = "a", "A" }, false},
		{"last strategy", testDialect, func(c *Config) { c.Strategy = SelectForUpdate }, true},
		{"strategy the store lacks", testDialect, func(c *Config) { c.Strategy = AdvisoryLock }, false},
		{"negative strategy", testDialect, func(c *Config) { c.Strategy = -1 }, false},
		{"negative attempts", testDialect, func(c *Config) { c.MaxAttempts = -1 }, false},
		{"negative cache", testDialect, func(c *Config) { c.StateCache = -1 }, false},
		{"no cache", testDialect, func(c *Config) { c.StateCache = 0 }, true},
		{"sweep of 0", testDialect, func(c *Config) { c.SweepSet = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Configure(tt.d, []option{tt.opt})
			if (err == nil) != tt.ok {
				t.Errorf("Configure = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "teststore: ") {
				t.Errorf("Configure = %q, want it prefixed with the package", err)
			}
		})
	}
}

func TestName(t *testing.T) {
	tests := []struct {
		s    Strategy
		n    int
		want string
	}{
		{SingleStatement, 2, "SingleStatement"},
		{SelectForUpdate, 2, "SelectForUpdate"},
		{AdvisoryLock, 3, "AdvisoryLock"},
		{AdvisoryLock, 2, "Strategy(2)"},
		{-1, 3, "Strategy(-1)"},
	}
	for _, tt := range tests {
		if got := Name(tt.s, tt.n); got != tt.want {
			t.Errorf("Name(%d, %d) = %q, want %q", int(tt.s), tt.n, got, tt.want)
		}
	}
}

// row is a Row that scans state, or fails with err.
type row struct {
	state []byte
	err   error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*[]byte) = r.state
	return nil
}

func TestReadState(t *testing.T) {
	errNoRows := errors.New("no rows")
	errBroken := errors.New("broken")
	tests := []struct {
		name      string
		row       row
		wantState []byte
		wantFound bool
		wantErr   error
	}{
		{"no row", row{err: errNoRows}, nil, false, nil},
		{"wrapped no row", row{err: fmt.Errorf("scan: %w", errNoRows)}, nil, false, nil},
		{"empty row", row{state: []byte{}}, nil, true, nil},
		{"state", row{state: []byte("s")}, []byte("s"), true, nil},
		{"failure", row{err: errBroken}, nil, false, errBroken},
	}
	// The dialect's Classify wraps the client's error as a read's.
	d := Dialect{NoRows: errNoRows, Classify: func(_ context.Context, err error, write bool) error {
		return fmt.Errorf("classified (write %v): %w", write, err)
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, found, err := d.ReadState(t.Context(), tt.row)
			if (state == nil) != (tt.wantState == nil) || string(state) != string(tt.wantState) || found != tt.wantFound || !errors.Is(err, tt.wantErr) {
				t.Errorf("ReadState = %q, %v, %v; want %q, %v, %v", state, found, err, tt.wantState, tt.wantFound, tt.wantErr)
			}
			if tt.wantErr != nil && err.Error() != "classified (write false): "+tt.wantErr.Error() {
				t.Errorf("ReadState's error = %q, want the client's error classified as a read's", err)
			}
		})
	}
}
