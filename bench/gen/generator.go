// SPDX-License-Identifier: Apache-2.0

// Package gen is the benchmark's traffic generator: an XDP program run with BPF_PROG_RUN in
// live-frames mode (BPF_F_TEST_XDP_LIVE_FRAMES) inside the generator's namespace, which writes
// TCP or UDP frames toward the VIP over many flows and transmits them out of a veth, at full
// speed or at a set rate, for a bounded time or count.
package gen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
)

// flagLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: frames returned with XDP_TX or XDP_REDIRECT
// are really transmitted.
const flagLiveFrames = 1 << 1

// Chunking of a run. A live-frames BPF_PROG_RUN call has a fixed cost of milliseconds (its
// page pool is set up and torn down; ~25 ms measured on a loaded 2-vCPU VM) during which no
// frame leaves: the gateway idles, and the run's elapsed time grows. With a fixed number of
// frames per call that gap is a share of the run proportional to the rate: 2^20-frame calls
// left a 4 Mpps gateway idle ~9% of a run and a 0.8 Mpps one ~2%, skewing every ratio against
// the faster datapath. So a run bounded by time makes few calls: a short first one measures the
// rate (calibrationChunk frames), then each call is sized to end the run (at most maxCallTime
// of frames, so that a cancelled context is noticed soon enough). Every run then has the same
// few gaps whatever its rate. A run bounded by count uses chunks of maxChunk frames. Paced runs
// send one chunk per paceTick: the rate holds on average over a tick, and frames within a chunk
// leave at full speed.
const (
	maxChunk         = 1 << 20
	calibrationChunk = 1 << 17
	maxCallTime      = 2 * time.Second
	paceTick         = 100 * time.Millisecond
)

// frameAlign is GEN_ALIGN (bpf/consts.h): the bytes in front of every frame that the program
// moves its start past, so that its headers sit in one cache line as behind a NIC.
const frameAlign = 16

// DefaultBatch is the default RunOptions.Batch.
const DefaultBatch = 64

// DefaultWindow is the default closed-loop window (RunOptions.Window): three quarters of a
// veth's 256-frame ring, so the gateway's ring never overflows, and two polls' worth of frames
// (64 each), so it never runs dry while acknowledgements are on their way.
const DefaultWindow = 192

// progressStep is PROGRESS_STEP of bpf/consts.h: the sink acknowledges frames in steps of it.
const progressStep = 32

// Generator is the loaded generator program and its maps.
type Generator struct {
	objs genObjects
	spec Spec
}

// Load loads the generator program.
func Load() (*Generator, error) {
	g := &Generator{}
	if err := loadGenObjects(&g.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load generator: %+v", verr)
		}
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return g, nil
}

// Close unloads the program.
func (g *Generator) Close() error { return g.objs.Close() }

// Program returns the generator program (for single test runs).
func (g *Generator) Program() *ebpf.Program { return g.objs.BenchGen }

// Configure sets what the following runs send and restarts the flow sequence at flow 0.
func (g *Generator) Configure(s Spec) error {
	s, err := s.normalized()
	if err != nil {
		return err
	}
	cfg := s.config()
	if err := g.objs.GenConfig.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("configure generator: write gen_config: %w", err)
	}
	if err := g.resetSeq(); err != nil {
		return fmt.Errorf("configure generator: %w", err)
	}
	g.spec = s
	return nil
}

// resetSeq sets every CPU's flow index to 0, keeping the sent counts.
func (g *Generator) resetSeq() error {
	var per []genGenCounters
	if err := g.objs.GenState.Lookup(uint32(0), &per); err != nil {
		return fmt.Errorf("read gen_state: %w", err)
	}
	for i := range per {
		per[i].Seq = 0
	}
	if err := g.objs.GenState.Put(uint32(0), per); err != nil {
		return fmt.Errorf("write gen_state: %w", err)
	}
	return nil
}

