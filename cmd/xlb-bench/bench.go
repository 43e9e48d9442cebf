// SPDX-License-Identifier: Apache-2.0
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlb-dev/xlb/bench/ctlplane"
	"github.com/xlb-dev/xlb/bench/report"
	"github.com/xlb-dev/xlb/bench/run"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// xlbConntrack is xlb's conntrack size in the benchmark: room for the 1M-flow rows.
const xlbConntrack = 1 << 21

// cpsConntrackMin is the least nf_conntrack_max the nftables cps row asks for (its
// connections, an eighth more for slack, at least this).
const cpsConntrackMin = 300_000

// othersShown is how many other processes the report names as what else ran.
const othersShown = 5

// benchmark runs every row, then the control plane, and writes the results.
func benchmark(ctx context.Context, log *slog.Logger, cfg config) (err error) {
	prefix := netlab.TaggedPrefix("xb")
	release, err := claim(prefix)
	if err != nil {
		return err
	}
	defer release()
	r, err := run.NewRunner(run.Options{Prefix: prefix, Duration: cfg.duration, Repeats: cfg.repeats, Rate: cfg.rate,
		GenCPU: cfg.genCPU, GatewayCPU: cfg.gwCPU, Batch: uint32(cfg.batch), Window: uint32(cfg.window), Log: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.Close()) }()
	hostInfo := host()
	load := firstLoad(hostInfo.LoadAvg)
	before, err := cpuByProcess()
	if err != nil {
		log.Warn("what else runs: unknown", "error", err)
	}
	started := time.Now()
	rep := &report.Report{Date: started, Host: hostInfo,
		Method: report.Method{Duration: cfg.duration, Repeats: cfg.repeats, GenCPU: cfg.genCPU, GatewayCPU: cfg.gwCPU,
			Window: uint32(cfg.window)}}
	main, sweep := scenarios(cfg)
	if cfg.only != "" {
		only := regexp.MustCompile(cfg.only) // validated with the flags
		main, sweep = filterRows(main, only), filterRows(sweep, only)
	}
	byName := map[string]run.Scenario{}
	for _, sc := range append(slices.Clone(main), sweep...) {
		byName[sc.Name()] = sc
	}
	// The main comparison is measured in rounds, one sample of every row per round, so that
	// load from other work on the machine falls on all of them alike.
	rows := make([]run.Result, len(main))
	for round := range cfg.repeats {
		for i, sc := range main {
			log.Info("row", "scenario", sc.Name(), "round", round+1)
			res, err := r.MeasureN(ctx, sc, 1)
			if err != nil {
				return fmt.Errorf("row %s: %w", sc.Name(), err)
			}
			rows[i] = run.Merge(rows[i], res)
		}
	}
	rep.Rows = rows
	for _, sc := range sweep {
		log.Info("row", "scenario", sc.Name())
		res, err := r.Measure(ctx, sc)
		if err != nil {
			return fmt.Errorf("row %s: %w", sc.Name(), err)
		}
		rep.Rows = append(rep.Rows, res)
	}
	rep.Validate(cfg.bounds, load)
	if err := repeatUntilStable(ctx, log, r, rep, byName, cfg, load); err != nil {
		return err
	}
	ratios(rep, cfg.size) // the main rows were measured in rounds
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Host.LoadAvgEnd = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if after, err := cpuByProcess(); err == nil && before != nil {
		rep.Host.Others = topOthers(before, after, time.Since(started), runtime.NumCPU(), othersShown)
	}
	for _, row := range rep.InvalidRows() {
		log.Warn("invalid row", "scenario", row, "why", strings.Join(rep.Row(row).Invalid, "; "))
	}
	rep.Notes = append(rep.Notes, carriedNotes(rep.Rows)...)
	rep.Notes = append(rep.Notes,
		"afxdp: xlb's AF_XDP datapath (xdp/afxdp): one worker goroutine on the gateway's CPU, copy-mode sockets (veth has no zero-copy)",
		"Mpps is what the sink counted per second the generator ran; loss = 1 - received/sent (0 in a closed loop, where the generator waits for the sink; in an open loop the excess is lost in the gateway's ring)",
		"cps rows: unit conn; Mpps = millions of completed handshakes (SYN, SYN-ACK, ACK through the gateway, each tuple new) per second, costs per handshake (three packets at the gateway, and the two stateless responders on the gateway's CPU, alike for both datapaths)",
		"cpu ns: the CPU time (/proc/<pid>/schedstat) of the threads doing the gateway's work on its CPU (its NAPI thread, that CPU's ksoftirqd, the AF_XDP worker) per unit the sink counted; it includes the sink's (and in cps the responders') work, run in that thread's softirq, the same per unit for every datapath; other processes' time is not in it (no hardware counters on this VM: no cycles)",
		"the machine is shared: compare rows of one run, never with another machine's")
	if !cfg.noCtl {
		log.Info("control plane benchmarks")
		rep.ControlPlane = ctlplane.Run()
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return fmt.Errorf("results directory %s: %w", cfg.out, err)
	}
	f, err := os.Create(filepath.Join(cfg.out, "results.txt"))
	if err != nil {
		return fmt.Errorf("results table: %w", err)
	}
	if err := errors.Join(rep.WriteTable(f), f.Close()); err != nil {
		return err
	}
	if err := rep.WriteJSON(filepath.Join(cfg.out, "results.json")); err != nil {
		return err
	}
	if err := rep.WritePNG(filepath.Join(cfg.out, "results.png")); err != nil {
		return err
	}
	log.Info("results written", "dir", cfg.out)
	return nil
}

