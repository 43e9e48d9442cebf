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
	fs.BoolVar(&cfg.quick, "quick", false, "only the main comparison at 1k flows (no flow-count sweep, no conntrack scale)")
	fs.BoolVar(&cfg.noCtl, "no-control-plane", false, "skip the Maglev and reconcile benchmarks")
	fs.StringVar(&cfg.only, "only", "", "run only the rows whose name (e.g. xlb/est/1k/64B) matches this regular expression")
	_ = fs.Parse(os.Args[1:])
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
}

// Bounds of every load loop: no run of the command can send for longer than this in total.
const (
	maxDuration = 30 * time.Second
	maxRepeats  = 20
)

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
	if _, err := regexp.Compile(c.only); err != nil {
		return fmt.Errorf("--only: %w", err)
	}
	if c.genCPU == c.gwCPU {
		return fmt.Errorf("generator and gateway on the same CPU %d: the numbers would measure their sum", c.genCPU)
	}
	return nil
}
