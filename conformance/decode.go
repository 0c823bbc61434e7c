package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Decoding ignores unknown fields, so that files written for a later
// version of the format still load, but is strict about the fields it
// knows: a case with a bad value fails with a message naming it, and the
// other cases of the file still run. Objects whose fields need their own
// error context (cases, buckets, limits, steps) are decoded one level at a
// time from json.RawMessage.

// file is one vector file, decoded.
type file struct {
	path  string
	suite string
	err   *Failure // the file could not be read or decoded; cases is then empty
	cases []*testCase
}

// testCase is one case of a file, ready to run.
type testCase struct {
	file, name string
	bad        *Failure // the case is malformed and fails without running

	start      int64
	subject    subject     // the bucket or limiter the case builds
	wantConfig *wantConfig // building the subject must fail; nil when it must succeed
	steps      []step
	blocking   bool // some step needs a BlockingBucket
	debts      bool // some step needs a DebtLimiter
	slots      bool // some step needs a SlotLimiter
}

// wantConfig is a case's want_config_error: building the bucket or limiter
// must fail with a *sluice.ConfigError of rule, or of any rule when rule is
// "".
type wantConfig struct{ rule sluice.Rule }

// loadPath loads the file at path, or every *.json file of the directory at
// path in name order (not recursively).
func loadPath(path string) []*file {
	info, err := os.Stat(path)
	if err != nil {
		return []*file{badFile(path, err.Error())}
	}
	if !info.IsDir() {
		return []*file{loadFile(path)}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return []*file{badFile(path, err.Error())}
	}
	var files []*file
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			files = append(files, loadFile(filepath.Join(path, e.Name())))
		}
	}
	if len(files) == 0 {
		return []*file{badFile(path, "no *.json files in the directory")}
	}
	return files
}

func badFile(path, msg string) *file {
	return &file{path: path, err: &Failure{File: path, Step: -1, Msg: msg}}
}

func loadFile(path string) *file {
	data, err := os.ReadFile(path)
	if err != nil {
		return badFile(path, err.Error())
	}
	return decodeFile(path, data)
}

