// SPDX-License-Identifier: Apache-2.0

// Package ctlplane runs the control-plane benchmarks the datapath numbers are printed with: a
// Maglev table build (lb/maglev), a reconcile of 10,000 services into the real datapath maps,
// and the latency from an EndpointSlice update to the maps. The last two drive the appliance's
// own code (lb/gateway: one Reconcile pass; gateway.Run in Kubernetes mode) on an unpinned XDP
// datapath, so that they measure what `xlb run` does.
package ctlplane

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bench/report"
	"github.com/xlb-dev/xlb/internal/conformance"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/gateway"
	"github.com/xlb-dev/xlb/lb/maglev"
	"github.com/xlb-dev/xlb/xdp/datapath"
	xdpgw "github.com/xlb-dev/xlb/xdp/gateway"
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

// reconcile10k runs the gateway's reconcile pass over 10,000 services of 10 backends (M = 1021)
// into an unpinned datapath, then again with nothing to write.
func reconcile10k() []report.Metric {
	fail := func(err error) []report.Metric {
		return []report.Metric{{Name: "reconcile 10k services", Note: fmt.Sprintf("failed: %v", err)}}
	}
	dp, err := loadDatapath()
	if err != nil {
		return fail(err)
	}
	defer dp.Close()
	cfg := &config.Config{Interfaces: []config.Interface{{Name: "bench0"}}, Listen: config.DefaultListen,
		Datapath:     config.Datapath{Settings: datapath.Settings{Seed: 1}, MaglevTableSize: 1021},
		Services:     conformance.Services(10000, 10),
		HealthChecks: map[string]config.HealthCheck{}}
	g, err := gateway.New(cfg, dp, slog.New(slog.DiscardHandler), gateway.Options{})
	if err != nil {
		return fail(err)
	}
	start := time.Now()
	if err := g.Reconcile(); err != nil {
		return fail(err)
	}
	full := time.Since(start)
	before := dp.writes.Load()
	start = time.Now()
	if err := g.Reconcile(); err != nil {
		return fail(err)
	}
	noop := time.Since(start)
	return []report.Metric{
		{Name: "reconcile 10k services: plan + apply", Value: full.Seconds(), Unit: "s", Note: "10 backends each, M = 1021, the gateway's reconcile pass into the real maps (target ≤ 10 s)"},
		{Name: "reconcile 10k services: no-op apply", Value: noop.Seconds(), Unit: "s", Note: fmt.Sprintf("the same pass again: %d writes", dp.writes.Load()-before)},
	}
}

// loadDatapath loads an unpinned XDP datapath, attached nowhere, for the control plane to write.
func loadDatapath() (*benchDatapath, error) {
	d, err := xdpgw.Load(xdpgw.Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096}})
	if err != nil {
		return nil, err
	}
	return &benchDatapath{Datapath: d}, nil
}
