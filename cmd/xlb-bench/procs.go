// SPDX-License-Identifier: Apache-2.0
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// procTick is a /proc/<pid>/stat tick (USER_HZ).
const procTick = 10 * time.Millisecond

// procCPU is one process's name and CPU time so far: its own (user + system) and that of its
// children it has waited for, so that the compilers a build ran and reaped count to the build.
type procCPU struct {
	comm string
	cpu  time.Duration
}

// cpuByProcess reads every process's CPU time from /proc, by pid (this process excluded).
func cpuByProcess() (map[int]procCPU, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	out := map[int]procCPU{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if p, ok := parseProcStat(string(b)); ok {
			out[pid] = p
		}
	}
	return out, nil
}

// parseProcStat reads the name and utime + stime + cutime + cstime of a /proc/<pid>/stat line.
func parseProcStat(line string) (procCPU, bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procCPU{}, false
	}
	f := strings.Fields(line[end+1:])
	// After the name: state (0), ..., utime (11), stime (12), cutime (13), cstime (14).
	if len(f) < 15 {
		return procCPU{}, false
	}
	var sum uint64
	for _, i := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return procCPU{}, false
		}
		sum += uint64(v)
	}
	return procCPU{comm: line[open+1 : end], cpu: time.Duration(sum) * procTick}, true
}

// topOthers names the n processes that took the most CPU time between two readings, summed by
// name, with their share of one CPU over elapsed ("go 35%"); processes that started after the
// first reading count whole (most of a compiler's life is short). A process's children reaped
// in between count to it, and may have run before the first reading: no process is counted for
// more than cpus CPUs over elapsed, what it could have taken in the window.
func topOthers(before, after map[int]procCPU, elapsed time.Duration, cpus, n int) []string {
	byName := map[string]time.Duration{}
	for pid, a := range after {
		d := a.cpu
		if b, ok := before[pid]; ok && b.comm == a.comm {
			d -= b.cpu
		}
		if d > 0 {
			byName[a.comm] += min(d, time.Duration(cpus)*elapsed)
		}
	}
	names := make([]string, 0, len(byName))
	for k := range byName {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return int(byName[b] - byName[a]) })
	var out []string
	for _, k := range names[:min(n, len(names))] {
		if elapsed <= 0 {
			break
		}
		out = append(out, fmt.Sprintf("%s %.0f%%", k, 100*float64(byName[k])/float64(elapsed)))
	}
	return out
}
