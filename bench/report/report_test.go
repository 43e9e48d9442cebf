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
	if !strings.Contains(b.String(), "per round: median 0.80x, 0.80–0.88x") {
		t.Errorf("table lacks the per-round ratios:\n%s", b.String())
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
