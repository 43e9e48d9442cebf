// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// Live sites of this process, for CloseAll.
var registry = struct {
	sync.Mutex
	sites map[*Site]bool
}{sites: map[*Site]bool{}}

func register(s *Site) {
	registry.Lock()
	defer registry.Unlock()
	registry.sites[s] = true
}

func unregister(s *Site) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.sites, s)
}

// CloseAll closes every site this process has open.
func CloseAll() error {
	registry.Lock()
	sites := make([]*Site, 0, len(registry.sites))
	for s := range registry.sites {
		sites = append(sites, s)
	}
	registry.Unlock()
	var errs []error
	for _, s := range sites {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// CloseAllOnSignal makes SIGINT and SIGTERM close every open site of this process and then exit
// with status 130 (SIGINT) or 143 (SIGTERM), as the signal would have. For test binaries: a
// test interrupted with Ctrl-C leaves nothing behind. stop undoes it.
func CloseAllOnSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "lab: %v: removing the lab sites\n", sig)
			if err := CloseAll(); err != nil {
				fmt.Fprintf(os.Stderr, "lab: %v\n", err)
			}
			os.Exit(128 + int(sig.(syscall.Signal)))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// Owner of a site directory: the pid and start time (clock ticks since boot, field 22 of
// /proc/PID/stat) of the process that made it, so a reused pid is not taken for the owner.
func writeOwner(dir string) error {
	pid := os.Getpid()
	st, err := procStart(pid)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "owner"), fmt.Appendf(nil, "%d %d\n", pid, st), 0o644)
}

func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22 overall: starttime
}

// stopOwner sends SIGTERM to the process that made site directory dir and waits up to a minute
// for it to exit (it removes its site on the way out); what it leaves, Down removes.
func stopOwner(dir string, log io.Writer) {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	var pid int
	if err != nil {
		return
	}
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 1 || pid == os.Getpid() {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return
	}
	fmt.Fprintf(log, "site %s: asked its lab process %d to remove it (SIGTERM)\n", filepath.Base(dir), pid)
	deadline := time.Now().Add(time.Minute)
	for ownerAlive(dir) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// ownerAlive reports whether the process that made site directory dir still runs.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return false
	}
	st, err := procStart(pid)
	return err == nil && st == start
}

var (
	prefixRE   = regexp.MustCompile(`^` + NamePrefixTag + `[0-9a-f]{6}$`)
	nsNameRE   = regexp.MustCompile(`^(` + NamePrefixTag + `[0-9a-f]{6})-[a-z0-9]+$`)
	pinNameRE  = regexp.MustCompile(`^(` + NamePrefixTag + `[0-9a-f]{6})-(g|agent-n|dsr-n)[0-9]+$`)
	bpffsRoot  = "/sys/fs/bpf"
	procRoot   = "/proc"
	downWaitTO = 5 * time.Second
)

