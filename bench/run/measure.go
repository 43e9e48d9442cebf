// SPDX-License-Identifier: Apache-2.0
package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/bench/gen"
	"github.com/xlb-dev/xlb/bench/sink"
	"github.com/xlb-dev/xlb/bench/topo"
)

// Options configure a Runner.
type Options struct {
	// Prefix starts the names of the namespaces and interfaces (at most 8 characters).
	Prefix string
	// Duration is how long each measurement sends; Repeats how many measurements make a row.
	Duration time.Duration
	Repeats  int
	// Rate is the generator's target in frames per second; 0 means full speed.
	Rate uint64
	// PopulateRate paces the populating pass of the established mixes (frames per second), so
	// that no flow's first frame is lost in a full ring; 0 means 1,000,000.
	PopulateRate uint64
	// GenCPU runs the generator; GatewayCPU runs the gateway's and the sink's NAPI threads.
	GenCPU, GatewayCPU int
	// Batch is the generator's batch (gen.RunOptions.Batch).
	Batch uint32
	// Window is the generator's closed-loop window for the measurements (gen.RunOptions.Window):
	// 0 is an open loop. The populating pass is paced instead.
	Window uint32
	// Log receives progress.
	Log *slog.Logger
}

// Runner measures scenarios, one topology each, with one generator.
type Runner struct {
	opts  Options
	gen   *gen.Generator
	stats io.Closer // BPF_ENABLE_STATS while the runner lives (nil: refused, no bpf_stats)
}

// NewRunner loads the generator.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Repeats < 1 || opts.Duration <= 0 {
		return nil, fmt.Errorf("runner: %d repeats of %s: want at least one of a positive duration", opts.Repeats, opts.Duration)
	}
	if opts.PopulateRate == 0 {
		opts.PopulateRate = 1_000_000
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	g, err := gen.Load()
	if err != nil {
		return nil, err
	}
	// bpf_stats cost every program run two clock reads (a few ns), in every row alike.
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		opts.Log.Warn("no bpf_stats: the bpf ns/pkt column stays empty", "error", err)
		stats = nil
	}
	return &Runner{opts: opts, gen: g, stats: stats}, nil
}

// Close unloads the generator and stops collecting bpf_stats.
func (r *Runner) Close() error {
	err := r.gen.Close()
	if r.stats != nil {
		err = errors.Join(err, r.stats.Close())
	}
	return err
}

// Sample is one measurement.
type Sample struct {
	// Sent is what the generator transmitted; Received what the sink counted as forwarded.
	Sent, Received uint64
	// Carried is how many of Received held direct server return's carrier (the xlb-dsr rows).
	Carried uint64 `json:",omitempty"`
	// CountedDrops is the sum of the counted drop counters (see countedDrop); Drops every
	// drop counter that moved, by name.
	CountedDrops uint64
	Drops        map[string]uint64 `json:",omitempty"`
	// Elapsed is how long the generator sent; Mpps is Received per second of it, in millions.
	Elapsed time.Duration
	Mpps    float64
	// OfferedMpps is Sent per second, in millions.
	OfferedMpps float64
	// Throttled counts the frames the generator's closed loop made wait; Stalls the waits that
	// ran out and Forgiven the frames it then stopped waiting for (gen.Result).
	Throttled, Stalls, Forgiven uint64 `json:",omitempty"`
	// Answered is, in the cps mix, how many SYNs the sink answered with a SYN-ACK (Received is
	// then the handshakes the generator's ACK completed).
	Answered uint64 `json:",omitempty"`
	// Cost is what the sample cost the gateway's CPU per frame received (per handshake in the
	// cps mix), and how much of the CPUs other work took.
	Cost Cost
}

// LossPct is the share of sent frames that did not reach the sink.
func (s Sample) LossPct() float64 {
	if s.Sent == 0 || s.Received >= s.Sent {
		return 0
	}
	return 100 * float64(s.Sent-s.Received) / float64(s.Sent)
}

// Unaccounted is how many frames were lost with no drop counter to show for it.
func (s Sample) Unaccounted() int64 {
	return int64(s.Sent) - int64(s.Received) - int64(s.CountedDrops)
}

