package simulate

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func loadLimiters(t testing.TB) *config.File {
	t.Helper()
	f, err := config.LoadFile("testdata/limiters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func simulate(t testing.TB, names []string, spec string, o Options) []*Report {
	t.Helper()
	tr, err := ParseTraffic(spec)
	if err != nil {
		t.Fatal(err)
	}
	reports, err := Limiters(loadLimiters(t), names, tr, o)
	if err != nil {
		t.Fatal(err)
	}
	return reports
}

// TestGolden checks the numbers of a simulation (the text report) of every
// kind of traffic pattern against testdata/*.golden; go test -update
// rewrites them, to be read before they are committed.
func TestGolden(t *testing.T) {
	all := []string{"fixed", "sliding", "log", "bucket", "leaky", "gcra", "both", "none"}
	for _, tt := range []struct {
		name  string
		names []string
		spec  string
		o     Options
	}{
		{"steady", all, "steady 15/s", Options{Duration: 3 * time.Second, Slice: 250 * time.Millisecond}},
		{"burst", all, "steady 5/s; burst 10 at 990ms; burst 10 at 1s", Options{Duration: 3 * time.Second, Slice: 250 * time.Millisecond}},
		{"ramp", all, "ramp 0/s to 40/s from 0s to 4s", Options{Duration: 4 * time.Second, Slice: 500 * time.Millisecond}},
		{"poisson", all, "poisson 12/s seed 7", Options{Duration: 5 * time.Second, Slice: 500 * time.Millisecond}},
		{"replay", []string{"fixed", "bucket"}, "replay testdata/access.log", Options{Duration: 4 * time.Second, Slice: 500 * time.Millisecond}},
		{"replay-csv", []string{"sliding", "gcra"}, "replay testdata/access.csv column time", Options{Duration: 4 * time.Second, Slice: 500 * time.Millisecond}},
		{"replay-keys", []string{"pair", "gcra"}, "replay testdata/access.csv column time key ip", Options{Duration: 4 * time.Second, Slice: 500 * time.Millisecond}},
		{"replay-shadow", []string{"pair", "pair_shadow"}, "replay testdata/access.log", Options{Duration: 4 * time.Second, Slice: 500 * time.Millisecond}},
		{"shaper", []string{"shaper"}, "burst 10 at 0s; steady 20/s from 1s to 2s", Options{Duration: 3 * time.Second, Slice: 250 * time.Millisecond, MaxWait: 10 * time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reports := simulate(t, tt.names, tt.spec, tt.o)
			var b bytes.Buffer
			if err := WriteText(&b, tt.spec, reports); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", tt.name, golden, got)
			}
		})
	}
}

// TestShadowReplay replays traffic against a limiter in shadow mode
// beside the same limiter without it: the shadow one accepts everything,
// and counts as shadow-rejected, slice by slice, what the other rejects.
func TestShadowReplay(t *testing.T) {
	for _, spec := range []string{"replay testdata/access.log", "steady 15/s; burst 10 at 990ms"} {
		rs := simulate(t, []string{"pair", "pair_shadow"}, spec, Options{Duration: 4 * time.Second, Slice: 250 * time.Millisecond})
		plain, shadow := rs[0], rs[1]
		if plain.Rejected == 0 {
			t.Fatalf("%s: the limiter rejected nothing: the test shows nothing", spec)
		}
		if !shadow.Shadow || shadow.Accepted != shadow.Requests || shadow.Rejected != 0 || shadow.ShadowRejected != plain.Rejected {
			t.Errorf("%s: shadow %+v, want every request accepted and %d shadow-rejected", spec, shadow, plain.Rejected)
		}
		for i, s := range shadow.Slices {
			if p := plain.Slices[i]; s.ShadowRejected != p.Rejected || s.Level != p.Level {
				t.Errorf("%s: slice %d: shadow %+v, want the rejections and level of %+v", spec, i, s, p)
			}
		}
	}
}

// TestKeyedReplay: with key, each client of a log has its own limit,
// which one key would have shared among them.
func TestKeyedReplay(t *testing.T) {
	o := Options{Duration: 4 * time.Second}
	one := simulate(t, []string{"pair"}, "replay testdata/access.csv column time", o)[0]
	if one.Accepted != 5 || one.Rejected != 1 || one.Keys != 1 || one.LevelKey != "" || one.Worst.Key != "" {
		t.Errorf("one key: %+v, want 5 accepted and 1 rejected on one key", one)
	}
	keyed := simulate(t, []string{"pair"}, "replay testdata/access.csv column time key ip", o)[0]
	// 10.0.0.1 at 0, 500ms and 3.75s; 10.0.0.2 at 250ms; 10.0.0.3 twice
	// at 1s: nobody passes 2 a second.
	want := Worst{Start: 0, Count: 2, Key: "10.0.0.1"} // ties with 10.0.0.3's at 1s; the earlier wins
	if keyed.Accepted != 6 || keyed.Rejected != 0 || keyed.Keys != 3 || keyed.LevelKey != "10.0.0.1" || keyed.Worst != want {
		t.Errorf("keyed: accepted %d, rejected %d, %d keys, level of %q, worst %+v; want 6, 0, 3, 10.0.0.1, %+v",
			keyed.Accepted, keyed.Rejected, keyed.Keys, keyed.LevelKey, keyed.Worst, want)
	}
}