// Progress is the closed loop's acknowledgement map, which the sink must be given (see
// sink.Load): the generator holds back while RunOptions.Window frames are unacknowledged.
func (g *Generator) Progress() *ebpf.Map { return g.objs.Progress }

// Sent is the number of frames the program has transmitted (XDP_TX) since it was loaded.
func (g *Generator) Sent() (uint64, error) {
	c, err := g.totals()
	return c.Sent, err
}

// totals sums the per-CPU counters.
func (g *Generator) totals() (genGenCounters, error) {
	var per []genGenCounters
	var sum genGenCounters
	if err := g.objs.GenState.Lookup(uint32(0), &per); err != nil {
		return sum, fmt.Errorf("generator: read gen_state: %w", err)
	}
	for _, c := range per {
		sum.Sent += c.Sent
		sum.Throttled += c.Throttled
		sum.Forgiven += c.Forgiven
		sum.Stalled += c.Stalled
	}
	return sum, nil
}

// startLoop writes the run's window into gen_config and restarts the closed loop: nothing sent,
// nothing acknowledged, nothing given up on.
func (g *Generator) startLoop(window uint32) error {
	cfg := g.spec.config()
	cfg.Window = window
	if err := g.objs.GenConfig.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("generator: write gen_config: %w", err)
	}
	var per []genGenCounters
	if err := g.objs.GenState.Lookup(uint32(0), &per); err != nil {
		return fmt.Errorf("generator: read gen_state: %w", err)
	}
	for i := range per {
		per[i].Wsent, per[i].Forgiven, per[i].Stalled = 0, 0, 0
	}
	if err := g.objs.GenState.Put(uint32(0), per); err != nil {
		return fmt.Errorf("generator: write gen_state: %w", err)
	}
	if err := g.objs.Progress.Put(uint32(0), genGenProgress{}); err != nil {
		return fmt.Errorf("generator: reset progress: %w", err)
	}
	return nil
}

// RunOptions bound and place one run.
type RunOptions struct {
	// NS is the generator's namespace; Ifname the veth the frames leave through.
	NS     *netlab.NS
	Ifname string
	// CPU is the CPU the run is pinned to.
	CPU int
	// Duration bounds the run's time; Count bounds its frames (0: no bound by count). At least
	// one of them must be set.
	Duration time.Duration
	Count    uint64
	// Rate is the target in frames per second; 0 means as fast as the CPU goes.
	Rate uint64
	// Batch is how many frames the kernel runs the program on before it flushes them to the
	// veth (and so wakes the gateway); 0 means DefaultBatch. A veth's ring holds 256 frames.
	Batch uint32
	// Window closes the loop: at most this many frames are on their way (sent, not yet
	// counted by the sink, which must have been given Progress). 0 is an open loop: frames
	// leave as fast as the CPU goes and what the gateway's ring cannot take is lost there.
	Window uint32
}

// Result is what one run sent, as the program counted it, and how long it took.
type Result struct {
	Sent uint64
	// Throttled counts the frames the closed loop made wait for acknowledgements; Stalls the
	// waits that ran out, and Forgiven the frames it then stopped waiting for (lost between
	// generator and sink).
	Throttled, Stalls, Forgiven uint64
	Elapsed                     time.Duration
}

// Run sends frames as configured until opts' bounds are reached or ctx ends (then it returns
// what was sent and ctx's error).
func (g *Generator) Run(ctx context.Context, opts RunOptions) (Result, error) {
	if g.spec.Size == 0 {
		return Result{}, errors.New("generator run: not configured")
	}
	if opts.Duration <= 0 && opts.Count == 0 {
		return Result{}, errors.New("generator run: neither a duration nor a count bounds it")
	}
	if opts.Window > 0 && opts.Window < 2*progressStep {
		return Result{}, fmt.Errorf("generator run: window %d below %d frames (the sink acknowledges %d at a time)",
			opts.Window, 2*progressStep, progressStep)
	}
	if err := g.startLoop(opts.Window); err != nil {
		return Result{}, err
	}
	before, err := g.totals()
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = opts.NS.Do(func() error {
		ifindex, err := ifindexOf(opts.Ifname)
		if err != nil {
			return err
		}
		restore, err := pinThread(opts.CPU)
		if err != nil {
			return err
		}
		defer restore()
		res, err = g.loop(ctx, opts, ifindex)
		return err
	})
	after, serr := g.totals()
	res.Sent = after.Sent - before.Sent
	res.Throttled = after.Throttled - before.Throttled
	res.Stalls = after.Stalled    // startLoop zeroed it
	res.Forgiven = after.Forgiven // startLoop zeroed it
	return res, errors.Join(err, serr)
}