// Result is a scenario's measurements.
type Result struct {
	Name     string
	Datapath string
	Mix      Mix
	Flows    int
	Size     int
	// Skip is why the scenario was not run ("" when it was).
	Skip    string `json:",omitempty"`
	Samples []Sample
	// Mpps summarizes the samples' Mpps (millions of handshakes per second in the cps mix);
	// LossPct their loss.
	Mpps    Summary
	LossPct Summary
	// BPFNs summarizes the samples' Cost.BPFNsPerPkt (zero: not an XDP datapath), BPFNsUnit
	// their Cost.BPFNsPerUnit, CPUNs their Cost.CPUNsPerUnit: the cost figures, which machine
	// load distorts less than Mpps.
	BPFNs, BPFNsUnit, CPUNs Summary
	// Invalid lists the invariants the row violates (see Validate): a row with any is not to be
	// trusted, and says what disturbed it.
	Invalid []string `json:",omitempty"`
	// Disturbed says what else took the CPUs while the row ran (foreign shares above
	// DisturbedPct), whether or not that made it invalid.
	Disturbed []string `json:",omitempty"`
	// Attempts is how many times the row was measured (more than 1: it was re-run by
	// --repeat-until-stable; its samples are then those of the last attempt, no longer paired
	// in rounds with the other rows').
	Attempts int `json:",omitempty"`
	// Earlier are the invalid reasons of the attempts that were replaced.
	Earlier [][]string `json:",omitempty"`
	// ConntrackFlows is the datapath's conntrack entry count after the populating pass (-1: not
	// read).
	ConntrackFlows int
}

// populatePasses bounds the populating passes of one measurement.
const populatePasses = 3

// Measure builds a fresh topology, starts sc's datapath on it, populates the flows if the mix
// needs it, takes the repeated measurements and tears everything down, also on error.
func (r *Runner) Measure(ctx context.Context, sc Scenario) (Result, error) {
	return r.MeasureN(ctx, sc, r.opts.Repeats)
}

