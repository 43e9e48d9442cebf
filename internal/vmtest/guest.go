// SPDX-License-Identifier: Apache-2.0
package vmtest

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Suite is one test binary the guest runs, in a copy of its package's folder (the tests read the
// package's bpf/ headers and testdata/).
type Suite struct {
	Name   string   // the package, e.g. "xdp/dsr"
	Binary string   // host path of the static `go test -c` binary
	Args   []string // e.g. -test.run
}

// Marker lines the guest's /init prints around each suite, and at the end.
const (
	markBegin = "XLB-VM-BEGIN "
	markEnd   = "XLB-VM-END "
	markDone  = "XLB-VM-DONE"
	markInfo  = "XLB-VM-INFO "
)

// InitScript is the guest's /init: mount what the tests need, insert the modules, run the probe
// and each suite, print the markers, power off. Everything runs seconds after boot, so a test that
// depends on the host's uptime (a boot-relative clock far from zero) fails here.
func InitScript(suites []Suite, probe string, timeoutSec int) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mkdir -p /sys/fs/bpf /sys/fs/cgroup /run/netns
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
ip link set lo up
for m in veth sch_ingress cls_bpf act_bpf sch_netem dummy; do
  for f in /modules/$m.ko*; do
    [ -e "$f" ] || continue
    case "$f" in
      *.xz) unxz -c "$f" > /tmp/m.ko && insmod /tmp/m.ko ;;
      *) insmod "$f" ;;
    esac
  done