// TestClassicSurprises checks the behaviours the simulator exists to show,
// as numbers rather than against a golden file.
func TestClassicSurprises(t *testing.T) {
	o := Options{Duration: 3 * time.Second}
	// A client that saves up its requests for the end of one window and
	// the start of the next gets almost two limits through in a moment.
	edge := "burst 1 at 0s; burst 9 at 999ms; burst 10 at 1s"
	for _, c := range []struct {
		name  string
		worst int64
	}{{"fixed", 19}, {"bucket", 19}, {"sliding", 10}, {"log", 10}} {
		r := simulate(t, []string{c.name}, edge, o)[0]
		if r.Worst.Count != c.worst || r.Window != time.Second {
			t.Errorf("%s at a window's edge: worst %d in %v, want %d in 1s", c.name, r.Worst.Count, r.Window, c.worst)
		}
	}
	// A shaper admits the burst but spaces it: the 10th of 10 requests at
	// 10/s waits 900ms, and beyond the queue of 5 requests are refused.
	r := simulate(t, []string{"shaper"}, "burst 10 at 0s", Options{Duration: 3 * time.Second, MaxWait: time.Minute})[0]
	if r.Accepted != 6 || r.Rejected != 4 || r.Waits.Max != 500*time.Millisecond || r.Waits.Waited != 5 {
		t.Errorf("shaper: accepted %d, rejected %d, waits %+v; want 6, 4, max 500ms over 5 waiters", r.Accepted, r.Rejected, r.Waits)
	}
	if r.Worst.Count > 10 {
		t.Errorf("shaper let %d leave within 1s, more than its rate", r.Worst.Count)
	}
	// No limit lets everything through and has no level to draw.
	r = simulate(t, []string{"none"}, "steady 1000/s", Options{Duration: time.Second})[0]
	if r.Accepted != 1000 || r.Rejected != 0 {
		t.Errorf("no_limit: accepted %d, rejected %d", r.Accepted, r.Rejected)
	}
}

// TestReportAddsUp checks the slices against the totals and the level
// against the limit, for every limiter on random traffic.
func TestReportAddsUp(t *testing.T) {
	f := loadLimiters(t)
	reports := simulate(t, f.Order, "poisson 30/s seed 3; burst 25 at 4s", Options{Duration: 10 * time.Second, MaxWait: 0})
	for _, r := range reports {
		var acc, rej int64
		for _, s := range r.Slices {
			acc, rej = acc+s.Accepted, rej+s.Rejected
			if s.Level < 0 || s.Level > r.Limit {
				t.Errorf("%s: level %d at %v outside 0..%d", r.Name, s.Level, s.Start, r.Limit)
			}
		}
		if acc != r.Accepted || rej != r.Rejected || acc+rej != r.Requests {
			t.Errorf("%s: slices add up to %d+%d, report says %d+%d of %d", r.Name, acc, rej, r.Accepted, r.Rejected, r.Requests)
		}
		if r.Worst.Count > r.Accepted {
			t.Errorf("%s: worst window %d > accepted %d", r.Name, r.Worst.Count, r.Accepted)
		}
	}
}

func TestWorst(t *testing.T) {
	for _, tt := range []struct {
		times []int64
		w     int64
		want  Worst
	}{
		{nil, 10, Worst{}},
		{[]int64{5}, 10, Worst{Start: 5, Count: 1}},
		{[]int64{0, 9, 10, 11, 30}, 10, Worst{Start: 9, Count: 3}}, // [9, 19) holds 9, 10, 11
		{[]int64{30, 0, 10, 11, 9}, 10, Worst{Start: 9, Count: 3}}, // unsorted departures
		{[]int64{0, 10, 20}, 10, Worst{Start: 0, Count: 1}},        // half-open windows
		{[]int64{1, 1, 1, 50, 50}, 10, Worst{Start: 1, Count: 3}},  // the first of equals
	} {
		if got := worst(tt.times, tt.w); got != tt.want {
			t.Errorf("worst(%v, %d) = %+v, want %+v", tt.times, tt.w, got, tt.want)
		}
	}
}

