// SPDX-License-Identifier: Apache-2.0
package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// commLen is the longest kernel thread name /proc/PID/comm shows (TASK_COMM_LEN - 1).
const commLen = 15

// ThreadedNAPI makes ifname's NAPI in ns run in its own kernel thread (napi/<ifname>-<id>)
// instead of in the softirq of whichever CPU scheduled it, so that it can be placed on a CPU.
// A veth has NAPI while an XDP program is attached to it (or GRO is on).
func ThreadedNAPI(ns *netlab.NS, ifname string) error {
	// `ip netns exec` mounts the namespace's own /sys, where ifname is visible.
	out, err := ns.Cmd("sh", "-c", "echo 1 > /sys/class/net/"+ifname+"/threaded").CombinedOutput()
	if err != nil {
		return fmt.Errorf("threaded NAPI on %s in %s: %v: %s", ifname, ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// napiNice is the niceness given to placed NAPI threads: the highest, as the generator's, so
// that other work on a shared machine takes little of their CPU.
const napiNice = -20

// PinNAPI pins the NAPI kernel threads of ifname to cpu at niceness napiNice and returns how
// many it pinned. The threads exist once the interface has NAPI (an XDP program attached) and
// ThreadedNAPI is on; they go away with the interface.
func PinNAPI(ifname string, cpu int) (int, error) {
	pids, err := NAPIThreads(ifname)
	if err != nil {
		return 0, err
	}
	var set unix.CPUSet
	set.Set(cpu)
	n := 0
	for _, pid := range pids {
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			return n, fmt.Errorf("pin NAPI thread %d of %s to CPU %d: %w", pid, ifname, cpu, err)
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, pid, napiNice); err != nil {
			return n, fmt.Errorf("set niceness of NAPI thread %d: %w", pid, err)
		}
		n++
	}
	return n, nil
}

// NAPIThreads returns the pids of ifname's NAPI kernel threads (napi/<ifname>-N).
func NAPIThreads(ifname string) ([]int, error) {
	want := "napi/" + ifname + "-"
	if len(want) > commLen {
		want = want[:commLen]
	}
	return threadsNamed(func(comm string) bool { return strings.HasPrefix(comm, want) })
}

// KSoftirqd returns the pid of CPU cpu's softirq thread (ksoftirqd/<cpu>).
func KSoftirqd(cpu int) (int, error) {
	want := fmt.Sprintf("ksoftirqd/%d", cpu)
	pids, err := threadsNamed(func(comm string) bool { return comm == want })
	if err != nil {
		return 0, err
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%d threads named %s", len(pids), want)
	}
	return pids[0], nil
}

// threadsNamed returns the pids of the processes whose name (comm) match accepts.
func threadsNamed(match func(comm string) bool) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !match(strings.TrimSpace(string(comm))) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		out = append(out, pid)
	}
	return out, nil
}