// Down removes the leftovers of lab sites: for every site whose owner process is gone (every
// site when all is set), the xlb processes it started (found by their command line, which names
// the site's config file under stateDir), its namespaces, its pins under /sys/fs/bpf, its node
// agents' cgroups and its state directory; and namespaces and pins with a lab name whose site has no state directory.
// Sites of running lab processes are left alone unless all: then each such process (an
// `xlb-lab up`, detached or not) is sent SIGTERM first and given a minute to remove its site
// itself, and the output files of detached ones (up-*.log) are removed too.
func Down(stateDir string, all bool, log io.Writer) error {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	if log == nil {
		log = io.Discard
	}
	var errs []error
	live := map[string]bool{}  // prefixes of sites to keep
	stale := map[string]bool{} // prefixes of sites to remove
	if ents, err := os.ReadDir(stateDir); err == nil {
		for _, e := range ents {
			if !e.IsDir() || !prefixRE.MatchString(e.Name()) {
				continue
			}
			dir := filepath.Join(stateDir, e.Name())
			if ownerAlive(dir) {
				if !all {
					live[e.Name()] = true
					fmt.Fprintf(log, "site %s is in use by a running lab: left alone (use --all to remove it too)\n", e.Name())
					continue
				}
				stopOwner(dir, log)
			}
			stale[e.Name()] = true
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if all {
		logs, _ := filepath.Glob(filepath.Join(stateDir, "up-*.log"))
		for _, l := range logs {
			_ = os.Remove(l)
		}
	}
	remove := func(prefix string) bool { return !live[prefix] }

	// 1. xlb processes started by a site being removed.
	killed, err := killSiteProcesses(stateDir, remove)
	if err != nil {
		errs = append(errs, err)
	}
	for _, k := range killed {
		fmt.Fprintf(log, "killed pid %d (%s)\n", k.pid, k.cmdline)
	}

	// 2. Namespaces.
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		errs = append(errs, fmt.Errorf("ip netns list: %w", err))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := nsNameRE.FindStringSubmatch(f[0])
		if m == nil || !remove(m[1]) {
			continue
		}
		if b, err := exec.Command("ip", "netns", "del", f[0]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", f[0], err, strings.TrimSpace(string(b))))
			continue
		}
		fmt.Fprintf(log, "removed namespace %s\n", f[0])
	}

	// 3. Pins.
	if ents, err := os.ReadDir(bpffsRoot); err == nil {
		for _, e := range ents {
			m := pinNameRE.FindStringSubmatch(e.Name())
			if m == nil || !remove(m[1]) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(bpffsRoot, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(log, "removed pins %s\n", filepath.Join(bpffsRoot, e.Name()))
		}
	}

	// 4. The node agents' cgroups (empty once their processes are gone).
	if root, err := socklb.RootCgroup(); err == nil {
		if ents, err := os.ReadDir(root); err == nil {
			for _, e := range ents {
				m := pinNameRE.FindStringSubmatch(e.Name())
				if !e.IsDir() || m == nil || !remove(m[1]) {
					continue
				}
				if err := netlab.RemoveCgroup(filepath.Join(root, e.Name())); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(log, "removed cgroup %s\n", filepath.Join(root, e.Name()))
			}
		}
	}

	// 5. State directories.
	for p := range stale {
		if err := os.RemoveAll(filepath.Join(stateDir, p)); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(log, "removed %s\n", filepath.Join(stateDir, p))
	}
	return errors.Join(errs...)
}

type procInfo struct {
	pid     int
	cmdline string
}

// killSiteProcesses SIGKILLs every process that runs `... run --config <stateDir>/<prefix>/...`
// (xlb), `bird ... -c <stateDir>/<prefix>/...` (a router's BIRD), `zebra|bgpd ... -f
// <stateDir>/<prefix>/...` (a router's FRR), `etcd ... --data-dir <stateDir>/<prefix>/...` or
// `kube-apiserver ... --cert-dir <stateDir>/<prefix>/...` (Kubernetes mode's control plane)
// for a prefix that remove accepts, and waits until they are gone.
func killSiteProcesses(stateDir string, remove func(prefix string) bool) ([]procInfo, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	root := filepath.Clean(stateDir) + "/"
	var victims []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		// xlb: `... run --config <file>`; the router's bird: `bird -f -c <file> ...`; its FRR:
		// `/usr/lib/frr/zebra|bgpd ... -f <file> ...`; the control plane's etcd and apiserver.
		i := slices.Index(args, "--config")
		isXLB := i >= 1 && i+1 < len(args) && slices.Contains(args[:i], "run")
		if !isXLB && slices.Contains(args, "agent") { // a node agent: `... agent ... --kubeconfig|--config <file>`
			if i = slices.Index(args, "--kubeconfig"); i < 0 {
				i = slices.Index(args, "--config")
			}
			isXLB = i >= 1 && i+1 < len(args)
		}
		if !isXLB {
			switch filepath.Base(args[0]) {
			case "bird":
				i = slices.Index(args, "-c")
			case "zebra", "bgpd", "bfdd":
				i = slices.Index(args, "-f")
			case "etcd": // Kubernetes mode's control plane: data in <site>/kube/etcd
				i = slices.Index(args, "--data-dir")
			case "kube-apiserver": // certificates in <site>/kube/certs
				i = slices.Index(args, "--cert-dir")
			default:
				continue
			}
			if i < 1 || i+1 >= len(args) {
				continue
			}
		}
		rest, ok := strings.CutPrefix(args[i+1], root)
		if !ok {
			continue
		}
		prefix, _, _ := strings.Cut(rest, "/")
		if !prefixRE.MatchString(prefix) || !remove(prefix) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			victims = append(victims, procInfo{pid, strings.Join(args, " ")})
		}
	}
	deadline := time.Now().Add(downWaitTO)
	var errs []error
	for _, v := range victims {
		for {
			if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(v.pid))); errors.Is(err, os.ErrNotExist) {
				break
			}
			if st, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(v.pid), "stat")); err == nil &&
				bytes.Contains(st, []byte(") Z ")) {
				break // a zombie: dead, its parent has not reaped it
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("pid %d still there %v after SIGKILL", v.pid, downWaitTO))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return victims, errors.Join(errs...)
}

// Build builds the xlb daemon (github.com/xlb-dev/xlb/cmd/xlb) into dir and returns the
// binary's path. It runs `go build` in the current directory, which must be inside the module.
func Build(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build xlb: %w", err)
	}
	out := filepath.Join(dir, "xlb")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/xlb-dev/xlb/cmd/xlb")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build xlb: %v: %s", err, b)
	}
	return out, nil
}
