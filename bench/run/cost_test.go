// SPDX-License-Identifier: Apache-2.0
package run

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

// TestParseCPUTimes reads one CPU's line of /proc/stat, not the summary line.
func TestParseCPUTimes(t *testing.T) {
	stat := "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 10 20 30 40 50 60 70 80 0 0\nintr 1\n"
	c, err := parseCPUTimes(bufio.NewScanner(strings.NewReader(stat)), 1)
	if err != nil {
		t.Fatal(err)
	}
	if c != (cpuTimes{10, 20, 30, 40, 50, 60, 70, 80}) {
		t.Errorf("cpu1 %+v", c)
	}
	if _, err := parseCPUTimes(bufio.NewScanner(strings.NewReader(stat)), 2); err == nil {
		t.Error("no error for a CPU without a line")
	}
}

// TestCostOf: kernel ticks per frame, bpf_stats per run and per frame, the CPUs' shares; a
// userspace worker's time counts as the gateway's, not as foreign.
func TestCostOf(t *testing.T) {
	before := costSnapshot{prog: progStats{runtime: time.Second, runs: 1000}, threads: time.Second, wakes: 10}
	after := costSnapshot{
		// 200 ticks on the gateway: 100 kernel (80 system, 5 irq, 15 softirq), 60 user, 10
		// steal, 30 idle; on the generator 200 ticks, 20 of them user.
		gw:      cpuTimes{user: 60, system: 80, irq: 5, softirq: 15, steal: 10, idle: 30},
		gen:     cpuTimes{user: 20, system: 180},
		own:     400 * time.Millisecond,
		threads: time.Second + 900*time.Millisecond,
		wakes:   110,
		prog:    progStats{runtime: time.Second + 30*time.Millisecond, runs: 1000 + 600_000},
	}
	c := costOf(before, after, 200_000, false)
	if !near(c.CPUNsPerUnit, 0.9e9/200_000) || !near(c.TickNsPerUnit, 1e9/200_000) || !near(c.BPFNsPerPkt, 50) || !near(c.BPFNsPerUnit, 150) || c.BPFRuns != 600_000 {
		t.Errorf("costs %+v: want 4500 cpu ns (threads) and 5000 (ticks) per frame, 50 bpf ns per run, 150 per frame", c)
	}
	if !near(c.PerWake, 2000) {
		t.Errorf("%.1f frames per wake-up, want 2000", c.PerWake)
	}
	if !near(c.GwBusyPct, 50) || !near(c.GwForeignPct, 30) || !near(c.GwStealPct, 5) || !near(c.GwIdlePct, 15) || !near(c.GenForeignPct, 10) {
		t.Errorf("shares %+v: want busy 50, foreign 30, steal 5, idle 15, generator foreign 10", c)
	}
	w := costOf(before, after, 200_000, true) // this process's 0.4 s of user time was the worker's
	if !near(w.TickNsPerUnit, 1.4e9/200_000) || !near(w.GwForeignPct, 10) {
		t.Errorf("worker costs %+v: want 7000 tick ns per frame, foreign 10%%", w)
	}
	none := costOf(costSnapshot{}, costSnapshot{gw: cpuTimes{system: 1}, threads: time.Second}, 0, false)
	if none.CPUNsPerUnit != 0 || none.BPFRuns != 0 {
		t.Errorf("nothing received, no program: %+v", none)
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-6*max(1, b) && -d < 1e-6*max(1, b) }
