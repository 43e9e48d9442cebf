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

// AddRatio appends num/den of the two rows' medians if both were measured.
func (r *Report) AddRatio(name, num, den string) {
	n, d := r.Row(num), r.Row(den)
	if n == nil || d == nil || n.Skip != "" || d.Skip != "" || d.Mpps.Median == 0 {
		return
	}
	r.Ratios = append(r.Ratios, Ratio{Name: name, Num: num, Den: den, Value: n.Mpps.Median / d.Mpps.Median})
}
