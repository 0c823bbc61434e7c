package simulate

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// unit is a time unit for labels, chosen so that a simulation's span
// reads in the units a user would say it in.
type unit struct {
	name string
	d    time.Duration
}

func unitFor(span time.Duration) unit {
	switch {
	case span < 2*time.Second:
		return unit{"ms", time.Millisecond}
	case span <= 10*time.Minute:
		return unit{"s", time.Second}
	case span <= 10*time.Hour:
		return unit{"min", time.Minute}
	}
	return unit{"h", time.Hour}
}

// format writes t in the unit, with no more decimals than it needs, and
// at most three.
func (u unit) format(t time.Duration) string {
	v := math.Round(float64(t)/float64(u.d)*1000) / 1000
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// WriteText writes the summary table of the reports, which ran on the
// same traffic, and then their slices side by side.
func WriteText(w io.Writer, traffic string, reports []*Report) error {
	if len(reports) == 0 {
		return nil
	}
	r0 := reports[0]
	u := unitFor(r0.Duration)
	fmt.Fprintf(w, "traffic: %s\n%d requests in %v, slices of %v, %s\n\n", traffic, r0.Requests, r0.Duration, r0.Slice, keysText(r0))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "limiter\tpolicy\taccepted\trejected\tworst window\twait p50 / p99 / max")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.Name, r.Policy, r.Accepted, r.Rejected, worstText(r), waitText(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reports {
		if r.Lease != nil {
			fmt.Fprintf(w, "%s: leased by %d processes, leases of %d to %d tokens for %v: never above the exact policy, at most %d (P×max) held unspent; levels are the store's, without them\n",
				r.Name, r.Processes, r.Lease.Min, r.Lease.Max, r.Lease.TTL, int64(r.Processes)*r.Lease.Max)
		}
		if r.Shadow {
			fmt.Fprintf(w, "%s: in shadow mode: accepted every request; without it, it would have rejected %d (the slices' shadow-rejected)\n",
				r.Name, r.ShadowRejected)
		}
		if r.Late > 0 {
			fmt.Fprintf(w, "%s: %d admitted requests leave after the end, outside the slices\n", r.Name, r.Late)
		}
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"time (" + u.name + ")"}
	for _, r := range reports {
		rejected := "rejected"
		if r.Shadow {
			rejected = "shadow-rejected"
		}
		head = append(head, r.Name+" accepted", rejected, "level")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for i, s := range r0.Slices {
		row := []string{u.format(s.Start)}
		for _, r := range reports {
			s := r.Slices[i]
			rejected := s.Rejected
			if r.Shadow {
				rejected = s.ShadowRejected
			}
			row = append(row, strconv.FormatInt(s.Accepted, 10), strconv.FormatInt(rejected, 10), levelText(s.Level))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// keysText says which keys the requests were on and whose level the
// slices show.
func keysText(r *Report) string {
	if r.Keys <= 1 {
		return "all on one key"
	}
	return fmt.Sprintf("on %d keys; the level is that of %q, the busiest", r.Keys, r.LevelKey)
}

func worstText(r *Report) string {
	if r.Window <= 0 || r.Worst.Count == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d in %v from %v", r.Worst.Count, r.Window, short(r.Worst.Start))
	if r.Worst.Key != "" {
		s += fmt.Sprintf(" on %q", r.Worst.Key)
	}
	if r.Limit > 0 && r.Limit != math.MaxInt64 {
		s += fmt.Sprintf(" (limit %d, %.2f×)", r.Limit, float64(r.Worst.Count)/float64(r.Limit))
	}
	return s
}

func waitText(r *Report) string {
	if r.Waits == (Waits{}) {
		return "-"
	}
	return fmt.Sprintf("%v / %v / %v", short(r.Waits.P50), short(r.Waits.P99), short(r.Waits.Max))
}

// short rounds d to about four significant digits, for reading.
func short(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit <= time.Hour; unit *= 10 {
		if d < 10000*unit {
			return d.Round(unit)
		}
	}
	return d
}

func levelText(l int64) string {
	if l == math.MaxInt64 {
		return "∞"
	}
	return strconv.FormatInt(l, 10)
}