// scenarios is the benchmark's rows: the main comparison at 1k flows, then (unless quick) the
// flow-count sweep and the conntrack scale rows.
func scenarios(cfg config) (main, sweep []run.Scenario) {
	xlb := func() run.Datapath { return &run.XLB{ConntrackSize: xlbConntrack} }
	xlbDSR := func() run.Datapath { return &run.XLB{ConntrackSize: xlbConntrack, DSR: true} }
	sc := func(dp run.Datapath, mix run.Mix, flows int) run.Scenario {
		return run.Scenario{Datapath: dp, Mix: mix, Flows: flows, Size: cfg.size}
	}
	cps := func(dp run.Datapath) run.Scenario {
		return run.Scenario{Datapath: dp, Mix: run.MixConnect, Flows: cfg.cpsFlows, Size: cfg.size}
	}
	ctMax := max(cpsConntrackMin, cfg.cpsFlows+cfg.cpsFlows/8)
	rows := []run.Scenario{
		sc(&run.Ceiling{}, run.MixEstablished, 1000),
		sc(xlb(), run.MixNew, 1000),
		sc(xlb(), run.MixEstablished, 1000),
		sc(xlbDSR(), run.MixNew, 1000),
		sc(xlbDSR(), run.MixEstablished, 1000),
		sc(&run.NFTables{}, run.MixNew, 1000),
		sc(&run.NFTables{}, run.MixEstablished, 1000),
		sc(&run.AFXDP{CPU: cfg.gwCPU}, run.MixEstablished, 1000),
		cps(&run.XLB{ConntrackSize: xlbConntrack, Forward: true}),
		// The host's conntrack limit is raised for this row (and put back after it).
		cps(&run.NFTables{Forward: true, ConntrackMax: ctMax}),
	}
	if cfg.quick {
		return rows, nil
	}
	more := []run.Scenario{
		sc(xlb(), run.MixEstablished, 1),
		sc(xlb(), run.MixEstablished, 100_000),
		sc(xlb(), run.MixEstablished, 1_000_000),
		sc(xlb(), run.MixNew, 1_000_000),
		sc(&run.NFTables{}, run.MixEstablished, 100_000),
		sc(xlb(), run.MixUDP, 1000),
		sc(xlbDSR(), run.MixUDP, 1000),
		sc(&run.NFTables{}, run.MixUDP, 1000),
	}
	// The host's conntrack limit is raised for this row only (and put back after it).
	nft1M := sc(&run.NFTables{ConntrackMax: 1_100_000}, run.MixEstablished, 1_000_000)
	return rows, append(more, nft1M)
}

// filterRows keeps the scenarios whose name matches re.
func filterRows(rows []run.Scenario, re *regexp.Regexp) []run.Scenario {
	var out []run.Scenario
	for _, sc := range rows {
		if re.MatchString(sc.Name()) {
			out = append(out, sc)
		}
	}
	return out
}

