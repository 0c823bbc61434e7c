package simulate

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/config"
)

// parseReplay parses the arguments of a replay clause: FILE [column C]
// [key K].
func parseReplay(args []string) (part, error) {
	const want = "want: replay FILE [column C] [key K]"
	if len(args) < 1 {
		return nil, errors.New(want)
	}
	var column, key string
	for rest := args[1:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			return nil, errors.New(want)
		}
		switch {
		case rest[0] == "column" && column == "":
			column = rest[1]
		case rest[0] == "key" && key == "":
			key = rest[1]
		default:
			return nil, errors.New(want)
		}
	}
	if key != "" && column == "" {
		if n, err := strconv.Atoi(key); err != nil || n < 1 {
			return nil, fmt.Errorf("key of a file of lines must be a field number from 1, got %q", key)
		}
	}
	return loadReplay(args[0], column, key)
}

// replay is a recorded list of arrival offsets, sorted, with the key of
// each (an index into names) when the file names keys.
type replay struct {
	times []int64
	keys  []uint32 // nil: no keys
	names []string
}

// sort orders the arrivals by time, keeping each one's key, and files
// with equal times in file order.
func (r *replay) sort() {
	if r.keys == nil {
		slices.Sort(r.times)
		return
	}
	r.times, r.keys = sortByTime(r.times, r.keys)
}

func (r *replay) end() time.Duration {
	if len(r.times) == 0 {
		return 0
	}
	return time.Duration(r.times[len(r.times)-1] + 1)
}

func (r *replay) count(duration time.Duration) float64 {
	n, _ := slices.BinarySearch(r.times, int64(duration)) // sorted: those before duration
	return float64(n)
}

func (r *replay) arrivals(dst []int64, duration time.Duration, _ int) ([]int64, error) {
	for _, t := range r.times {
		if t < int64(duration) {
			dst = append(dst, t)
		}
	}
	return dst, nil
}

func loadReplay(path, column, key string) (*replay, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readReplay(f, column, key)
}

// readReplay reads one timestamp or access log line per line, or with
// column the given column of CSV records; with key, each request's key is
// that field of its line (1 = the first of its space-separated fields) or
// that column of its record.
func readReplay(r io.Reader, column, key string) (*replay, error) {
	var f *fields
	var err error
	if column == "" {
		field, _ := strconv.Atoi(key) // checked by parseReplay
		f, err = readLines(r, field)
	} else {
		f, err = readCSV(r, column, key)
	}
	if err != nil {
		return nil, err
	}
	times, err := f.parseTimes()
	if err != nil {
		return nil, err
	}
	return newReplay(times, f.keys)
}

// fields are what a replayed file says of each request, as written: its
// time, its key (keys is nil when the file names none) and the line it is
// on; parse reads a time.
type fields struct {
	times, keys []string
	lines       []int
	parse       func(string) (t int64, whole bool, err error)
}

