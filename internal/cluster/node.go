// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Node is one kubelet's world: its network namespace, a private mount namespace (tmpfs over
// /run and /var/lib, so containerd's sockets, runc's state and the kubelet's fixed paths never
// touch the host's), and the daemons in them.
type Node struct {
	// Name is the Node's name (n1, n2, …).
	Name string
	// NetNS is the node's network namespace (under /run/netns).
	NetNS string
	// IP4 is the node's InternalIP; PodCIDR4 the range its Pods get addresses from.
	IP4      netip.Addr
	PodCIDR4 netip.Prefix

	dir        string
	cgroupRoot string
	holder     *proc
	daemons    []*proc
}

// cgroupHierarchies are the cgroup v1 hierarchies the kubelet's cgroupRoot must exist in, and
// the hybrid host's cgroup v2 one ("unified"), where runc mirrors the Pods' cgroups too.
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd", "hugetlb", "net_cls", "net_prio", "perf_event", "unified"}

// CgroupDirs are the node's cgroupRoot directories in every hierarchy mounted here (whether
// or not they exist).
func (n *Node) CgroupDirs() []string {
	var dirs []string
	for _, h := range cgroupHierarchies {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h)); err == nil {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", h, n.cgroupRoot))
		}
	}
	return dirs
}

// nsArgs is the nsenter prefix that runs a command in the node's network and mount namespaces.
func (n *Node) nsArgs() []string {
	pid := strconv.Itoa(n.holder.cmd.Process.Pid)
	return []string{"nsenter", "--net=/proc/" + pid + "/ns/net", "--mount=/proc/" + pid + "/ns/mnt", "--"}
}

// Cmd is argv run inside the node (its network and mount namespaces).
func (n *Node) Cmd(argv ...string) *exec.Cmd {
	a := append(n.nsArgs(), argv...)
	return exec.Command(a[0], a[1:]...)
}

// startHolder starts the process whose mount namespace the node's daemons share.
func (n *Node) startHolder() error {
	ready := filepath.Join(n.dir, "holder.ready")
	script := strings.Join([]string{
		"set -e",
		"mount -t tmpfs -o mode=755 xlb-node-run /run",
		"mount -t tmpfs -o mode=755 xlb-node-varlib /var/lib",
		"mkdir -p /run/containerd /var/lib/kubelet /var/lib/cni",
		"touch " + ready,
		"exec sleep 2147483647",
	}, "\n")
	p, err := startProc(n.Name+"-holder", filepath.Join(n.dir, "holder.log"), os.Environ(),
		"nsenter", "--net=/run/netns/"+n.NetNS, "--", "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script)
	if err != nil {
		return err
	}
	n.holder = p
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			// ip netns exec forks unshare, which execs sh → sleep: find the sleeping child.
			return n.findHolderPID()
		}
		if p.exited() {
			return fmt.Errorf("node %s mount namespace: %s", n.Name, p.tail(10))
		}
	}
	return fmt.Errorf("node %s mount namespace not ready in 10 s: %s", n.Name, p.tail(10))
}

// findHolderPID points holder at the process that really holds the namespaces: ip netns exec
// may fork rather than exec.
func (n *Node) findHolderPID() error {
	self, _ := os.Readlink("/proc/self/ns/mnt")
	pid := n.holder.cmd.Process.Pid
	for range 50 {
		if ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt"); err == nil && ns != self {
			return nil
		}
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(kids)); len(f) > 0 {
			if c, err := strconv.Atoi(f[0]); err == nil {
				n.holder.cmd.Process.Pid = c
				pid = c
				continue
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node %s: no process in a mount namespace of its own", n.Name)
}

// makeCgroups creates the kubelet's cgroupRoot in every mounted v1 hierarchy.
func (n *Node) makeCgroups() error {
	for _, h := range cgroupHierarchies {
		base := filepath.Join("/sys/fs/cgroup", h)
		if _, err := os.Stat(base); err != nil {
			continue
		}
		d := filepath.Join(base, n.cgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		if h == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(base, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s/%s: %w", d, f, err)
				}
			}
		}
	}
	return nil
}

// stop kills the node's daemons, every process left in its cgroups and mount namespace (the
// containers and containerd's shims), then removes its cgroups.
func (n *Node) stop() error {
	for i := len(n.daemons) - 1; i >= 0; i-- {
		n.daemons[i].stop(5 * time.Second)
	}
	var mntNS string
	if n.holder != nil {
		mntNS, _ = os.Readlink("/proc/" + strconv.Itoa(n.holder.cmd.Process.Pid) + "/ns/mnt")
	}
	for range 20 {
		killed := 0
		if mntNS != "" {
			killed += killInMountNS(mntNS, n.holder.cmd.Process.Pid)
		}
		killed += killInCgroup(filepath.Join("/sys/fs/cgroup/pids", n.cgroupRoot))
		if killed == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n.holder != nil {
		_ = n.holder.cmd.Process.Kill()
		n.holder.stop(time.Second)
	}
	var first error
	for _, d := range n.CgroupDirs() {
		if err := removeCgroupTree(d); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// killInMountNS SIGKILLs every process (but holder) whose mount namespace is ns.
func killInMountNS(ns string, holder int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt"); err == nil && l == ns {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// killInCgroup SIGKILLs every process in the cgroup tree at dir.
func killInCgroup(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		return nil
	})
	return n
}

// removeCgroupTree removes the cgroup at dir and every cgroup below it, deepest first.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var first error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 50 {
			if err = syscall.Rmdir(dirs[i]); err == nil || os.IsNotExist(err) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return first
}