// decodeFile decodes a vector file. It never panics: whatever is wrong is
// reported in the file's err or in its cases' bad.
func decodeFile(path string, data []byte) *file {
	var doc struct {
		Suite string            `json:"suite"`
		Cases []json.RawMessage `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return badFile(path, describe(err, data))
	}
	if len(doc.Cases) == 0 {
		return badFile(path, "the file has no cases")
	}
	f := &file{path: path, suite: doc.Suite}
	seen := make(map[string]int)
	for i, raw := range doc.Cases {
		c := decodeCase(path, i, raw)
		if j, dup := seen[c.name]; dup && c.bad == nil {
			c.bad = c.failure(-1, "", fmt.Sprintf("case #%d has the same name; names must be unique in a file", j))
		}
		seen[c.name] = i
		f.cases = append(f.cases, c)
	}
	return f
}

// describe turns a JSON error into a message, with the line and column of a
// syntax error.
func describe(err error, data []byte) string {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		return err.Error()
	}
	// Offset is just past the offending byte.
	before := data[:min(max(syn.Offset, 0), int64(len(data)))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := max(len(before)-bytes.LastIndexByte(before, '\n')-1, 1)
	return fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, err)
}

type caseDoc struct {
	Name            string            `json:"name"`
	Start           *integer          `json:"start"`
	Bucket          json.RawMessage   `json:"bucket"`
	Limiter         json.RawMessage   `json:"limiter"`
	WantConfigError json.RawMessage   `json:"want_config_error"`
	Steps           []json.RawMessage `json:"steps"`
}

// present reports whether a field decoded into raw was given and not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// decodeCase decodes the case at index i of a file. A malformed case comes
// back with bad set.
func decodeCase(path string, i int, raw json.RawMessage) *testCase {
	c := &testCase{file: path, name: fmt.Sprintf("#%d", i)}
	var d caseDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		var named struct{ Name string }
		if json.Unmarshal(raw, &named) == nil && named.Name != "" {
			c.name = named.Name
		}
		c.bad = c.failure(-1, "", describe(err, raw))
		return c
	}
	if d.Name == "" {
		c.bad = c.failure(-1, "", "the case has no name")
		return c
	}
	c.name = d.Name
	var err error
	if c.wantConfig, err = decodeWantConfig(d.WantConfigError); err != nil {
		c.bad = c.failure(-1, "", "want_config_error: "+err.Error())
		return c
	}
	switch {
	case present(d.Bucket) && present(d.Limiter):
		c.bad = c.failure(-1, "", "a case has a bucket or a limiter, not both")
		return c
	case present(d.Limiter):
		if c.subject, err = decodeLimiter(d.Limiter); err != nil {
			if c.wantConfig == nil {
				c.bad = c.failure(-1, "", err.Error())
				return c
			}
			// A description that config files would refuse is a
			// configuration error, which the case may want.
			c.subject = &invalidLimiter{err}
		}
	case !present(d.Bucket):
		c.bad = c.failure(-1, "", "the case has neither a bucket nor a limiter")
		return c
	default:
		b := &bucketSubject{}
		if b.config, b.millis, err = decodeBucket(d.Bucket); err != nil {
			c.bad = c.failure(-1, "", "bucket: "+err.Error())
			return c
		}
		c.subject = b
	}
	if d.Start != nil {
		c.start = int64(*d.Start)
	}
	if c.wantConfig != nil && len(d.Steps) > 0 {
		c.bad = c.failure(-1, "", "a case with want_config_error has no steps")
		return c
	}
	ops := c.subject.ops()
	for j, raw := range d.Steps {
		s, err := decodeStep(raw, ops)
		if err != nil {
			c.bad = c.failure(j, s.op, err.Error())
			return c
		}
		c.blocking = c.blocking || s.blocking
		c.debts = c.debts || s.debts
		c.slots = c.slots || s.slots
		c.steps = append(c.steps, s)
	}
	return c
}

// failure returns a failure of step (-1 for the case itself) of c.
func (c *testCase) failure(step int, op, msg string) *Failure {
	return &Failure{File: c.file, Case: c.name, Step: step, Op: op, Msg: msg}
}

func decodeWantConfig(raw json.RawMessage) (*wantConfig, error) {
	if !present(raw) {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case bool:
		if !v {
			return nil, nil
		}
		return &wantConfig{}, nil
	case string:
		if v == "" {
			return nil, errors.New("the rule is empty")
		}
		return &wantConfig{rule: sluice.Rule(v)}, nil
	}
	return nil, fmt.Errorf("want true or a rule name, got %s", raw)
}

type bucketDoc struct {
	Precision string            `json:"precision"`
	Limits    []json.RawMessage `json:"limits"`
}

type limitDoc struct {
	Capacity *integer  `json:"capacity"`
	Refill   refillDoc `json:"refill"`
	Initial  *integer  `json:"initial"`
	ID       string    `json:"id"`
}

type refillDoc struct {
	Kind            string    `json:"kind"`
	Tokens          *integer  `json:"tokens"`
	Period          *duration `json:"period"`
	FirstRefill     *integer  `json:"first_refill"`
	AdaptiveInitial bool      `json:"adaptive_initial"`
}

// decodeBucket decodes a BUCKET into the configuration it describes, and
// reports whether its precision is millis. Values that sluice itself must
// reject (a capacity of 0, a negative period) are passed on unchecked.
func decodeBucket(raw json.RawMessage) (cfg sluice.BucketConfig, millis bool, err error) {
	var d bucketDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return cfg, false, err
	}
	switch d.Precision {
	case "", "nanos":
	case "millis":
		millis = true
	default:
		return cfg, false, fmt.Errorf("precision %q is neither nanos nor millis", d.Precision)
	}
	if d.Limits == nil { // [] decodes to an empty, non-nil slice: sluice's no_limits
		return cfg, false, errors.New("limits is missing")
	}
	cfg.Bandwidths = make([]sluice.Bandwidth, 0, len(d.Limits))
	for i, raw := range d.Limits {
		bw, err := decodeLimit(raw)
		if err != nil {
			return cfg, false, fmt.Errorf("limits[%d]: %w", i, err)
		}
		cfg.Bandwidths = append(cfg.Bandwidths, bw)
	}
	return cfg, millis, nil
}

func decodeLimit(raw json.RawMessage) (sluice.Bandwidth, error) {
	var d limitDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return sluice.Bandwidth{}, err
	}
	r := d.Refill
	switch {
	case d.Capacity == nil:
		return sluice.Bandwidth{}, errors.New("capacity is missing")
	case r.Tokens == nil:
		return sluice.Bandwidth{}, errors.New("refill.tokens is missing")
	case r.Period == nil:
		return sluice.Bandwidth{}, errors.New("refill.period is missing")
	}
	tokens, period := int64(*r.Tokens), time.Duration(*r.Period)
	var refill sluice.Refill
	switch r.Kind {
	case "greedy", "intervally":
		if r.FirstRefill != nil || r.AdaptiveInitial {
			return sluice.Bandwidth{}, fmt.Errorf("refill.first_refill and refill.adaptive_initial are for intervally_aligned, not %s", r.Kind)
		}
		refill = sluice.Greedy(tokens, period)
		if r.Kind == "intervally" {
			refill = sluice.Intervally(tokens, period)
		}
	case "intervally_aligned":
		if r.FirstRefill == nil {
			return sluice.Bandwidth{}, errors.New("refill.first_refill is missing")
		}
		refill = sluice.IntervallyAligned(tokens, period, time.Unix(0, int64(*r.FirstRefill)))
		if r.AdaptiveInitial {
			refill = sluice.IntervallyAlignedAdaptive(tokens, period, time.Unix(0, int64(*r.FirstRefill)))
		}
	case "":
		return sluice.Bandwidth{}, errors.New("refill.kind is missing")
	default:
		return sluice.Bandwidth{}, fmt.Errorf("refill.kind %q is none of greedy, intervally and intervally_aligned", r.Kind)
	}
	bw := sluice.Capacity(int64(*d.Capacity), refill).WithID(d.ID)
	if d.Initial != nil {
		bw = bw.WithInitialTokens(int64(*d.Initial))
	}
	return bw, nil
}

// integer is a JSON integer decoded exactly into an int64, never through
// float64: vectors use values up to math.MaxInt64, which float64 rounds.
type integer int64

func (n *integer) UnmarshalJSON(b []byte) error {
	v, err := json.Number(b).Int64()
	if err != nil {
		return fmt.Errorf("%s is not an integer in the int64 range", b)
	}
	*n = integer(v)
	return nil
}

// duration is a JSON duration: a string in time.ParseDuration's syntax, or
// an integer number of nanoseconds.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("bad duration %s: %v", b, err)
		}
		*d = duration(v)
		return nil
	}
	v, err := json.Number(b).Int64()
	if err != nil {
		return fmt.Errorf("bad duration %s: neither a Go duration string nor integer nanoseconds", b)
	}
	*d = duration(v)
	return nil
}
