// SPDX-License-Identifier: Apache-2.0
package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/xlb-dev/xlb/bench/run"
)

// WriteTable writes the report as plain-text tables.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "xlb-bench %s  kernel %s  %d CPUs (%s)  load average at start: %s",
		r.Date.Format("2006-01-02 15:04 MST"), r.Host.Kernel, r.Host.CPUs, r.Host.CPU, r.Host.LoadAvg)
	if r.Host.LoadAvgEnd != "" {
		fmt.Fprintf(w, ", at the end: %s", r.Host.LoadAvgEnd)
	}
	fmt.Fprintln(w)
	if len(r.Host.Others) > 0 {
		fmt.Fprintf(w, "what else ran (share of one CPU over the run): %s\n", strings.Join(r.Host.Others, ", "))
	}
	if r.Valid() {
		fmt.Fprintln(w, "VALID: every row kept the invariants (spreads, ceiling, load at start)")
	} else {
		fmt.Fprintf(w, "INVALID RUN: %s\n", strings.Join(r.Invalid, "; "))
	}
	loop := "open loop (the generator overruns the gateway)"
	if r.Method.Window > 0 {
		loop = fmt.Sprintf("closed loop (at most %d frames between generator and sink)", r.Method.Window)
	}
	fmt.Fprintf(w, "each row: median of %d runs of %s; generator on CPU %d, gateway NAPI (and sink) on CPU %d; %s\n",
		r.Method.Repeats, r.Method.Duration, r.Method.GenCPU, r.Method.GatewayCPU, loop)
	fmt.Fprintln(w, "cost columns: cpu ns = CPU time of the gateway's threads per unit (NAPI thread, ksoftirqd, AF_XDP worker; schedstat);")
	fmt.Fprintln(w, "bpf ns = the datapath program's run_time_ns/run_cnt (bpf_stats); gw other = other processes' share of the gateway CPU;")
	fmt.Fprintln(w, "per wake = units per time the gateway's threads were scheduled in (small: a starved generator, each wake-up's cost on fewer packets)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "datapath\tmix\tflows\tsize\tunit\tMpps\tmin\tmax\tspread\tcpu ns\tspread\tbpf ns/pkt\tspread\tgw other\tper wake\toffered\tloss\tct entries\truns\tvalid\t")
	for _, row := range r.Rows {
		if row.Skip != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%dB\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t0\t-\t  %s\n", row.Datapath, row.Mix, run.FlowsLabel(row.Flows), row.Size, row.Mix.Unit(), row.Skip)
			continue
		}
		var offered, foreign, wake []float64
		for _, s := range row.Samples {
			offered = append(offered, s.OfferedMpps)
			foreign = append(foreign, s.Cost.GwForeignPct)
			wake = append(wake, s.Cost.PerWake)
		}
		ct := "-"
		if row.ConntrackFlows >= 0 {
			ct = fmt.Sprint(row.ConntrackFlows)
		}
		bpf, bpfSpread := "-", "-"
		if row.BPFNs.Median > 0 {
			bpf, bpfSpread = fmt.Sprintf("%.1f", row.BPFNs.Median), fmt.Sprintf("±%.0f%%", row.BPFNs.SpreadPct()/2)
		}
		valid := "yes"
		if len(row.Invalid) > 0 {
			valid = "INVALID"
		}
		runs := fmt.Sprint(len(row.Samples))
		if row.Attempts > 1 {
			runs = fmt.Sprintf("%d (try %d)", len(row.Samples), row.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%dB\t%s\t%.3f\t%.3f\t%.3f\t±%.0f%%\t%.0f\t±%.0f%%\t%s\t%s\t%.0f%%\t%.0f\t%.3f\t%.1f%%\t%s\t%s\t%s\t\n",
			row.Datapath, row.Mix, run.FlowsLabel(row.Flows), row.Size, row.Mix.Unit(), row.Mpps.Median, row.Mpps.Min, row.Mpps.Max,
			row.Mpps.SpreadPct()/2, row.CPUNs.Median, row.CPUNs.SpreadPct()/2, bpf, bpfSpread, run.Summarize(foreign).Median,
			run.Summarize(wake).Median, run.Summarize(offered).Median, row.LossPct.Median, ct, runs, valid)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var why []string
	for _, row := range r.Rows {
		if len(row.Invalid) > 0 || len(row.Disturbed) > 0 {
			why = append(why, fmt.Sprintf("  %s: %s", row.Name, strings.Join(append(slices.Clone(row.Invalid), row.Disturbed...), "; ")))
		}
	}
	if len(why) > 0 {
		fmt.Fprintln(w, "\nwhat disturbed the rows (invalid: the invariants they broke; then what else took the CPUs):")
		for _, l := range why {
			fmt.Fprintln(w, l)
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nratios (same run, same machine): cost = the gateway threads' cpu ns per unit, den over num (the headline);")
		fmt.Fprintln(w, "bpf = the same of the programs' bpf_stats ns/pkt; Mpps = ratio of the median rates, beside them")
		for _, q := range r.Ratios {
			mark := ""
			if q.Invalid {
				mark = "  INVALID (a row is)"
			}
			cost, bpf := "    -  ", ""
			if q.Cost > 0 {
				cost = fmt.Sprintf("%6.2fx", q.Cost)
			}
			if q.BPF > 0 {
				bpf = fmt.Sprintf("  bpf %.2fx", q.BPF)
			}
			paired := ""
			if q.PairedCost != nil {
				paired = fmt.Sprintf("  per round: cost %.2fx (%.2f–%.2fx)", q.PairedCost.Median, q.PairedCost.Min, q.PairedCost.Max)
			}
			if q.Paired != nil {
				paired += fmt.Sprintf(", Mpps median %.2fx, %.2f–%.2fx", q.Paired.Median, q.Paired.Min, q.Paired.Max)
			}
			fmt.Fprintf(w, "  %-28s cost %s%s  Mpps %5.2fx   (%s / %s)%s%s\n", q.Name, cost, bpf, q.Value, q.Num, q.Den, paired, mark)
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
