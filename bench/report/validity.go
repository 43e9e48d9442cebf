// SPDX-License-Identifier: Apache-2.0
package report

import (
	"fmt"
	"slices"

	"github.com/xlb-dev/xlb/bench/run"
)

// Bounds are the invariants a trustworthy run keeps. A row that breaks one is marked invalid,
// with what broke it; a run with an invalid row, or that started on a loaded machine, is invalid.
type Bounds struct {
	// MaxSpreadPct bounds a row's Mpps range, (max - min) / median, in per cent.
	MaxSpreadPct float64
	// MaxCostSpreadPct bounds the range of a row's cost figure (bpf ns per packet where the
	// datapath has one, else CPU ns per packet), in per cent.
	MaxCostSpreadPct float64
	// MaxLoad bounds the 1-minute load average when the run starts.
	MaxLoad float64
	// DisturbedPct is the share of a CPU (median over the row's samples) that other processes
	// may take before the row says so (Result.Disturbed; it does not make the row invalid: the
	// spreads and the ceiling say whether it mattered).
	DisturbedPct float64
}

// DefaultBounds are the bounds of xlb-bench's flags: a row's Mpps within ±20%, its cost within
// ±10%, a load average of at most 1 (half the 2-vCPU VM's CPUs busy) at the start, and a CPU
// disturbed when others take more than 5% of it.
func DefaultBounds() Bounds {
	return Bounds{MaxSpreadPct: 40, MaxCostSpreadPct: 20, MaxLoad: 1.0, DisturbedPct: 5}
}

// CeilingDatapath is the plain redirect's row name prefix: no datapath can be faster.
const CeilingDatapath = "xdp-redirect"

// Valid says whether the run kept every invariant.
func (r *Report) Valid() bool { return len(r.Invalid) == 0 }

// CostFigure is the cost a row's comparisons rest on: bpf ns per packet when the datapath is an
// XDP program measured by bpf_stats, else the gateway CPU's ns per packet (or per handshake).
func CostFigure(row *run.Result) (run.Summary, string) {
	if row.BPFNs.Median > 0 && row.Mix != run.MixConnect {
		return row.BPFNs, "bpf ns/pkt"
	}
	return row.CPUNs, "cpu ns/" + row.Mix.Unit()
}

// Validate checks every measured row against b and the plain-redirect ceiling, and the run's
// start against b.MaxLoad (load is the 1-minute load average then), filling each row's Invalid
// and Disturbed and the report's Invalid. It replaces what an earlier Validate wrote.
func (r *Report) Validate(b Bounds, load float64) {
	r.Bounds = b
	r.Invalid = nil
	if load > b.MaxLoad {
		r.Invalid = append(r.Invalid, fmt.Sprintf("load average %.2f at the start, above %.2f: other work on the machine", load, b.MaxLoad))
	}
	ceilings := map[int]*run.Result{} // by frame size
	for i := range r.Rows {
		row := &r.Rows[i]
		row.Invalid, row.Disturbed = nil, nil
		if row.Skip == "" && row.Datapath == CeilingDatapath {
			ceilings[row.Size] = row
		}
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Skip != "" || len(row.Samples) == 0 {
			continue
		}
		if s := row.Mpps.SpreadPct(); s > b.MaxSpreadPct {
			row.Invalid = append(row.Invalid, fmt.Sprintf("Mpps spread %.0f%% above %.0f%%", s, b.MaxSpreadPct))
		}
		if cost, what := CostFigure(row); cost.SpreadPct() > b.MaxCostSpreadPct {
			row.Invalid = append(row.Invalid, fmt.Sprintf("%s spread %.0f%% above %.0f%%", what, cost.SpreadPct(), b.MaxCostSpreadPct))
		}
		row.Disturbed = disturbance(row, b.DisturbedPct)
		c := ceilings[row.Size]
		if c == nil || c == row || row.Mix.Unit() != "pkt" {
			continue
		}
		if row.Mpps.Median > c.Mpps.Median {
			row.Invalid = append(row.Invalid, fmt.Sprintf("faster than the plain-redirect ceiling (%.3f > %.3f Mpps)", row.Mpps.Median, c.Mpps.Median))
			c.Invalid = append(c.Invalid, fmt.Sprintf("slower than %s (%.3f < %.3f Mpps): the ceiling was disturbed", row.Name, c.Mpps.Median, row.Mpps.Median))
		}
		if row.BPFNs.Median > 0 && c.BPFNs.Median > 0 && row.BPFNs.Median < c.BPFNs.Median {
			row.Invalid = append(row.Invalid, fmt.Sprintf("cheaper than the plain-redirect ceiling (%.1f < %.1f bpf ns/pkt)", row.BPFNs.Median, c.BPFNs.Median))
		}
		if row.CPUNs.Median > 0 && row.CPUNs.Median < c.CPUNs.Median {
			row.Invalid = append(row.Invalid, fmt.Sprintf("cheaper than the plain-redirect ceiling (%.0f < %.0f cpu ns/pkt)", row.CPUNs.Median, c.CPUNs.Median))
			c.Invalid = append(c.Invalid, fmt.Sprintf("dearer than %s (%.0f > %.0f cpu ns/pkt): the ceiling was disturbed", row.Name, c.CPUNs.Median, row.CPUNs.Median))
		}
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		row.Invalid = slices.Compact(row.Invalid)
		if len(row.Invalid) > 0 {
			r.Invalid = append(r.Invalid, fmt.Sprintf("row %s invalid", row.Name))
		}
	}
}

// disturbance says what other work took the CPUs while row ran: the medians over its samples of
// other processes' user time on the gateway's and the generator's CPU and the hypervisor's
// steal, where above pct.
func disturbance(row *run.Result, pct float64) []string {
	var gw, gen, steal []float64
	for _, s := range row.Samples {
		gw, gen, steal = append(gw, s.Cost.GwForeignPct), append(gen, s.Cost.GenForeignPct), append(steal, s.Cost.GwStealPct)
	}
	var out []string
	for _, d := range []struct {
		what string
		xs   []float64
	}{{"other processes took %.0f%% of the gateway's CPU", gw}, {"other processes took %.0f%% of the generator's CPU", gen},
		{"the hypervisor stole %.0f%% of the gateway's CPU", steal}} {
		if m := run.Summarize(d.xs).Median; m > pct {
			out = append(out, fmt.Sprintf(d.what, m))
		}
	}
	return out
}

// InvalidRows are the names of the rows Validate marked invalid.
func (r *Report) InvalidRows() []string {
	var out []string
	for _, row := range r.Rows {
		if len(row.Invalid) > 0 {
			out = append(out, row.Name)
		}
	}
	return out
}