// MeasureN is Measure with n measurements instead of Options.Repeats.
func (r *Runner) MeasureN(ctx context.Context, sc Scenario, n int) (res Result, err error) {
	res = Result{Name: sc.Name(), Datapath: sc.Datapath.Name(), Mix: sc.Mix, Flows: sc.Flows, Size: sc.Size,
		Skip: sc.Skip, ConntrackFlows: -1}
	if sc.Skip != "" {
		return res, nil
	}
	t, err := topo.New(r.opts.Prefix, r.opts.Log)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	s, err := sink.Load(topo.Backend, topo.VIP, r.gen.Progress(), sc.Mix == MixConnect)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	if err := s.Attach(t.SinkNS, t.SinkIf); err != nil {
		return res, err
	}
	if sc.Mix == MixConnect {
		if rp, ok := sc.Datapath.(replier); !ok || !rp.Replies() {
			return res, fmt.Errorf("%s: datapath %s does not forward replies (set its Replies)", res.Name, sc.Datapath.Name())
		}
		c, err := r.gen.AttachClient(t.Gen, t.GenIf)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, c.Close()) }()
	}
	if err := sc.Datapath.Start(ctx, t); err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, sc.Datapath.Stop()) }()
	proto, flags := sc.Mix.frames()
	spec := gen.Spec{SrcMAC: topo.GenMAC, DstMAC: topo.GwInMAC, Src: topo.ClientBase,
		Dst: netip.AddrPortFrom(topo.VIP, VIPPort), Proto: proto, TCPFlags: flags, Size: sc.Size, Flows: sc.Flows}
	if sc.Mix == MixConnect {
		// Each of the n samples sends at most Flows SYNs, and the flow sequence runs on from
		// one sample to the next: no tuple is used twice in this topology.
		spec.Flows = sc.Flows * n
		if !topo.Clients.Contains(lastSrc(spec)) {
			return res, fmt.Errorf("%s: %d samples of %d connections overflow the clients' %s", res.Name, n, sc.Flows, topo.Clients)
		}
	}
	if err := r.gen.Configure(spec); err != nil {
		return res, err
	}
	genOpts := gen.RunOptions{NS: t.Gen, Ifname: t.GenIf, CPU: r.opts.GenCPU, Batch: r.opts.Batch}
	if sc.Mix.populates() {
		po := genOpts
		po.Count, po.Rate = uint64(sc.Flows), r.opts.PopulateRate
		// A pass again (the same frames: recorded flows are only refreshed) while the datapath
		// holds fewer flows than it was sent: a busy machine can starve a userspace datapath
		// into dropping some first frames. At most populatePasses passes.
		for pass := 1; ; pass++ {
			if _, err := r.gen.Run(ctx, po); err != nil {
				return res, fmt.Errorf("%s: populate %d flows: %w", res.Name, sc.Flows, err)
			}
			if err := drain(ctx, s); err != nil {
				return res, err
			}
			f, ok := sc.Datapath.(flowCounter)
			if !ok {
				break
			}
			if res.ConntrackFlows, err = f.Flows(); err != nil {
				return res, err
			}
			if res.ConntrackFlows >= sc.Flows || pass == populatePasses {
				break
			}
			r.opts.Log.Info("populating pass again", "scenario", res.Name, "flows", res.ConntrackFlows, "want", sc.Flows)
		}
	}
	// Until now the gateway's NAPI ran in the generator's softirq, right after each batch: no
	// frame of the populating pass was lost in a full ring. From here on it runs in parallel.
	if err := r.placeNAPI(t); err != nil {
		return res, err
	}
	genOpts.Duration, genOpts.Rate, genOpts.Window = r.opts.Duration, r.opts.Rate, r.opts.Window
	if sc.Mix == MixConnect {
		genOpts.Count = uint64(sc.Flows) // every tuple once: each SYN a new connection
	}
	for i := range n {
		smp, err := r.sample(ctx, t, s, sc.Datapath, genOpts)
		if err != nil {
			return res, fmt.Errorf("%s: run %d: %w", res.Name, i+1, err)
		}
		r.opts.Log.Info("measured", "scenario", res.Name, "run", i+1, "mpps", fmt.Sprintf("%.3f", smp.Mpps),
			"offered_mpps", fmt.Sprintf("%.3f", smp.OfferedMpps), "loss_pct", fmt.Sprintf("%.2f", smp.LossPct()))
		res.Samples = append(res.Samples, smp)
	}
	res.summarize()
	return res, nil
}

// lastSrc is the highest source address spec uses (invalid if spec is).
func lastSrc(spec gen.Spec) netip.Addr {
	a, _ := spec.LastSrc()
	return a
}

// replier is a datapath that can be told to forward the backend's replies too (the cps mix).
type replier interface {
	// Replies says whether the datapath was started to forward replies back to clients.
	Replies() bool
}

// flowCounter is a datapath that can count its conntrack entries.
type flowCounter interface {
	Flows() (int, error)
}

// Merge appends b's samples to a's (the same scenario measured again) and summarizes them all.
func Merge(a, b Result) Result {
	if a.Name == "" {
		b.summarize()
		return b
	}
	a.Samples = append(a.Samples, b.Samples...)
	a.summarize()
	return a
}

// summarize computes the row's summaries from its samples.
func (res *Result) summarize() {
	var mpps, loss, bpf, bpfUnit, cpu []float64
	for _, s := range res.Samples {
		mpps = append(mpps, s.Mpps)
		loss = append(loss, s.LossPct())
		if s.Cost.BPFRuns > 0 {
			bpf = append(bpf, s.Cost.BPFNsPerPkt)
			bpfUnit = append(bpfUnit, s.Cost.BPFNsPerUnit)
		}
		cpu = append(cpu, s.Cost.CPUNsPerUnit)
	}
	res.Mpps, res.LossPct = Summarize(mpps), Summarize(loss)
	res.BPFNs, res.BPFNsUnit, res.CPUNs = Summarize(bpf), Summarize(bpfUnit), Summarize(cpu)
}

