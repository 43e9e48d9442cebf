// SPDX-License-Identifier: Apache-2.0

// Command xlb-kernel-matrix boots Debian's real kernels (5.10, 6.1, 6.12, the newest 7.x) under
// QEMU/TCG, loads every BPF program xlb ships and runs the datapaths' tests in each guest, and
// writes the table kernel × program → loaded, verified instructions, and kernel × package → tests
// passed (make kernel-matrix; docs/testing.md).
//
//	xlb-kernel-matrix [--kernels 5.10,6.1] [--out bench/results/kernel-matrix.md]
//	xlb-kernel-matrix probe DIR   (in the guest: load every *.o under DIR)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/vmtest"
)

// suites are the packages whose tests run in every guest, with the tests that can run there: the
// BPF golden-packet tests, the AF_XDP parity tests, and the node agent's. A guest runs them
// seconds after its boot, so they also prove that no datapath or test depends on a host that
// has been up for a while (the boot-relative clock is small there): the gateway's slot-age and
// reload tests are included for that.
var suites = []struct {
	pkg string
	run string
}{
	{"xdp/socklb", ""},
	{"xdp/dsr", ""},
	{"xdp/gateway", "^(TestGolden|TestDefaultLoad|TestConstantsMatchBPF|TestFlagsMatchBPF|TestSlotAge|TestLoadKeepsSlotConnections|TestLoadReplacesOldHandshakeSlots)"},
	{"xdp/afxdp", "^(TestParity|TestSteerProgram|TestEngine)"},
	{"lb/agent", ""},
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "probe" {
		if err := vmtest.Probe(os.Args[2], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "xlb-kernel-matrix:", err)
		os.Exit(1)
	}
}

func run() error {
	kernels := flag.String("kernels", "", "comma-separated kernels to boot (default all: "+names()+")")
	only := flag.String("suites", "", "comma-separated packages to test (default all); \"none\" loads the programs only")
	cache := flag.String("cache", vmtest.DefaultCache, "where fetched kernels are kept")
	out := flag.String("out", "", "write the markdown table to this file too")
	timeout := flag.Duration("timeout", 20*time.Minute, "the longest one guest may run")
	lock := flag.String("lock", "/tmp/xlb-heavy.lock", "a file locked (flock) while a guest runs, so heavy jobs on one machine take turns (\"\" for none)")
	console := flag.Bool("console", false, "copy each guest's console to stderr")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	root, err := repoRoot()
	if err != nil {
		return err
	}
	want, err := pick(*kernels)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "xlb-kernel-matrix-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var ss []vmtest.Suite
	for _, s := range suites {
		if !chosen(*only, s.pkg) {
			continue
		}
		bin := filepath.Join(tmp, strings.ReplaceAll(s.pkg, "/", "_")+".test")
		log.Info("building test binary", "package", s.pkg)
		if err := goCmd(ctx, root, "test", "-c", "-o", bin, "./"+s.pkg); err != nil {
			return err
		}
		su := vmtest.Suite{Name: s.pkg, Binary: bin}
		if s.run != "" {
			su.Args = []string{"-test.run", s.run}
		}
		ss = append(ss, su)
	}
	probe := filepath.Join(tmp, "xlb-kernel-matrix")
	if err := goCmd(ctx, root, "build", "-o", probe, "./cmd/xlb-kernel-matrix"); err != nil {
		return err
	}

	var results []vmtest.Result
	for _, k := range want {
		log.Info("fetching kernel", "kernel", k.Name, "suite", k.Suite)
		f, err := vmtest.Fetch(ctx, *cache, k)
		if err != nil {
			return err
		}
		r := vmtest.NewInitramfs()
		if err := vmtest.AddBase(r, f); err != nil {
			return err
		}
		if err := addTree(r, root, ss, probe); err != nil {
			return err
		}
		r.Bytes("init", []byte(vmtest.InitScript(ss, "/bin/xlb-kernel-matrix", int(timeout.Seconds()))), 0o755)
		img, err := vmtest.WriteInitramfs(r, tmp)
		if err != nil {
			return err
		}
		var cons io.Writer
		if *console {
			cons = os.Stderr
		}
		unlock, err := flock(*lock)
		if err != nil {
			return err
		}
		start := time.Now()
		log.Info("booting", "kernel", k.Name, "release", f.Release)
		text, bootErr := vmtest.Boot(ctx, f.Image, img, nil, *timeout, cons)
		unlock()
		os.Remove(img)
		os.WriteFile(filepath.Join(tmp, "console-"+k.Name+".log"), []byte(text), 0o644)
		res := vmtest.Parse(k.Name, text)
		if res.Release == "" {
			res.Release = f.Release
		}
		if bootErr != nil {
			res.Err = bootErr.Error()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Info("guest done", "kernel", k.Name, "took", time.Since(start).Round(time.Second), "error", res.Err)
		if res.Err != "" {
			fmt.Fprintf(os.Stderr, "---- console of %s (last 60 lines) ----\n%s\n", k.Name, tail(text, 60))
		}
		results = append(results, res)
	}
	table := vmtest.Table(results)
	fmt.Print(table)
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			return err
		}
	}
	if !vmtest.AllPassed(results) {
		return errors.New("some kernel failed a test or did not finish (table above)")
	}
	return nil
}

// addTree adds the test binaries, the probe, every BPF object, and the non-Go files of the
// packages' folders (bpf/ headers, testdata/, objects) the tests read.
func addTree(r *vmtest.Initramfs, root string, ss []vmtest.Suite, probe string) error {
	if err := r.File("bin/xlb-kernel-matrix", probe); err != nil {
		return err
	}
	for _, s := range ss {
		if err := r.File("bin/"+filepath.Base(s.Binary), s.Binary); err != nil {
			return err
		}
	}
	for _, top := range []string{"xdp", "lb/agent"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if strings.HasSuffix(p, "_bpfel.o") {
				if err := r.File("obj/"+filepath.Base(p), p); err != nil {
					return err
				}
			}
			return r.File("src/"+rel, p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func goCmd(ctx context.Context, root string, args ...string) error {
	goBin := "go"
	if g := os.Getenv("GO"); g != "" {
		goBin = g
	}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run xlb-kernel-matrix inside the xlb module")
	}
	return filepath.Dir(mod), nil
}

func names() string {
	var n []string
	for _, k := range vmtest.Kernels {
		n = append(n, k.Name)
	}
	return strings.Join(n, ",")
}

func pick(list string) ([]vmtest.Kernel, error) {
	if list == "" {
		return vmtest.Kernels, nil
	}
	var out []vmtest.Kernel
	for _, n := range strings.Split(list, ",") {
		found := false
		for _, k := range vmtest.Kernels {
			if k.Name == n || k.Suite == n {
				out = append(out, k)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown kernel %q (have %s)", n, names())
		}
	}
	return out, nil
}

func chosen(list, pkg string) bool {
	if list == "" {
		return true
	}
	for _, p := range strings.Split(list, ",") {
		if p == pkg {
			return true
		}
	}
	return false
}

// flock takes an exclusive lock on path, waiting for it.
func flock(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