done
echo "` + markInfo + `release=$(uname -r) uptime=$(cut -d' ' -f1 /proc/uptime)"
`)
	if probe != "" {
		fmt.Fprintf(&b, "echo '%sprobe'\n%s probe /obj\necho \"%sprobe rc=$?\"\n", markBegin, probe, markEnd)
	}
	for _, s := range suites {
		dir := "/src/" + s.Name
		args := append([]string{"-test.v", "-test.count=1", fmt.Sprintf("-test.timeout=%ds", timeoutSec)}, s.Args...)
		fmt.Fprintf(&b, "mkdir -p %s; cd %s; echo '%s%s'\n/bin/%s %s 2>&1\necho \"%s%s rc=$?\"\ncd /\n",
			dir, dir, markBegin, s.Name, testBin(s.Name), shellJoin(args), markEnd, s.Name)
	}
	b.WriteString("echo " + markDone + "\npoweroff -f\n")
	return b.String()
}

func testBin(pkg string) string { return strings.ReplaceAll(pkg, "/", "_") + ".test" }

// AddBase puts busybox, the host's ip (with its libraries: busybox's ip cannot do netns or veth)
// and the kernel's modules into r.
func AddBase(r *Initramfs, k *Fetched) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("initramfs: busybox (apt install busybox-static): %w", err)
	}
	if err := r.File("bin/busybox", bb); err != nil {
		return err
	}
	for _, c := range []string{"sh", "mount", "mkdir", "cat", "cut", "echo", "insmod", "unxz", "poweroff",
		"sleep", "ls", "cp", "rm", "true", "false", "test", "[", "grep", "sed", "env", "uname", "timeout", "ln", "chmod", "mknod", "ps", "kill", "sysctl"} {
		r.Symlink("bin/"+c, "busybox")
	}
	r.Symlink("sbin", "bin")
	r.Symlink("usr/bin", "../bin")
	r.Symlink("usr/sbin", "../bin")
	r.Symlink("var/run", "../run")
	for _, d := range []string{"proc", "sys", "dev", "tmp", "run", "root", "etc"} {
		r.Dir(d)
	}
	r.Bytes("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"), 0o644)
	r.Bytes("etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	r.Bytes("etc/hosts", []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644)
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("initramfs: ip (iproute2): %w", err)
	}
	real, _ := filepath.EvalSymlinks(ipPath)
	if err := r.File("bin/ip", real); err != nil {
		return err
	}
	if err := addLibs(r, real); err != nil {
		return err
	}
	mods, _ := filepath.Glob(filepath.Join(k.Modules, "kernel", "*.ko*"))
	more, _ := filepath.Glob(filepath.Join(k.Modules, "kernel", "*", "*", "*.ko*"))
	for _, m := range append(mods, more...) {
		if err := r.File("modules/"+filepath.Base(m), m); err != nil {
			return err
		}
	}
	return nil
}

// addLibs adds the shared libraries bin links against (ldd), at the same paths.
func addLibs(r *Initramfs, bin string) error {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return fmt.Errorf("initramfs: ldd %s: %w", bin, err)
	}
	re := regexp.MustCompile(`(/[^\s]+) \(0x`)
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		real, err := filepath.EvalSymlinks(m[1])
		if err != nil {
			return fmt.Errorf("initramfs: %s: %w", m[1], err)
		}
		if err := r.File(m[1], real); err != nil {
			return err
		}
	}
	return nil
}

// Result is what one guest reported.
type Result struct {
	Kernel   string
	Release  string
	Uptime   string          // the guest's uptime when the tests started, seconds
	Programs []ProgramResult // from the probe
	Suites   []SuiteResult
	Err      string // the guest did not finish: timeout, crash, qemu error
}

// ProgramResult is one BPF program loaded alone on the guest's kernel.
type ProgramResult struct {
	Object, Program string
	Loaded          bool
	Insns           int    // verified (processed) instructions, -1 when unknown
	Reason          string // why it did not load
}

// SuiteResult counts one test binary's tests.
type SuiteResult struct {
	Name             string
	Pass, Fail, Skip int
	Failed           []string
	Finished         bool // the binary ran to its end (rc printed)
	RC               int
}

var (
	reTest = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	reProg = regexp.MustCompile(`^XLB-PROG (\S+) (\S+) loaded=(\d) insns=(-?\d+)(?: reason=(.*))?$`)
)

// Parse reads a guest's console output.
func Parse(kernel, out string) Result {
	res := Result{Kernel: kernel}
	var cur *SuiteResult
	done := false
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		switch {
		case strings.HasPrefix(line, markInfo):
			for _, f := range strings.Fields(strings.TrimPrefix(line, markInfo)) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "release":
					res.Release = v
				case "uptime":
					res.Uptime = v
				}
			}
		case strings.HasPrefix(line, markBegin):
			name := strings.TrimPrefix(line, markBegin)
			if name == "probe" {
				cur = nil
				continue
			}
			res.Suites = append(res.Suites, SuiteResult{Name: name})
			cur = &res.Suites[len(res.Suites)-1]
		case strings.HasPrefix(line, markEnd):
			f := strings.Fields(strings.TrimPrefix(line, markEnd))
			if cur != nil && len(f) == 2 {
				cur.Finished = true
				cur.RC, _ = strconv.Atoi(strings.TrimPrefix(f[1], "rc="))
			}
			cur = nil
		case line == markDone:
			done = true
		default:
			if m := reProg.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[4])
				res.Programs = append(res.Programs, ProgramResult{Object: m[1], Program: m[2], Loaded: m[3] == "1", Insns: n, Reason: m[5]})
				continue
			}
			if m := reTest.FindStringSubmatch(line); m != nil && cur != nil {
				if strings.Contains(m[2], "/") { // subtests count in their parent
					continue
				}
				switch m[1] {
				case "PASS":
					cur.Pass++
				case "FAIL":
					cur.Fail++
					cur.Failed = append(cur.Failed, m[2])
				case "SKIP":
					cur.Skip++
				}
			}
		}
	}
	if !done && res.Err == "" {
		res.Err = "the guest did not finish"
	}
	sort.SliceStable(res.Programs, func(i, j int) bool { return res.Programs[i].Object < res.Programs[j].Object })
	return res
}