// sample takes one measurement: counters before, one generator run, the pipeline drained,
// counters after.
func (r *Runner) sample(ctx context.Context, t *topo.Topology, s *sink.Sink, dp Datapath, opts gen.RunOptions) (Sample, error) {
	before, err := r.counters(t, s, dp)
	if err != nil {
		return Sample{}, err
	}
	threads, err := r.gatewayThreads(t)
	if err != nil {
		return Sample{}, fmt.Errorf("gateway threads: %w", err)
	}
	costBefore, err := r.costSnap(dp, threads)
	if err != nil {
		return Sample{}, err
	}
	res, err := r.gen.Run(ctx, opts)
	if err != nil {
		return Sample{}, err
	}
	if err := drain(ctx, s); err != nil {
		return Sample{}, err
	}
	costAfter, err := r.costSnap(dp, threads)
	if err != nil {
		return Sample{}, err
	}
	after, err := r.counters(t, s, dp)
	if err != nil {
		return Sample{}, err
	}
	smp := Sample{
		Sent:      res.Sent,
		Received:  after.received - before.received,
		Carried:   after.carried - before.carried,
		Elapsed:   res.Elapsed,
		Drops:     diff(before.drops, after.drops),
		Throttled: res.Throttled,
		Stalls:    res.Stalls,
		Forgiven:  res.Forgiven,
		Answered:  after.answered - before.answered,
	}
	_, worker := dp.(userspaceWorker)
	smp.Cost = costOf(costBefore, costAfter, smp.Received, worker)
	smp.Cost.GwThreads = len(threads)
	smp.CountedDrops = sumCounted(before.drops, after.drops)
	if secs := res.Elapsed.Seconds(); secs > 0 {
		smp.Mpps = float64(smp.Received) / secs / 1e6
		smp.OfferedMpps = float64(smp.Sent) / secs / 1e6
	}
	return smp, nil
}

// snapshot is what the sink has counted and every drop counter, at one moment.
type snapshot struct {
	received, carried, answered uint64
	drops                       map[string]uint64
}

func (r *Runner) counters(t *topo.Topology, s *sink.Sink, dp Datapath) (snapshot, error) {
	c, err := s.Counts()
	if err != nil {
		return snapshot{}, err
	}
	drops, err := linkDrops(t)
	if err != nil {
		return snapshot{}, err
	}
	own, err := dp.Drops()
	if err != nil {
		return snapshot{}, err
	}
	for k, v := range own {
		drops[k] = v
	}
	return snapshot{received: c.Forwarded(), carried: c.Carried(), answered: c.Answered(), drops: drops}, nil
}

// Draining: after the generator stops, frames still queued in the veth rings reach the sink
// within a few milliseconds; the count is final once it has not moved for drainQuiet.
const (
	drainQuiet = 20 * time.Millisecond
	drainMax   = 2 * time.Second
)

func drain(ctx context.Context, s *sink.Sink) error {
	deadline := time.Now().Add(drainMax)
	var last uint64
	for time.Now().Before(deadline) {
		c, err := s.Counts()
		if err != nil {
			return err
		}
		if c.Forwarded() == last {
			return nil
		}
		last = c.Forwarded()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainQuiet):
		}
	}
	return nil
}

// placeNAPI gives the gateway's ingress its own NAPI thread on GatewayCPU: the generator's
// CPU then only generates. The sink's NAPI is scheduled by the gateway's and runs in its
// softirq, on GatewayCPU too, right after each of the gateway's polls (a thread of its own
// would let the gateway overrun the sink's 256-frame ring whenever the scheduler is late).
func (r *Runner) placeNAPI(t *topo.Topology) error {
	for _, ifname := range []string{t.GwIn} {
		if err := topo.ThreadedNAPI(t.Gateway, ifname); err != nil {
			return err
		}
		n, err := topo.PinNAPI(ifname, r.opts.GatewayCPU)
		if err != nil {
			return err
		}
		if n == 0 {
			r.opts.Log.Warn("no NAPI thread found to place", "interface", ifname)
		}
	}
	return nil
}