// ratios adds the comparisons printed under the table: xlb against nftables, the ceiling, its
// AF_XDP datapath and itself with DSR, and each datapath at 1M flows against 1k.
func ratios(rep *report.Report, size int) {
	name := func(dp string, mix run.Mix, flows string) string {
		return fmt.Sprintf("%s/%s/%s/%dB", dp, mix, flows, size)
	}
	for _, mix := range []run.Mix{run.MixEstablished, run.MixNew} {
		rep.AddRatio(fmt.Sprintf("xlb/nftables (%s, 1k)", mix), name("xlb", mix, "1k"), name("nftables", mix, "1k"), true)
		rep.AddRatio(fmt.Sprintf("xlb/ceiling (%s, 1k)", mix), name("xlb", mix, "1k"), name("xdp-redirect", run.MixEstablished, "1k"), true)
	}
	for _, mix := range []run.Mix{run.MixEstablished, run.MixNew} {
		rep.AddRatio(fmt.Sprintf("xlb-dsr/xlb (%s, 1k)", mix), name("xlb-dsr", mix, "1k"), name("xlb", mix, "1k"), true)
	}
	rep.AddRatio("xlb-dsr/xlb (udp, 1k)", name("xlb-dsr", run.MixUDP, "1k"), name("xlb", run.MixUDP, "1k"), false)
	rep.AddRatio("xlb XDP/AF_XDP (est, 1k)", name("xlb", run.MixEstablished, "1k"), name("afxdp", run.MixEstablished, "1k"), true)
	rep.AddRatio("afxdp/nftables (est, 1k)", name("afxdp", run.MixEstablished, "1k"), name("nftables", run.MixEstablished, "1k"), true)
	rep.AddRatio("xlb est 1M/1k flows", name("xlb", run.MixEstablished, "1M"), name("xlb", run.MixEstablished, "1k"), false)
	rep.AddRatio("xlb/nftables (est, 100k)", name("xlb", run.MixEstablished, "100k"), name("nftables", run.MixEstablished, "100k"), false)
	rep.AddRatio("xlb/nftables (est, 1M)", name("xlb", run.MixEstablished, "1M"), name("nftables", run.MixEstablished, "1M"), false)
	rep.AddRatio("xlb/nftables (udp, 1k)", name("xlb", run.MixUDP, "1k"), name("nftables", run.MixUDP, "1k"), false)
	rep.AddRatio("nftables est 1M/1k flows", name("nftables", run.MixEstablished, "1M"), name("nftables", run.MixEstablished, "1k"), false)
	cps := run.FlowsLabel(cpsFlowsOf(rep))
	rep.AddRatio("xlb/nftables (cps)", name("xlb", run.MixConnect, cps), name("nftables", run.MixConnect, cps), true)
}

// cpsFlowsOf is the flow count of the report's cps rows (0: none).
func cpsFlowsOf(rep *report.Report) int {
	for _, r := range rep.Rows {
		if r.Mix == run.MixConnect {
			return r.Flows
		}
	}
	return 0
}

// repeatUntilStable measures each invalid row again, as a whole (cfg.repeats samples, each in a
// fresh topology), at most cfg.retries times, until the run is valid: the first attempt's
// reasons stay in the row's Earlier. A run invalid only because of the load at its start stays
// invalid (measuring again does not unload the machine).
func repeatUntilStable(ctx context.Context, log *slog.Logger, r *run.Runner, rep *report.Report, byName map[string]run.Scenario, cfg config, load float64) error {
	for attempt := 2; attempt <= cfg.retries+1; attempt++ {
		bad := rep.InvalidRows()
		if len(bad) == 0 {
			return nil
		}
		for _, name := range bad {
			sc, ok := byName[name]
			if !ok {
				continue
			}
			old := rep.Row(name)
			log.Info("row again", "scenario", name, "attempt", attempt, "was", strings.Join(old.Invalid, "; "))
			var res run.Result
			for range cfg.repeats {
				one, err := r.MeasureN(ctx, sc, 1)
				if err != nil {
					return fmt.Errorf("row %s, attempt %d: %w", name, attempt, err)
				}
				res = run.Merge(res, one)
			}
			res.Attempts = attempt
			res.Earlier = append(old.Earlier, old.Invalid)
			*old = res
		}
		rep.Validate(cfg.bounds, load)
	}
	return nil
}

// firstLoad is the 1-minute load average of a LoadAvg string (0 when unreadable).
func firstLoad(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// carriedNotes says, for each xlb-dsr row, how many of the frames the sink received held the
// DSR carrier: all of them in the new mix (every SYN opens its flow at the gateway), none in
// the established ones (the populating pass, which carried, is not measured).
func carriedNotes(rows []run.Result) []string {
	var out []string
	for _, r := range rows {
		if r.Datapath != "xlb-dsr" || r.Skip != "" {
			continue
		}
		var recv, carried uint64
		for _, s := range r.Samples {
			recv, carried = recv+s.Received, carried+s.Carried
		}
		out = append(out, fmt.Sprintf("%s: %d of the %d frames received carried the DSR carrier", r.Name, carried, recv))
	}
	return out
}

// host describes the machine.
func host() report.Host {
	h := report.Host{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}
