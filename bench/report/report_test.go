// SPDX-License-Identifier: Apache-2.0
package report

import (
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/bench/run"
)

// row is a measured row with these samples' Mpps.
func row(name string, mpps ...float64) run.Result {
	r := run.Result{Name: name}
	for _, m := range mpps {
		r.Samples = append(r.Samples, run.Sample{Mpps: m})
	}
	r.Mpps = run.Summarize(mpps)
	return r
}

// TestRatioPairsRounds: the ratio of medians, and the per-round ratios of rows measured in rounds
// (here a slow round 2 that both rows felt).
func TestRatioPairsRounds(t *testing.T) {
	rep := &Report{Rows: []run.Result{row("a", 4, 2, 4.4), row("b", 5, 2.5, 5)}}
	rep.AddRatio("a/b", "a", "b", true)
	rep.AddRatio("a/b unpaired", "a", "b", false)
	rep.AddRatio("a/missing", "a", "c", true)
	if len(rep.Ratios) != 2 {
		t.Fatalf("%d ratios, want 2 (none for a missing row): %+v", len(rep.Ratios), rep.Ratios)
	}
	q := rep.Ratios[0]
	if q.Value != 4.0/5 {
		t.Errorf("ratio of medians %.3f, want 0.8", q.Value)
	}
	if q.Paired == nil || !near(q.Paired.Median, 0.8) || !near(q.Paired.Min, 0.8) || !near(q.Paired.Max, 0.88) {
		t.Errorf("per-round ratios %+v, want median 0.8, 0.8..0.88", q.Paired)
	}
	if rep.Ratios[1].Paired != nil {
		t.Errorf("unpaired ratio has per-round ratios: %+v", rep.Ratios[1].Paired)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Mpps median 0.80x, 0.80–0.88x") {
		t.Errorf("table lacks the per-round ratios:\n%s", b.String())
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// costRow is a measured row of datapath dp (mix est, 64 B) whose samples have these Mpps and
// gateway CPU ns per packet, and bpf ns per packet when bpf is given.
func costRow(dp string, mpps, cpu, bpf []float64) run.Result {
	r := run.Result{Name: dp + "/est/1k/64B", Datapath: dp, Mix: run.MixEstablished, Flows: 1000, Size: 64}
	for i := range mpps {
		s := run.Sample{Mpps: mpps[i], Received: 1, Cost: run.Cost{CPUNsPerUnit: cpu[i]}}
		if bpf != nil {
			s.Cost.BPFNsPerPkt, s.Cost.BPFRuns = bpf[i], 1
		}
		r.Samples = append(r.Samples, s)
	}
	return run.Merge(run.Result{}, r)
}

// TestValidate: the invariants. A datapath faster than the ceiling makes both rows invalid; a
// spread above the bound (of Mpps or of the cost figure) makes its row invalid; a loaded start
// makes the run invalid; ratios of an invalid row are marked; a quiet run is valid.
func TestValidate(t *testing.T) {
	b := DefaultBounds()
	quiet := func() *Report {
		return &Report{Rows: []run.Result{
			costRow(CeilingDatapath, []float64{5, 5.2, 5.1}, []float64{180, 182, 181}, []float64{20, 20.5, 20.2}),
			costRow("xlb", []float64{4, 4.1, 4.2}, []float64{240, 238, 242}, []float64{50, 51, 50.5}),
			costRow("nftables", []float64{0.7, 0.72, 0.71}, []float64{1400, 1410, 1390}, nil),
		}}
	}
	rep := quiet()
	rep.Validate(b, 0.3)
	if !rep.Valid() || len(rep.InvalidRows()) != 0 {
		t.Fatalf("a quiet run is invalid: %v", rep.Invalid)
	}
	rep.AddRatio("xlb/nftables", "xlb/est/1k/64B", "nftables/est/1k/64B", true)
	q := rep.Ratios[0]
	if !near(q.Cost, 1400/240.0) || q.BPF != 0 || q.Invalid || q.PairedCost == nil {
		t.Errorf("xlb/nftables: cost %.3f (want %.3f), bpf %.3f (want none), invalid %v, per round %v", q.Cost, 1400/240.0, q.BPF, q.Invalid, q.PairedCost)
	}

	// The ceiling disturbed: xlb looks faster than it.
	rep = quiet()
	rep.Rows[0] = costRow(CeilingDatapath, []float64{3.9, 4.0, 3.95}, []float64{180, 182, 181}, []float64{20, 20.5, 20.2})
	rep.Validate(b, 0.3)
	if got := rep.InvalidRows(); len(got) != 2 || got[0] != rep.Rows[0].Name || got[1] != rep.Rows[1].Name {
		t.Errorf("invalid rows %v, want the ceiling and xlb", got)
	}
	if rep.Valid() {
		t.Error("a run with an invalid row is valid")
	}
	rep.AddRatio("xlb/ceiling", "xlb/est/1k/64B", CeilingDatapath+"/est/1k/64B", true)
	rep.AddRatio("nftables/nftables", "nftables/est/1k/64B", "nftables/est/1k/64B", true)
	if !rep.Ratios[0].Invalid || rep.Ratios[1].Invalid {
		t.Errorf("ratio marks %v %v, want the ceiling's invalid, nftables' not", rep.Ratios[0].Invalid, rep.Ratios[1].Invalid)
	}

	// The ceiling's CPU time disturbed: xlb looks cheaper than it.
	rep = quiet()
	rep.Rows[0] = costRow(CeilingDatapath, []float64{5, 5.2, 5.1}, []float64{250, 252, 251}, []float64{20, 20.5, 20.2})
	rep.Validate(b, 0.3)
	if got := rep.InvalidRows(); len(got) != 2 || !strings.Contains(strings.Join(rep.Rows[1].Invalid, ";"), "cpu ns/pkt") {
		t.Errorf("invalid rows %v (xlb: %q), want the ceiling and xlb, by cpu ns", got, rep.Rows[1].Invalid)
	}

	// Spreads: Mpps (nftables, ±25%) and cost (xlb's bpf ns, ±15%).
	rep = quiet()
	rep.Rows[2] = costRow("nftables", []float64{0.5, 0.7, 0.85}, []float64{1400, 1410, 1390}, nil)
	rep.Rows[1] = costRow("xlb", []float64{4, 4.1, 4.2}, []float64{240, 238, 242}, []float64{45, 51, 60})
	rep.Validate(b, 0.3)
	if got := rep.InvalidRows(); len(got) != 2 || got[0] != rep.Rows[1].Name || got[1] != rep.Rows[2].Name {
		t.Errorf("invalid rows %v, want xlb (cost spread) and nftables (Mpps spread)", got)
	}
	if r := rep.Rows[1].Invalid; len(r) != 1 || !strings.Contains(r[0], "bpf ns/pkt spread") {
		t.Errorf("xlb's reasons %q, want its bpf ns spread", r)
	}

	// A loaded start.
	rep = quiet()
	rep.Validate(b, 3.5)
	if rep.Valid() || !strings.Contains(strings.Join(rep.Invalid, ";"), "load average 3.50") {
		t.Errorf("a run started at load 3.5 is valid or does not say why: %v", rep.Invalid)
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "INVALID RUN: load average 3.50") {
		t.Errorf("the table does not mark the run invalid:\n%s", out.String())
	}
}

// TestTableMarksRows: an invalid row says INVALID in its line and why below the table; the cost
// columns are printed.
func TestTableMarksRows(t *testing.T) {
	rep := &Report{Rows: []run.Result{
		costRow(CeilingDatapath, []float64{3, 3, 3}, []float64{180, 182, 181}, []float64{20, 20.5, 20.2}),
		costRow("xlb", []float64{4, 4.1, 4.2}, []float64{240, 238, 242}, []float64{50, 51, 50.5}),
	}}
	rep.Rows[1].Samples[0].Cost.GwForeignPct = 30
	rep.Rows[1].Samples[1].Cost.GwForeignPct = 30
	rep.Validate(DefaultBounds(), 0)
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	var xlbLine string
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "xlb ") {
			xlbLine = l
		}
	}
	if !strings.Contains(xlbLine, "INVALID") || !strings.Contains(xlbLine, "50.5") || !strings.Contains(xlbLine, "240") {
		t.Errorf("xlb's line lacks its cost columns or its mark: %q", xlbLine)
	}
	for _, want := range []string{"faster than the plain-redirect ceiling", "other processes took 30% of the gateway's CPU"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, out.String())
		}
	}
}