func TestRunErrors(t *testing.T) {
	p := sluice.FixedWindow(10, time.Second)
	if _, err := Run("x", p, &Requests{}, Options{}); err == nil {
		t.Error("Run with no duration did not fail")
	}
	if _, err := Run("x", p, &Requests{}, Options{Duration: time.Hour, Slice: time.Millisecond}); err == nil {
		t.Error("Run with 3.6 million slices did not fail")
	}
	// A sliding window cannot reserve; asking it to wait is an error that
	// says so, not a silent fallback.
	_, err := Run("x", sluice.SlidingWindow(10, time.Second), &Requests{Times: []int64{0}}, Options{Duration: time.Second, MaxWait: time.Second})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("waiting on a sliding window: %v", err)
	}
	tr, _ := ParseTraffic("steady 1/s")
	var ue *UnknownLimiterError
	if _, err := Limiters(loadLimiters(t), []string{"nope"}, tr, Options{}); !errors.As(err, &ue) || ue.Name != "nope" {
		t.Errorf("unknown limiter: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	r := simulate(t, []string{"fixed"}, "burst 1 at 37s", Options{})[0]
	if r.Duration != time.Minute || r.Slice != time.Second || len(r.Slices) != 60 {
		t.Errorf("defaults: duration %v, slice %v, %d slices; want 1m, 1s, 60", r.Duration, r.Slice, len(r.Slices))
	}
	for _, tt := range []struct {
		d    time.Duration
		n    int
		want time.Duration
	}{
		{3 * time.Minute, 60, 5 * time.Second},
		{2 * time.Hour, 60, 2 * time.Minute},
		{2 * time.Hour, 10, 15 * time.Minute},
		{time.Second, 60, 20 * time.Millisecond},
		{30 * 24 * time.Hour, 10, 3 * 24 * time.Hour},
	} {
		if got := NiceSlice(tt.d, tt.n); got != tt.want {
			t.Errorf("NiceSlice(%v, %d) = %v, want %v", tt.d, tt.n, got, tt.want)
		}
	}
}

// TestSVG checks that the chart is well-formed XML with a panel per
// report, and that it renders: rsvg-convert turns it into a PNG that is not
// blank. Without rsvg-convert (Debian's librsvg2-bin) the render is
// skipped, but not when CI=true.
func TestSVG(t *testing.T) {
	spec := "steady 5/s; burst 10 at 990ms; burst 10 at 1s"
	reports := simulate(t, []string{"fixed", "sliding", "bucket", "none"}, spec, Options{Duration: 3 * time.Second})
	var b bytes.Buffer
	if err := WriteSVG(&b, spec+` <&> "quoted"`, reports); err != nil {
		t.Fatal(err)
	}
	panels, rects := 0, map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				switch {
				case a.Name.Local == "id" && strings.HasPrefix(a.Value, "panel-"):
					panels++
				case a.Name.Local == "class":
					rects[a.Value]++
				}
			}
		}
	}
	if panels != 4 {
		t.Errorf("%d panels, want 4", panels)
	}
	if rects["worst"] != 3 || rects["level"] != 3 || rects["accepted"] == 0 || rects["rejected"] == 0 {
		t.Errorf("elements by class: %v; want 3 worst-window marks and level lines (none for no_limit) and bars", rects)
	}

	bin, err := exec.LookPath("rsvg-convert")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("rsvg-convert is missing (Debian package librsvg2-bin) and CI=true")
		}
		t.Skip("rsvg-convert not installed (Debian package librsvg2-bin)")
	}
	dir := t.TempDir()
	svg, out := filepath.Join(dir, "chart.svg"), filepath.Join(dir, "chart.png")
	if err := os.WriteFile(svg, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(bin, "-o", out, svg).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, msg)
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	img, err := png.Decode(fh)
	if err != nil {
		t.Fatalf("rsvg-convert wrote no PNG: %v", err)
	}
	if bounds := img.Bounds(); bounds.Dx() != chartWidth || bounds.Dy() != headerH+4*panelHeight {
		t.Errorf("rendered %v, want %dx%d", bounds, chartWidth, headerH+4*panelHeight)
	}
	colours := map[uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[r>>12<<8|g>>12<<4|b>>12] = true
		}
	}
	if len(colours) < 8 {
		t.Errorf("the rendered chart has %d colours; it looks blank", len(colours))
	}
}

// BenchmarkSimulate1M runs a token bucket against a million requests, the
// size the command promises to handle within a second.
func BenchmarkSimulate1M(b *testing.B) {
	tr, err := ParseTraffic("steady 10000/s; burst 1000 at 30s")
	if err != nil {
		b.Fatal(err)
	}
	f := loadLimiters(b)
	var requests int64
	for b.Loop() {
		reports, err := Limiters(f, []string{"bucket"}, tr, Options{Duration: 100 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		requests = reports[0].Requests
	}
	if requests != 1_001_000 {
		b.Fatalf("%d requests, want 1001000", requests)
	}
	b.ReportMetric(float64(requests), "requests/op")
}
