// SPDX-License-Identifier: Apache-2.0
package run

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/bench/topo"
)

// The cost of a packet on the gateway's CPU, next to the rate. On a shared machine the rate of
// a row falls whenever other work takes the gateway's CPU (or the generator's), but the CPU time
// each forwarded packet costs moves much less: it is the work done per packet, whoever else
// ran in between. Two figures:
//
//   - bpf_stats (BPF_ENABLE_STATS): the datapath program's own run_time_ns / run_cnt, the
//     time inside the program per run (tail calls included), from the kernel. Only for the
//     datapaths whose work is an XDP program (xlb, the plain redirect); nftables' work is the
//     kernel's stack and AF_XDP's a userspace engine, whose XDP programs only pass or steer.
//   - CPU time per forwarded packet of the threads that do the gateway's work, on its CPU:
//     the gateway's NAPI thread (the sink's NAPI and, in the cps mix, the responders run in
//     its softirq), that CPU's ksoftirqd, and this process's threads pinned to that CPU (the
//     AF_XDP worker), from /proc/<pid>/schedstat (nanoseconds of CPU time), divided by the
//     frames the sink counted. Other processes' time on that CPU is not in it, whether user or
//     kernel; what it cannot remove is what they do to the caches. The VM has no hardware
//     performance counters (no cycles).
//
// /proc/stat of both CPUs (tick accounting, 250 Hz here) gives the shares of the sample that
// other processes took (their user time; what disturbed the row), the hypervisor's steal, idle
// time, and a second, coarser cost: the gateway CPU's kernel ticks per frame (in the JSON).

// cpuTimes is one CPU's line of /proc/stat, in clock ticks.
type cpuTimes struct {
	user, nice, system, idle, iowait, irq, softirq, steal uint64
}

// kernel is the CPU's time in the kernel: system, irq and softirq.
func (c cpuTimes) kernel() uint64 { return c.system + c.irq + c.softirq }

// total is every tick of the CPU (guest time is included in user).
func (c cpuTimes) total() uint64 {
	return c.user + c.nice + c.system + c.idle + c.iowait + c.irq + c.softirq + c.steal
}

// sub is c - o, field by field.
func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{c.user - o.user, c.nice - o.nice, c.system - o.system, c.idle - o.idle,
		c.iowait - o.iowait, c.irq - o.irq, c.softirq - o.softirq, c.steal - o.steal}
}

// readCPUTimes reads CPU cpu's line of /proc/stat.
func readCPUTimes(cpu int) (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("cpu times: %w", err)
	}
	defer f.Close()
	return parseCPUTimes(bufio.NewScanner(f), cpu)
}

// parseCPUTimes finds CPU cpu's line in a /proc/stat listing.
func parseCPUTimes(sc *bufio.Scanner, cpu int) (cpuTimes, error) {
	want := "cpu" + strconv.Itoa(cpu)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != want {
			continue
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("cpu times: %s field %d: %w", want, i+1, err)
			}
			v[i] = n
		}
		return cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, fmt.Errorf("cpu times: %w", err)
	}
	return cpuTimes{}, fmt.Errorf("cpu times: no line for %s in /proc/stat", want)
}

// clockTick is the length of one /proc/stat tick (USER_HZ, 100 on Linux on every architecture
// Go supports).
const clockTick = 10 * time.Millisecond

// ownUserTime is this process's user CPU time so far.
func ownUserTime() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano()), nil
}

// programmed is a datapath whose work is XDP programs: their bpf_stats are its cost.
type programmed interface {
	// Programs are the datapath's attached programs (each counted once).
	Programs() []*ebpf.Program
}

// userspaceWorker is a datapath that forwards in a userspace worker on the gateway's CPU: this
// process's user time counts in its CPU cost.
type userspaceWorker interface {
	UserspaceWorker() bool
}

// progStats is the sum of the programs' bpf_stats.
type progStats struct {
	runtime time.Duration
	runs    uint64
}

func readProgStats(progs []*ebpf.Program) (progStats, error) {
	var s progStats
	for _, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return s, fmt.Errorf("bpf_stats of %s: %w", p, err)
		}
		s.runtime += st.Runtime
		s.runs += st.RunCount
	}
	return s, nil
}

// costSnapshot is everything the cost of a sample is computed from, at one moment.
type costSnapshot struct {
	gw, gen cpuTimes
	own     time.Duration
	threads time.Duration // CPU time of the gateway's threads (gatewayThreads)
	wakes   uint64        // times those threads were scheduled in
	prog    progStats
	at      time.Time
}

// gatewayThreads are the threads that do the gateway's work on its CPU: the NAPI threads of
// t's gateway ingress, the CPU's ksoftirqd and this process's threads allowed only on it.
func (r *Runner) gatewayThreads(t *topo.Topology) ([]string, error) {
	napi, err := topo.NAPIThreads(t.GwIn)
	if err != nil {
		return nil, err
	}
	if len(napi) == 0 {
		return nil, fmt.Errorf("no NAPI thread of %s", t.GwIn)
	}
	var out []string
	for _, pid := range napi {
		out = append(out, fmt.Sprintf("/proc/%d/schedstat", pid))
	}
	ksd, err := topo.KSoftirqd(r.opts.GatewayCPU)
	if err != nil {
		return nil, err
	}
	out = append(out, fmt.Sprintf("/proc/%d/schedstat", ksd))
	tasks, err := filepath.Glob("/proc/self/task/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list own threads: %w", err)
	}
	want := strconv.Itoa(r.opts.GatewayCPU)
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(task, "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && k == "Cpus_allowed_list" && strings.TrimSpace(v) == want {
				// By tid: /proc/self/task changes meaning in another thread.
				out = append(out, "/proc/"+filepath.Base(task)+"/schedstat")
			}
		}
	}
	return out, nil
}

