package simulate

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"time"
)

// The chart's geometry, in SVG user units.
const (
	chartWidth  = 960
	panelHeight = 250
	plotLeft    = 70
	plotRight   = 880
	plotTop     = 58  // within a panel, below its two title lines
	plotBottom  = 210 // within a panel, above the time axis labels
	headerH     = 56  // the traffic, and under it the requests and keys
)

// Colours chosen to stay apart for the common kinds of colour blindness.
const (
	colAccepted = "#2b8a3e"
	colRejected = "#e8590c"
	colLevel    = "#1864ab"
	colWorst    = "#ae3ec9"
)

// WriteSVG draws the reports, which ran on the same traffic, one panel
// each under a shared time axis and a shared request scale, so that
// panels compare at a glance. Each panel names its series in its title in
// the series' colours, so the chart needs no legend.
func WriteSVG(w io.Writer, traffic string, reports []*Report) error {
	bw := bufio.NewWriter(w)
	if len(reports) == 0 {
		return fmt.Errorf("simulate: no reports to draw")
	}
	height := headerH + panelHeight*len(reports)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	r0 := reports[0]
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="15" font-weight="bold">Traffic: %s</text>`+"\n", plotLeft, esc(traffic))
	keys := "one key"
	if r0.Keys > 1 {
		keys = fmt.Sprintf("%d keys, level of %s", r0.Keys, r0.LevelKey)
	}
	fmt.Fprintf(bw, `<text x="%d" y="44" fill="#495057">%d requests in %v, %s</text>`+"\n", plotLeft, r0.Requests, r0.Duration, esc(keys))

	var peak int64 = 1 // the shared request scale
	for _, r := range reports {
		for _, s := range r.Slices {
			peak = max(peak, s.Accepted+s.Rejected)
		}
	}
	yMax, yStep := niceScale(peak)
	for i, r := range reports {
		panel(bw, r, headerH+i*panelHeight, yMax, yStep)
	}
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// panel draws one report with its top edge at y0.
func panel(w io.Writer, r *Report, y0 int, yMax, yStep int64) {
	u := unitFor(r.Duration)
	top, bottom := float64(y0+plotTop), float64(y0+plotBottom)
	x := func(t time.Duration) float64 {
		return plotLeft + float64(t)/float64(r.Duration)*(plotRight-plotLeft)
	}
	y := func(n int64) float64 { return bottom - float64(n)/float64(yMax)*(bottom-top) }

	fmt.Fprintf(w, `<g id="panel-%s">`+"\n", esc(r.Name))
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s <tspan font-weight="normal" fill="#495057">%s</tspan></text>`+"\n",
		plotLeft, y0+20, esc(r.Name), esc(r.Policy))
	fmt.Fprintf(w, `<text x="%d" y="%d"><tspan fill="%s" font-weight="bold">■ accepted %d</tspan>  <tspan fill="%s" font-weight="bold">■ rejected %d</tspan>`,
		plotLeft, y0+40, colAccepted, r.Accepted, colRejected, r.Rejected)
	limited := r.Limit > 0 && r.Limit != math.MaxInt64
	if limited {
		fmt.Fprintf(w, `  <tspan fill="%s" font-weight="bold">— tokens left (of %d)</tspan>`, colLevel, r.Limit)
	}
	if r.Worst.Count > 0 && r.Window > 0 {
		on := ""
		if r.Worst.Key != "" {
			on = " on " + r.Worst.Key
		}
		fmt.Fprintf(w, `  <tspan fill="%s" font-weight="bold">▭ busiest %v: %d admitted%s</tspan>`, colWorst, r.Window, r.Worst.Count, esc(on))
	}
	if r.Waits.Waited > 0 {
		fmt.Fprintf(w, `  <tspan fill="#495057">waits p99 %v, max %v</tspan>`, short(r.Waits.P99), short(r.Waits.Max))
	}
	fmt.Fprintln(w, `</text>`)

	// Grid and left axis: requests per slice.
	for v := int64(0); v <= yMax; v += yStep {
		fmt.Fprintf(w, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dee2e6"/>`+"\n", plotLeft, plotRight, y(v), y(v))
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" fill="#495057">%d</text>`+"\n", plotLeft-6, y(v)+4, v)
	}
	fmt.Fprintf(w, `<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle" fill="#495057">requests per %v</text>`+"\n",
		plotLeft-44, (top+bottom)/2, r.Slice)

	// The busiest window, under the bars.
	if r.Worst.Count > 0 && r.Window > 0 {
		x0, x1 := x(r.Worst.Start), math.Min(x(r.Worst.Start+r.Window), plotRight)
		fmt.Fprintf(w, `<rect class="worst" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.12" stroke="%s" stroke-dasharray="4 3"/>`+"\n",
			x0, top-4, math.Max(x1-x0, 1), bottom-top+4, colWorst, colWorst)
	}

	// Stacked bars: accepted below, rejected above.
	bar := (plotRight - plotLeft) * float64(r.Slice) / float64(r.Duration)
	gap := math.Min(1, bar/4)
	for _, s := range r.Slices {
		bx := x(s.Start) + gap/2
		bwid := math.Max(math.Min(bar, plotRight-x(s.Start))-gap, 0.5)
		if s.Accepted > 0 {
			fmt.Fprintf(w, `<rect class="accepted" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n",
				bx, y(s.Accepted), bwid, bottom-y(s.Accepted), colAccepted)
		}
		if s.Rejected > 0 {
			fmt.Fprintf(w, `<rect class="rejected" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`+"\n",
				bx, y(s.Accepted+s.Rejected), bwid, y(s.Accepted)-y(s.Accepted+s.Rejected), colRejected)
		}
	}

	// The level line on its own right-hand scale, 0 to the limit.
	if limited {
		ly := func(l int64) float64 {
			return bottom - math.Min(float64(l)/float64(r.Limit), 1.05)*(bottom-top)
		}
		fmt.Fprintf(w, `<polyline class="level" fill="none" stroke="%s" stroke-width="2" points="`, colLevel)
		for i, s := range r.Slices {
			if i > 0 {
				fmt.Fprint(w, " ")
			}
			fmt.Fprintf(w, "%.1f,%.1f", math.Min(x(s.Start+r.Slice), plotRight), ly(s.Level))
		}
		fmt.Fprintln(w, `"/>`)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" fill="%s">%d</text>`+"\n", plotRight+6, ly(r.Limit)+4, colLevel, r.Limit)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" fill="%s">0</text>`+"\n", plotRight+6, bottom+4, colLevel)
		fmt.Fprintf(w, `<text transform="translate(%d %.1f) rotate(90)" text-anchor="middle" fill="%s">tokens left</text>`+"\n",
			plotRight+40, (top+bottom)/2, colLevel)
	}

	// Time axis.
	fmt.Fprintf(w, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#212529"/>`+"\n", plotLeft, plotRight, bottom, bottom)
	step := NiceSlice(r.Duration, 10)
	for t := time.Duration(0); t <= r.Duration; t += step {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#495057">%s</text>`+"\n", x(t), bottom+16, u.format(t))
	}
	fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" fill="#495057">time (%s)</text>`+"\n", plotRight, bottom+32, u.name)
	fmt.Fprintln(w, `</g>`)
}

// niceScale returns a round top for a scale reaching peak and the step
// between its gridlines (about four of them).
func niceScale(peak int64) (top, step int64) {
	step = 1
	for {
		for _, m := range []int64{1, 2, 5} {
			if s := step * m; s*4 >= peak {
				return (peak + s - 1) / s * s, s
			}
		}
		step *= 10
	}
}

func esc(s string) string { return html.EscapeString(s) }
