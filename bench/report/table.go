package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/xlb-dev/xlb/bench/run"
)

// WriteTable writes the report as plain-text tables.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "xlb-bench %s  kernel %s  %d CPUs (%s)  load average at start: %s\n",
		r.Date.Format("2006-01-02 15:04 MST"), r.Host.Kernel, r.Host.CPUs, r.Host.CPU, r.Host.LoadAvg)
	loop := "open loop (the generator overruns the gateway)"
	if r.Method.Window > 0 {
		loop = fmt.Sprintf("closed loop (at most %d frames between generator and sink)", r.Method.Window)
	}
	fmt.Fprintf(w, "each row: median of %d runs of %s; generator on CPU %d, gateway NAPI (and sink) on CPU %d; %s\n\n",
		r.Method.Repeats, r.Method.Duration, r.Method.GenCPU, r.Method.GatewayCPU, loop)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "datapath\tmix\tflows\tsize\tMpps\tmin\tmax\tspread\toffered\tloss\tct entries\truns\t")
	for _, row := range r.Rows {
		if row.Skip != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%dB\t-\t-\t-\t-\t-\t-\t-\t0\t  %s\n", row.Datapath, row.Mix, run.FlowsLabel(row.Flows), row.Size, row.Skip)
			continue
		}
		var offered []float64
		for _, s := range row.Samples {
			offered = append(offered, s.OfferedMpps)
		}
		ct := "-"
		if row.ConntrackFlows >= 0 {
			ct = fmt.Sprint(row.ConntrackFlows)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%dB\t%.3f\t%.3f\t%.3f\t±%.0f%%\t%.3f\t%.1f%%\t%s\t%d\t\n",
			row.Datapath, row.Mix, run.FlowsLabel(row.Flows), row.Size, row.Mpps.Median, row.Mpps.Min, row.Mpps.Max,
			row.Mpps.SpreadPct()/2, run.Summarize(offered).Median, row.LossPct.Median, ct, len(row.Samples))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (medians, same run, same machine):")
		for _, q := range r.Ratios {
			paired := ""
			if q.Paired != nil {
				paired = fmt.Sprintf("  per round: median %.2fx, %.2f–%.2fx", q.Paired.Median, q.Paired.Min, q.Paired.Max)
			}
			fmt.Fprintf(w, "  %-28s %6.2fx   (%s / %s)%s\n", q.Name, q.Value, q.Num, q.Den, paired)
		}
	}
	if len(r.ControlPlane) > 0 {
		fmt.Fprintln(w, "\ncontrol plane:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, m := range r.ControlPlane {
			if m.Unit == "" {
				fmt.Fprintf(tw, "  %s\t-\t\t%s\n", m.Name, m.Note)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%.3f\t%s\t%s\n", m.Name, m.Value, m.Unit, m.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	return nil
}