// threadTime sums the CPU time (schedstat's first field, ns) of the threads and how many times
// they were scheduled in (its third); a thread that is gone counts nothing.
func threadTime(paths []string) (time.Duration, uint64, error) {
	var sum time.Duration
	var runs uint64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			return 0, 0, fmt.Errorf("%s: %q: want 3 fields", p, b)
		}
		ns, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", p, err)
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", p, err)
		}
		sum += time.Duration(ns)
		runs += n
	}
	return sum, runs, nil
}

// costSnap reads the gateway's and the generator's CPU times, this process's user time, the
// gateway threads' CPU time and dp's programs' bpf_stats.
func (r *Runner) costSnap(dp Datapath, threads []string) (costSnapshot, error) {
	var s costSnapshot
	var err error
	if s.threads, s.wakes, err = threadTime(threads); err != nil {
		return s, err
	}
	if s.gw, err = readCPUTimes(r.opts.GatewayCPU); err != nil {
		return s, err
	}
	if s.gen, err = readCPUTimes(r.opts.GenCPU); err != nil {
		return s, err
	}
	if s.own, err = ownUserTime(); err != nil {
		return s, err
	}
	if p, ok := dp.(programmed); ok {
		if s.prog, err = readProgStats(p.Programs()); err != nil {
			return s, err
		}
	}
	s.at = time.Now()
	return s, nil
}

// Cost is what one sample cost the gateway's CPU, and how much of the two CPUs other work took.
type Cost struct {
	// BPFNsPerPkt is the datapath program's run_time_ns / run_cnt over the sample (0: not an
	// XDP datapath); BPFNsPerUnit the same run time per frame the sink counted (per handshake
	// in the cps mix, whose gateway runs the program three times per handshake).
	BPFNsPerPkt  float64 `json:",omitempty"`
	BPFNsPerUnit float64 `json:",omitempty"`
	BPFRuns      uint64  `json:",omitempty"`
	// CPUNsPerUnit is the CPU time of the gateway's threads per frame the sink counted (per
	// handshake in the cps mix), in ns; TickNsPerUnit the coarser gateway CPU's kernel ticks
	// (plus this process's user time for an AF_XDP worker) per frame, which other processes'
	// kernel time inflates.
	CPUNsPerUnit  float64
	TickNsPerUnit float64
	// PerWake is the frames the sink counted per time the gateway's threads were scheduled in:
	// the batch each wake-up's fixed cost is shared by. A starved generator makes it small and
	// the cost per frame larger.
	PerWake float64 `json:",omitempty"`
	// GwThreads is how many threads CPUNsPerUnit counts (NAPI, ksoftirqd, pinned workers).
	GwThreads int
	// GwBusyPct, GwForeignPct, GwStealPct, GwIdlePct are the gateway CPU's shares of the
	// sample: the kernel time counted above, other processes' user time, the hypervisor's
	// steal, idle. GenForeignPct is other processes' user time on the generator's CPU.
	GwBusyPct, GwForeignPct, GwStealPct, GwIdlePct, GenForeignPct float64
}

// cost computes a sample's Cost from the snapshots around it and the frames the sink counted.
func costOf(before, after costSnapshot, units uint64, worker bool) Cost {
	gw, gen := after.gw.sub(before.gw), after.gen.sub(before.gen)
	own := max(0, after.own-before.own)
	var c Cost
	if runs := after.prog.runs - before.prog.runs; runs > 0 {
		rt := float64(after.prog.runtime - before.prog.runtime)
		c.BPFRuns = runs
		c.BPFNsPerPkt = rt / float64(runs)
		if units > 0 {
			c.BPFNsPerUnit = rt / float64(units)
		}
	}
	busy := time.Duration(gw.kernel()) * clockTick
	foreign := time.Duration(gw.user+gw.nice) * clockTick
	if worker {
		busy += own
		foreign = max(0, foreign-own)
	}
	if units > 0 {
		c.CPUNsPerUnit = float64(after.threads-before.threads) / float64(units)
		c.TickNsPerUnit = float64(busy) / float64(units)
	}
	if w := after.wakes - before.wakes; w > 0 {
		c.PerWake = float64(units) / float64(w)
	}
	pct := func(part time.Duration, of uint64) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(part) / float64(time.Duration(of)*clockTick)
	}
	c.GwBusyPct = pct(busy, gw.total())
	c.GwForeignPct = pct(foreign, gw.total())
	c.GwStealPct = pct(time.Duration(gw.steal)*clockTick, gw.total())
	c.GwIdlePct = pct(time.Duration(gw.idle+gw.iowait)*clockTick, gw.total())
	// The generator's own thread is in the kernel (BPF_PROG_RUN): user time there is others'.
	c.GenForeignPct = pct(time.Duration(gen.user+gen.nice)*clockTick, gen.total())
	return c
}