// loop is Run's body, on a pinned thread inside the generator's namespace.
func (g *Generator) loop(ctx context.Context, opts RunOptions, ifindex int) (Result, error) {
	frame := make([]byte, frameAlign+g.spec.Size)
	md := progrun.XDPMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex)}
	chunk := uint64(maxChunk)
	if opts.Rate > 0 {
		chunk = max(1, opts.Rate*uint64(paceTick)/uint64(time.Second))
	}
	batch := opts.Batch
	if batch == 0 {
		batch = DefaultBatch
	}
	// Adaptive: a run bounded by time, at full speed (see calibrationChunk), and by count too
	// when one is given (the connections-per-second mix: each flow's SYN once).
	adaptive := opts.Rate == 0 && opts.Duration > 0
	if adaptive {
		chunk = calibrationChunk
	}
	start := time.Now()
	var issued uint64
	for tick := 1; ; tick++ {
		if err := ctx.Err(); err != nil {
			return Result{Elapsed: time.Since(start)}, err
		}
		elapsed := time.Since(start)
		if opts.Duration > 0 && elapsed >= opts.Duration || opts.Count > 0 && issued >= opts.Count {
			return Result{Elapsed: elapsed}, nil
		}
		n := chunk
		if opts.Count > 0 {
			n = min(n, opts.Count-issued)
		}
		if adaptive && issued > 0 {
			left := opts.Duration - elapsed
			if left < opts.Duration/20 {
				// Too short to be worth a call's fixed cost: the run ends a little early.
				return Result{Elapsed: elapsed}, nil
			}
			// Frames per second so far (the calls' fixed costs included), times what is left.
			rate := float64(issued) / elapsed.Seconds()
			n = uint64(rate * min(left, maxCallTime).Seconds())
			n = min(max(n, calibrationChunk/8), math.MaxUint32)
			if opts.Count > 0 {
				n = min(n, opts.Count-issued)
			}
		}
		_, err := g.objs.BenchGen.Run(&ebpf.RunOptions{
			Data: frame, Context: md, Repeat: uint32(n), Flags: flagLiveFrames, BatchSize: batch,
		})
		if err != nil {
			return Result{Elapsed: time.Since(start)}, fmt.Errorf("generator run on ifindex %d: %w", ifindex, err)
		}
		issued += n
		if opts.Rate > 0 {
			if wait := time.Until(start.Add(time.Duration(tick) * paceTick)); wait > 0 {
				time.Sleep(wait)
			}
		}
	}
}

// Niceness of the generator thread while it runs: the highest, so that other work on a shared
// machine (compilers) takes little of its CPU. The run is bounded, so nothing starves for long.
const genNice = -20

// pinThread pins the calling (locked) thread to cpu at niceness genNice and returns what
// restores its old mask and niceness.
func pinThread(cpu int) (func(), error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin generator to CPU %d: %w", cpu, err)
	}
	tid := unix.Gettid()
	// Getpriority returns 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return nil, fmt.Errorf("read generator niceness: %w", err)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, genNice); err != nil {
		return nil, fmt.Errorf("set generator niceness %d: %w", genNice, err)
	}
	return func() {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 20-prio)
		_ = unix.SchedSetaffinity(0, &old)
	}, nil
}
