// SPDX-License-Identifier: Apache-2.0

// Command xlb-bench measures the forwarding rate of xlb's XDP datapath next to what a user
// would use instead, in the same run on the same machine: a plain XDP redirect (the ceiling of
// the box) and nftables DNAT with kernel forwarding. It builds generator -> gateway -> sink
// namespaces for every row, prints a table and writes JSON and a PNG chart. See bench/README.md.
//
//	xlb-bench [flags]   run the benchmark (as root)
//	xlb-bench down      remove namespaces that killed runs left behind
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/bench/gen"
	"github.com/xlb-dev/xlb/bench/report"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "down" {
		if err := sweep(log, true); err != nil {
			log.Error("down", "error", err)
			os.Exit(1)
		}
		return
	}
	cfg := config{}
	fs := flag.NewFlagSet("xlb-bench", flag.ExitOnError)
	fs.StringVar(&cfg.out, "out", "bench/results", "directory for results.txt, results.json and results.png")
	fs.DurationVar(&cfg.duration, "duration", 2*time.Second, "generator run per measurement (at most 30s)")
	fs.IntVar(&cfg.repeats, "repeats", 5, "measurements per row (median and spread are printed; at most 20)")
	fs.IntVar(&cfg.size, "size", 64, "frame size in bytes, as the kernel sees it (no FCS)")
	fs.Uint64Var(&cfg.rate, "rate", 0, "generator target in frames per second (0: full speed)")
	fs.IntVar(&cfg.genCPU, "gen-cpu", 0, "CPU of the generator")
	fs.IntVar(&cfg.gwCPU, "gw-cpu", 1, "CPU of the gateway's NAPI thread (and the sink)")
	fs.UintVar(&cfg.batch, "batch", gen.DefaultBatch, "frames per generator batch (the gateway is woken once per batch)")
	fs.UintVar(&cfg.window, "window", gen.DefaultWindow, "closed loop: most frames on their way from generator to sink (0: open loop, overrun the gateway)")
	fs.BoolVar(&cfg.quick, "quick", false, "only the main comparison at 1k flows and the cps rows (no flow-count sweep, no conntrack scale)")
	fs.BoolVar(&cfg.noCtl, "no-control-plane", false, "skip the Maglev and reconcile benchmarks")
	fs.StringVar(&cfg.only, "only", "", "run only the rows whose name (e.g. xlb/est/1k/64B) matches this regular expression")
	b := report.DefaultBounds()
	fs.Float64Var(&b.MaxSpreadPct, "max-spread", b.MaxSpreadPct, "a row whose Mpps range (max-min)/median exceeds this many per cent is invalid")
	fs.Float64Var(&b.MaxCostSpreadPct, "max-cost-spread", b.MaxCostSpreadPct, "a row whose cost figure's range exceeds this many per cent is invalid")
	fs.Float64Var(&b.MaxLoad, "max-load", b.MaxLoad, "a run that starts at a higher 1-minute load average is invalid")
	fs.IntVar(&cfg.retries, "repeat-until-stable", 0, "measure an invalid row again, at most this many times (0..5)")
	fs.IntVar(&cfg.cpsFlows, "cps-flows", defaultCPSFlows, "connections per measurement of the cps rows (each a fresh tuple; the run ends at this count or --duration)")
	_ = fs.Parse(os.Args[1:])
	cfg.bounds = b
	if err := cfg.validate(); err != nil {
		log.Error("flags", "error", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		log.Error("xlb-bench needs root (BPF, XDP, network namespaces)")
		os.Exit(1)
	}
	if err := sweep(log, false); err != nil {
		log.Warn("sweep leftovers of killed runs", "error", err)
	}
	if err := benchmark(ctx, log, cfg); err != nil {
		log.Error("benchmark", "error", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	out           string
	duration      time.Duration
	repeats, size int
	rate          uint64
	genCPU, gwCPU int
	batch, window uint
	quick, noCtl  bool
	only          string
	bounds        report.Bounds
	retries       int // --repeat-until-stable
	cpsFlows      int
}

// Bounds of every load loop: no run of the command can send for longer than this in total.
const (
	maxDuration = 30 * time.Second
	maxRepeats  = 20
	maxRetries  = 5
	// maxCPSFlows bounds the connections of a cps measurement: each is a conntrack entry in
	// the datapath under test (nftables' limit is raised for those rows to cpsConntrackMax).
	maxCPSFlows = 1 << 20
)

// defaultCPSFlows is --cps-flows' default: half a million connections per measurement (at
// the rates of this VM, a 2 s measurement ends by time for nftables and about then for xlb).
const defaultCPSFlows = 1 << 19

func (c config) validate() error {
	if c.duration <= 0 || c.duration > maxDuration {
		return fmt.Errorf("duration %s outside (0, %s]", c.duration, maxDuration)
	}
	if c.repeats < 1 || c.repeats > maxRepeats {
		return fmt.Errorf("repeats %d outside 1..%d", c.repeats, maxRepeats)
	}
	if c.window != 0 && (c.window < 64 || c.window > 256) {
		return fmt.Errorf("window %d outside 64..256 (a veth's ring holds 256 frames; 0 = open loop)", c.window)
	}
	if c.retries < 0 || c.retries > maxRetries {
		return fmt.Errorf("--repeat-until-stable %d outside 0..%d", c.retries, maxRetries)
	}
	if c.cpsFlows < 1000 || c.cpsFlows > maxCPSFlows {
		return fmt.Errorf("--cps-flows %d outside 1000..%d", c.cpsFlows, maxCPSFlows)
	}
	if _, err := regexp.Compile(c.only); err != nil {
		return fmt.Errorf("--only: %w", err)
	}
	if c.genCPU == c.gwCPU {
		return fmt.Errorf("generator and gateway on the same CPU %d: the numbers would measure their sum", c.genCPU)
	}
	return nil
}
