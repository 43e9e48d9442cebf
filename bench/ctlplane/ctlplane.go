// Package ctlplane runs the control-plane benchmarks the datapath numbers are printed with: a
// Maglev table build (lb/maglev) and a plan + apply of 10,000 services into the real datapath
// maps (lb/reconcile), the same cases as those packages' Go benchmarks
// (BenchmarkBuild/N=1000/M=65537 and BenchmarkReconcile10kServices).
package ctlplane

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bench/report"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/maglev"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Run runs every control-plane benchmark and returns its metrics. A benchmark that fails
// becomes a metric with no unit and the error as its note, and the others still run.
func Run() []report.Metric {
	out := []report.Metric{maglevBuild(1000, maglev.DefaultSize)}
	out = append(out, reconcile10k()...)
	out = append(out, endpointLatency())
	return out
}

// maglevBuild times Build of an m-slot table for n equal-weight backends.
func maglevBuild(n, m int) report.Metric {
	name := fmt.Sprintf("Maglev build N=%d M=%d", n, m)
	bs := make([]maglev.Backend, n)
	for i := range bs {
		bs[i] = maglev.Backend{Name: fmt.Sprintf("198.18.%d.%d:8080", i/250, i%250+1), Weight: 1}
	}
	var berr error
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			if _, err := maglev.Build(bs, m, 1); err != nil {
				berr = err
				b.SkipNow()
			}
		}
	})
	if berr != nil || res.N == 0 {
		return report.Metric{Name: name, Note: fmt.Sprintf("failed: %v", berr)}
	}
	return report.Metric{Name: name, Value: float64(res.NsPerOp()) / 1e6, Unit: "ms",
		Note: fmt.Sprintf("one full build, %d iterations (target ≤ 3 ms)", res.N)}
}

// reconcile10k plans and applies 10,000 services of 10 backends (M = 1021) into an unpinned
// datapath, then applies the same plan again (nothing to write).
func reconcile10k() []report.Metric {
	const services, backends = 10000, 10
	fail := func(err error) []report.Metric {
		return []report.Metric{{Name: "reconcile 10k services", Note: fmt.Sprintf("failed: %v", err)}}
	}
	svcs := make([]lb.Service, services)
	for i := range svcs {
		s := lb.Service{
			Name:  "bench/svc-" + strconv.Itoa(i),
			VIPs:  []netip.Addr{netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})},
			Ports: []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		}
		for j := range backends {
			n := i*backends + j
			s.Backends = append(s.Backends, lb.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}), Weight: 1})
		}
		svcs[i] = s
	}
	dp, err := xdp.Load(xdp.Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096}})
	if err != nil {
		return fail(err)
	}
	defer dp.Close()
	r, err := reconcile.New(dp, nil)
	if err != nil {
		return fail(err)
	}
	start := time.Now()
	d, errs := lb.Plan(svcs, lb.PlanOptions{Seed: 1, TableSize: 1021})
	if len(errs) > 0 {
		return fail(fmt.Errorf("plan: %v", errs[0]))
	}
	if _, err := r.Apply(d); err != nil {
		return fail(err)
	}
	full := time.Since(start)
	start = time.Now()
	res, err := r.Apply(d)
	if err != nil {
		return fail(err)
	}
	noop := time.Since(start)
	return []report.Metric{
		{Name: "reconcile 10k services: plan + apply", Value: full.Seconds(), Unit: "s", Note: "10 backends each, M = 1021, into the real maps (target ≤ 10 s)"},
		{Name: "reconcile 10k services: no-op apply", Value: noop.Seconds(), Unit: "s", Note: fmt.Sprintf("same plan again: %d changes", res.Changes())},
	}
}
