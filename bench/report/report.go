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
}

// Host is the machine the run happened on.
type Host struct {
	Kernel  string
	CPUs    int
	CPU     string
	LoadAvg string // /proc/loadavg at the start: other work on the machine skews the numbers
}

// Method says how rows were measured.
type Method struct {
	Duration   time.Duration // generator run per measurement
	Repeats    int           // measurements per row
	GenCPU     int           // the generator's CPU
	GatewayCPU int           // the gateway's NAPI thread (and the sink, in its softirq)
	Window     uint32        // the generator's closed-loop window; 0 = open loop
}

// Ratio is Num's median Mpps over Den's.
type Ratio struct {
	Name     string
	Num, Den string // row names
	Value    float64
	// Paired summarizes the ratios of the two rows' samples taken in the same round (sample i
	// of each), when the rows were measured in rounds: machine noise that lasts a round falls
	// on both sides of each of these ratios.
	Paired *run.Summary `json:",omitempty"`
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

// AddRatio appends num/den of the two rows' medians if both were measured; with rounds, the rows'
// samples were taken in rounds (one of each row per round), and the per-round ratios are
// summarized too.
func (r *Report) AddRatio(name, num, den string, rounds bool) {
	n, d := r.Row(num), r.Row(den)
	if n == nil || d == nil || n.Skip != "" || d.Skip != "" || d.Mpps.Median == 0 {
		return
	}
	q := Ratio{Name: name, Num: num, Den: den, Value: n.Mpps.Median / d.Mpps.Median}
	if rounds && len(n.Samples) == len(d.Samples) {
		var per []float64
		for i := range n.Samples {
			if d.Samples[i].Mpps > 0 {
				per = append(per, n.Samples[i].Mpps/d.Samples[i].Mpps)
			}
		}
		if len(per) == len(n.Samples) {
			s := run.Summarize(per)
			q.Paired = &s
		}
	}
	r.Ratios = append(r.Ratios, q)
}