// readLines reads a file of one timestamp or access log line per line;
// with field > 0, each line's key is its field-th space-separated field.
// Blank lines and lines starting with # are skipped.
func readLines(r io.Reader, field int) (*fields, error) {
	f := &fields{parse: lineTime}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f.times, f.lines = append(f.times, s), append(f.lines, line)
		if field > 0 {
			words := strings.Fields(s)
			if field > len(words) {
				return nil, fmt.Errorf("line %d: no field %d for the key in a line of %d fields", line, field, len(words))
			}
			f.keys = append(f.keys, words[field-1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// readCSV reads the given column of each CSV record as its time, and with
// key that column as its key. Records starting with # are skipped. With a
// named column or key the first record is the header; with numbered ones,
// the first record is taken for a header when its time field is not a
// timestamp.
func readCSV(r io.Reader, column, key string) (*fields, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	tc, kc := newColumn(column), newColumn(key)
	f := &fields{parse: fieldTime}
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if first && (tc.named || kc.named) {
			if err := tc.find(rec, line); err != nil {
				return nil, err
			}
			if err := kc.find(rec, line); err != nil {
				return nil, err
			}
			continue
		}
		t, ok := tc.field(rec)
		if first && ok {
			if _, err := parseTimestamp(t); err != nil {
				continue // a header line
			}
		}
		if !ok {
			return nil, fmt.Errorf("line %d: no column %s in a record of %d fields", line, column, len(rec))
		}
		f.times, f.lines = append(f.times, t), append(f.lines, line)
		if key == "" {
			continue
		}
		k, ok := kc.field(rec)
		if !ok {
			return nil, fmt.Errorf("line %d: no column %s for the key in a record of %d fields", line, key, len(rec))
		}
		f.keys = append(f.keys, k)
	}
}

// column is a CSV column as a replay clause names it: by its 1-based
// number, or by its name in the header.
type column struct {
	spec  string
	named bool
	i     int // 0-based; -1 for none, or a name not yet found
}

func newColumn(spec string) column {
	n, err := strconv.Atoi(spec)
	if err != nil {
		return column{spec: spec, named: spec != "", i: -1}
	}
	return column{spec: spec, i: n - 1}
}

// find looks a named column up in the header; a numbered one needs none.
func (c *column) find(header []string, line int) error {
	if !c.named {
		return nil
	}
	if c.i = slices.Index(header, c.spec); c.i < 0 {
		return fmt.Errorf("line %d: the header has no column %q: %q", line, c.spec, header)
	}
	return nil
}

// field returns the column's field of rec, trimmed, and whether rec has
// it.
func (c column) field(rec []string) (string, bool) {
	if c.i < 0 || c.i >= len(rec) {
		return "", false
	}
	return strings.TrimSpace(rec[c.i]), true
}

// lineTime reads the time of a line: a timestamp, or the whole second of
// an access log line.
func lineTime(s string) (t int64, whole bool, err error) {
	if t, err = parseTimestamp(s); err == nil {
		return t, false, nil
	}
	t, err = accessLogTime(s)
	return t, err == nil, err
}

// fieldTime reads the time of a CSV field: a timestamp.
func fieldTime(s string) (int64, bool, error) {
	t, err := parseTimestamp(s)
	return t, false, err
}

// parseTimes reads every time, spreading the requests of an access log's
// whole second over it.
func (f *fields) parseTimes() ([]int64, error) {
	times := make([]int64, len(f.times))
	var whole []bool // times[i] is a whole second of an access log line
	for i, s := range f.times {
		t, w, err := f.parse(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", f.lines[i], err)
		}
		if w {
			if whole == nil {
				whole = make([]bool, len(times))
			}
			whole[i] = true
		}
		times[i] = t
	}
	spreadSeconds(times, whole)
	return times, nil
}

// newReplay returns the replay of times, taken relative to the earliest,
// with the key of each when keys is not nil.
func newReplay(times []int64, keys []string) (*replay, error) {
	if len(times) > MaxRequests {
		return nil, tooMany(float64(len(times)), false, MaxRequests)
	}
	rp := &replay{times: times}
	if keys != nil {
		rp.names, rp.keys = internKeys(keys)
	}
	rp.sort()
	if len(rp.times) > 0 {
		first := rp.times[0]
		for i := range rp.times {
			rp.times[i] -= first
		}
	}
	return rp, nil
}

// internKeys numbers the distinct keys in order of first appearance.
func internKeys(raw []string) (names []string, keys []uint32) {
	index := make(map[string]uint32)
	keys = make([]uint32, len(raw))
	for i, k := range raw {
		n, ok := index[k]
		if !ok {
			n = uint32(len(names))
			index[k] = n
			names = append(names, strings.Clone(k)) // not the whole line's memory
		}
		keys[i] = n
	}
	return names, keys
}

// clfTime finds the time of a Common Log Format line, as nginx and
// Apache write access logs: 127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET …".
var clfTime = regexp.MustCompile(`\[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\]`)

// accessLogTime reads the time of an access log line in Common Log Format.
func accessLogTime(line string) (int64, error) {
	m := clfTime.FindStringSubmatch(line)
	if m == nil {
		return 0, fmt.Errorf("%.80q is not an RFC 3339 time, Unix seconds, an offset such as 1.5s, or an access log line with a time such as [10/Oct/2000:13:55:36 -0700]", line)
	}
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[1])
	if err != nil {
		return 0, fmt.Errorf("access log time %q: %w", m[1], err)
	}
	return t.UnixNano(), nil
}

// spreadSeconds spreads the k arrivals that an access log gives the same
// whole second evenly over that second, at i/k of it for the i-th: a log
// of whole seconds does not say when within its second a request came,
// and putting them all at its start would invent a burst every second.
// whole marks those arrivals; nil marks none.
func spreadSeconds(times []int64, whole []bool) {
	if whole == nil {
		return
	}
	count := make(map[int64]int64)
	for i, t := range times {
		if whole[i] {
			count[t]++
		}
	}
	seen := make(map[int64]int64, len(count))
	for i, t := range times {
		if whole[i] {
			times[i] = t + seen[t]*int64(time.Second)/count[t]
			seen[t]++
		}
	}
}

// parseTimestamp reads an RFC 3339 time, Unix seconds with an optional
// fraction, or a duration offset, as nanoseconds.
func parseTimestamp(s string) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	if sec, frac, ok := strings.Cut(s, "."); isDigits(sec) && (!ok || isDigits(frac)) {
		n, err := strconv.ParseInt(sec, 10, 64)
		if err == nil && n <= math.MaxInt64/int64(time.Second)-1 {
			ns := n * int64(time.Second)
			if frac != "" {
				frac = (frac + "000000000")[:9] // beyond nanoseconds is dropped
				f, _ := strconv.ParseInt(frac, 10, 64)
				ns += f
			}
			return ns, nil
		}
	}
	if d, err := config.ParseDuration(s); err == nil && d >= 0 {
		return int64(d), nil
	}
	return 0, fmt.Errorf("%q is not an RFC 3339 time, Unix seconds or an offset such as 1.5s", s)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
