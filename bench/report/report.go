// SPDX-License-Identifier: Apache-2.0

// Package report holds the benchmark's results and writes them three ways: a plain-text table,
// a JSON file and a PNG bar chart.
package report

import (
	"time"

	"github.com/xlb-dev/xlb/bench/run"
)

// Report is one benchmark run.
type Report struct {
	// Date is when the run started.
	Date time.Time
	// Host describes the machine.
	Host Host
	// Method is how each row was measured (durations, repeats, CPU placement).
	Method Method
	// Rows are the datapath measurements, in the order they ran.
	Rows []run.Result
	// Ratios compare rows measured in the same run.
	Ratios []Ratio
	// ControlPlane are the control-plane benchmarks' numbers.
	ControlPlane []Metric
	// Notes are things the reader must know (what is not built, what was skipped and why).
	Notes []string
	// Bounds are the invariants the run was validated against (Validate); Invalid says which
	// it broke (empty: a valid run).
	Bounds  Bounds
	Invalid []string `json:",omitempty"`
}

// Host is the machine the run happened on.
type Host struct {
	Kernel  string
	CPUs    int
	CPU     string
	LoadAvg string // /proc/loadavg at the start: other work on the machine skews the numbers
	// LoadAvgEnd is /proc/loadavg when the rows were done.
	LoadAvgEnd string `json:",omitempty"`
	// Others are the processes (not this one) that took the most CPU time during the run, with
	// their share of one CPU: what else ran.
	Others []string `json:",omitempty"`
}

// Method says how rows were measured.
type Method struct {
	Duration   time.Duration // generator run per measurement
	Repeats    int           // measurements per row
	GenCPU     int           // the generator's CPU
	GatewayCPU int           // the gateway's NAPI thread (and the sink, in its softirq)
	Window     uint32        // the generator's closed-loop window; 0 = open loop
}

// Ratio compares two rows: how many times Num's figure is Den's, as a speed (Num faster: above
// 1). Cost is the headline: Den's gateway CPU time per packet over Num's (the rows' CPUNs
// medians); BPF the same of their bpf_stats ns per packet when both rows are XDP programs;
// Value is the ratio of their median Mpps, shown beside it.
type Ratio struct {
	Name     string
	Num, Den string // row names
	Value    float64
	Cost     float64 `json:",omitempty"`
	BPF      float64 `json:",omitempty"`
	// Paired and PairedCost summarize the Mpps and cost ratios of the two rows' samples taken in
	// the same round (sample i of each), when the rows were measured in rounds: machine noise
	// that lasts a round falls on both sides of each of these ratios.
	Paired     *run.Summary `json:",omitempty"`
	PairedCost *run.Summary `json:",omitempty"`
	// Invalid is set when either row is invalid (Validate): the ratio is not to be trusted.
	Invalid bool `json:",omitempty"`
}

// Metric is one control-plane number.
type Metric struct {
	Name  string
	Value float64
	Unit  string
	// Note says what it measures, or why it is missing.
	Note string `json:",omitempty"`
}

// Row returns the row named name, or nil.
func (r *Report) Row(name string) *run.Result {
	for i := range r.Rows {
		if r.Rows[i].Name == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// AddRatio appends num/den of the two rows' medians (cost and Mpps) if both were measured; with
// rounds, the rows' samples were taken in rounds (one of each row per round), and the per-round
// ratios are summarized too. Call it after Validate: a ratio of an invalid row is marked.
func (r *Report) AddRatio(name, num, den string, rounds bool) {
	n, d := r.Row(num), r.Row(den)
	if n == nil || d == nil || n.Skip != "" || d.Skip != "" || d.Mpps.Median == 0 {
		return
	}
	q := Ratio{Name: name, Num: num, Den: den, Value: n.Mpps.Median / d.Mpps.Median,
		Invalid: len(n.Invalid) > 0 || len(d.Invalid) > 0}
	if n.CPUNs.Median > 0 {
		q.Cost = d.CPUNs.Median / n.CPUNs.Median
	}
	if n.BPFNs.Median > 0 && d.BPFNs.Median > 0 && n.Mix.Unit() == d.Mix.Unit() {
		q.BPF = d.BPFNs.Median / n.BPFNs.Median
	}
	paired := rounds && len(n.Samples) == len(d.Samples) && n.Attempts <= 1 && d.Attempts <= 1
	if paired {
		var per, cost []float64
		for i := range n.Samples {
			if d.Samples[i].Mpps > 0 {
				per = append(per, n.Samples[i].Mpps/d.Samples[i].Mpps)
			}
			if n.Samples[i].Cost.CPUNsPerUnit > 0 {
				cost = append(cost, d.Samples[i].Cost.CPUNsPerUnit/n.Samples[i].Cost.CPUNsPerUnit)
			}
		}
		if len(per) == len(n.Samples) {
			s := run.Summarize(per)
			q.Paired = &s
		}
		if len(cost) == len(n.Samples) {
			s := run.Summarize(cost)
			q.PairedCost = &s
		}
	}
	r.Ratios = append(r.Ratios, q)
}
