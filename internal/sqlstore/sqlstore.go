// Package sqlstore is the half that pgstore and mysqlstore share: what
// their options set and how it is checked (table and column names that
// cannot inject SQL, bounds), the choice of the driver building block
// that makes an update atomic, and the Store methods around it (long
// keys, error prefixes, deletion, the sweep of expired rows). Each store
// keeps its own SQL, its own driver glue and its own exported names.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/storeerr"
	"github.com/sluicehq/sluice/internal/sweep"
)

// Strategy is how a store makes an update atomic; each store's exported
// Strategy type has the same values, pgstore all three, mysqlstore the
// first two.
type Strategy int

// The strategies, in the order of the stores' constants.
const (
	SingleStatement Strategy = iota // a driver.CAS
	SelectForUpdate                 // a driver.RowLocker
	AdvisoryLock                    // a driver.Locker
)

var strategyNames = [...]string{"SingleStatement", "SelectForUpdate", "AdvisoryLock"}

// Name returns s's constant's name, "SingleStatement" and so on, or
// "Strategy(n)" for a value that is none of the first n strategies (the
// ones a store has).
func Name(s Strategy, n int) string {
	if s >= 0 && int(s) < n {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Defaults of the stores' options.
const (
	DefaultTable         = "sluice_state"
	DefaultKeyColumn     = "key"
	DefaultStateColumn   = "state"
	DefaultExpiresColumn = "expires_at"
	DefaultStateCache    = 4096
)

// Config is what a store's options set. The stores' Option types are
// functions of a *Config.
type Config struct {
	Table, Schema       string
	Qualified           bool   // Table has a Schema ("schema.table")
	TableOpt            string // the name as given, for errors
	Key, State, Expires string // column names
	Strategy            Strategy
	MaxAttempts         int
	StateCache          int
	SweepEvery          time.Duration
	SweepReport         sweep.Report
	SweepSet            bool // WithSweep was given
}

// SetTable sets the table from name, "table" or "schema.table".
func (c *Config) SetTable(name string) {
	c.Schema, c.Table, c.Qualified = "", name, false
	if s, t, ok := strings.Cut(name, "."); ok {
		c.Schema, c.Table, c.Qualified = s, t, true
	}
	c.TableOpt = name
}

// Dialect is what the databases differ in, for the checks of Configure.
type Dialect struct {
	// Pkg is the store's package, which prefixes its errors: "pgstore".
	Pkg string
	// MaxIdent is the longest identifier in bytes.
	MaxIdent int
	// FoldCase is true where column names are case-insensitive, so that
	// "state" and "STATE" are one column.
	FoldCase bool
	// Strategies is how many of the strategies, from the first, the
	// store has.
	Strategies int
	// IdentifierError is the store's error for a name that is not an SQL
	// identifier, given by option.
	IdentifierError func(option, name string) error
	// NoRows is the client's error for a query that found no row:
	// sql.ErrNoRows, pgx.ErrNoRows.
	NoRows error
	// Classify maps an error of the client to the driver's errors (see
	// storeerr.Classify); write says whether the statement may have
	// written state.
	Classify func(ctx context.Context, err error, write bool) error
}

// Configure applies opts to the defaults and checks the result: names
// that are plain SQL identifiers (letters, digits and underscores, not
// starting with a digit, 1 to d.MaxIdent bytes), distinct columns, a
// known strategy and no negative bound. Names that pass can be quoted
// into SQL without escaping.
func Configure[O ~func(*Config)](d Dialect, opts []O) (Config, error) {
	c := Config{
		Key:        DefaultKeyColumn,
		State:      DefaultStateColumn,
		Expires:    DefaultExpiresColumn,
		StateCache: DefaultStateCache,
	}
	c.SetTable(DefaultTable)
	for _, opt := range opts {
		opt(&c)
	}
	if !d.ident(c.Table) || (c.Qualified && !d.ident(c.Schema)) {
		return c, d.IdentifierError("WithTable", c.TableOpt)
	}
	for _, col := range []string{c.Key, c.State, c.Expires} {
		if !d.ident(col) {
			return c, d.IdentifierError("WithColumns", col)
		}
	}
	same := func(a, b string) bool { return a == b || d.FoldCase && strings.EqualFold(a, b) }
	switch {
	case same(c.Key, c.State) || same(c.Key, c.Expires) || same(c.State, c.Expires):
		return c, fmt.Errorf("%s: WithColumns: names must differ, got %q, %q, %q", d.Pkg, c.Key, c.State, c.Expires)
	case c.Strategy < 0 || int(c.Strategy) >= d.Strategies:
		return c, fmt.Errorf("%s: WithStrategy: unknown strategy %s", d.Pkg, Name(c.Strategy, d.Strategies))
	case c.MaxAttempts < 0:
		return c, fmt.Errorf("%s: WithMaxAttempts: attempts must not be negative, got %d", d.Pkg, c.MaxAttempts)
	case c.StateCache < 0:
		return c, fmt.Errorf("%s: WithStateCache: entries must not be negative, got %d", d.Pkg, c.StateCache)
	case c.SweepSet && c.SweepEvery <= 0:
		return c, fmt.Errorf("%s: WithSweep: interval must be positive, got %v", d.Pkg, c.SweepEvery)
	}
	return c, nil
}

// ident reports whether s is an unquoted identifier of at most
// d.MaxIdent bytes: ASCII letters, digits and underscores, not starting
// with a digit.
func (d Dialect) ident(s string) bool {
	if s == "" || len(s) > d.MaxIdent || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Blocks are a store's building blocks, one for each strategy it has.
type Blocks struct {
	CAS interface {
		driver.CAS
		driver.Deleter // so that Delete drops the state cache's entry
	}
	RowLocker driver.RowLocker
	Locker    driver.Locker // nil where the database has no advisory lock
}

// Store is the driver.Store of a checked Config, run by the building
// block of its strategy. Its methods are those that pgstore's and
// mysqlstore's Store share.
type Store struct {
	pkg       string
	strategy  Strategy
	s         driver.Store
	deleteKey func(ctx context.Context, key string) error
	sweeper   *sweep.Sweeper // nil without WithSweep
}

// New returns the Store of c, which Configure returned, on the building
// block of its strategy. deleteKey deletes a key's row for Delete, where
// the block is not a driver.Deleter. With WithSweep it starts the sweep,
// with deleteExpired, which Close stops.
func New(d Dialect, c Config, b Blocks, deleteKey func(ctx context.Context, key string) error, deleteExpired sweep.Func) *Store {
	s := &Store{pkg: d.Pkg, strategy: c.Strategy, deleteKey: deleteKey}
	switch c.Strategy {
	case SingleStatement:
		s.s = driver.NewCASStore(b.CAS, driver.WithMaxAttempts(c.MaxAttempts), driver.WithStateCache(c.StateCache))
	case SelectForUpdate:
		s.s = driver.NewRowLockStore(b.RowLocker, driver.WithMaxAttempts(c.MaxAttempts))
	case AdvisoryLock:
		s.s = driver.NewLockStore(b.Locker)
	}
	if c.SweepSet {
		s.sweeper = sweep.Start(c.SweepEvery, deleteExpired, c.SweepReport)
	}
	return s
}

// Strategy returns the store's strategy.
func (s *Store) Strategy() Strategy { return s.strategy }

// Update runs the update of driver.Store on key, stored as
// driver.ShortKey(key), and prefixes its errors, but for a bare context
// error, with the package and the key.
func (s *Store) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	key = driver.ShortKey(key)
	err := s.s.Update(ctx, key, fn)
	if err == nil || storeerr.IsBareContext(err) {
		return err
	}
	return fmt.Errorf("%s: update %s: %w", s.pkg, driver.QuoteKey(key), err)
}

// Delete deletes key's state, through the building block when it is a
// driver.Deleter, so that its state cache forgets the key too.
func (s *Store) Delete(ctx context.Context, key string) error {
	key = driver.ShortKey(key)
	var err error
	if d, ok := s.s.(driver.Deleter); ok {
		err = d.Delete(ctx, key)
	} else {
		err = s.deleteKey(ctx, key)
	}
	if err != nil {
		return storeerr.Wrap(s.pkg+": delete "+driver.QuoteKey(key), err)
	}
	return nil
}

// Close stops the sweep, if there is one, and waits for it to end. It
// may be called more than once.
func (s *Store) Close() error {
	if s.sweeper != nil {
		s.sweeper.Close()
	}
	return nil
}

// Row is a row a query returned: a *sql.Row, or a pgx.Row.
type Row interface{ Scan(dest ...any) error }

// ReadState scans the state column of row, a query that does not write,
// as ScanState does, and classifies the client's error.
func (d Dialect) ReadState(ctx context.Context, row Row) (state []byte, found bool, err error) {
	state, found, err = ScanState(row, d.NoRows)
	if err != nil {
		return nil, false, d.Classify(ctx, err, false)
	}
	return state, found, nil
}

// ScanState scans the state column of row. found is false when there is
// no row, which the client reports as noRows (sql.ErrNoRows,
// pgx.ErrNoRows); an empty state, the row of a key's first update under
// SelectForUpdate, is no state. Another error is the client's, for the
// store to classify.
func ScanState(row Row, noRows error) (state []byte, found bool, err error) {
	err = row.Scan(&state)
	if errors.Is(err, noRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return NilIfEmpty(state), true, nil
}

// NilIfEmpty returns nil for an empty state: an empty row has none.
func NilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// NonNil returns b, or an empty slice for nil: the stores' state columns
// are NOT NULL.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
