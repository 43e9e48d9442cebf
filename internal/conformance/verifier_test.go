// SPDX-License-Identifier: Apache-2.0
package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/afxdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/dsr"
	"github.com/xlb-dev/xlb/xdp/gateway"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// verifierBudget is the most instructions the verifier may process for any one program xlb
// ships, on any supported kernel: half its limit of 1,000,000, so that each program has room to
// grow and older verifiers (which prune less) still accept it.
const verifierBudget = 500_000

// loadedPrograms returns the programs the kernel loaded while fn ran (by id: ids only grow) whose
// names start with one of prefixes, name -> verified instructions, read before fn's loader is
// closed (close, which fn returns). Other processes loading programs of the same names meanwhile
// could only add entries of the same object.
func loadedPrograms(t *testing.T, prefixes []string, fn func() (close func())) map[string]uint32 {
	t.Helper()
	var last ebpf.ProgramID
	for {
		id, err := ebpf.ProgramGetNextID(last)
		if err != nil {
			break
		}
		last = id
	}
	done := fn()
	defer done()
	got := map[string]uint32{}
	for id := last; ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone already
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			t.Fatalf("program %d: info: %v", id, err)
		}
		if !slices.ContainsFunc(prefixes, func(s string) bool { return strings.HasPrefix(info.Name, s) }) {
			continue
		}
		n, ok := info.VerifiedInstructions()
		if !ok {
			t.Fatalf("program %s (%d): the kernel reports no verified instruction count", info.Name, id)
		}
		got[info.Name] = max(got[info.Name], n)
	}
	return got
}

// TestVerifierBudget loads every BPF program xlb ships, as its own loader does and with the
// configuration that gives the verifier the most to walk, and checks that the verifier processed
// at most verifierBudget instructions for each. It logs every program's count (the kernel's
// figure, program names as the kernel keeps them: 15 characters), so that a change that eats
// headroom shows in the test's output.
func TestVerifierBudget(t *testing.T) {
	requireRoot(t)
	var kernel string
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	type object struct {
		name     string
		prefixes []string
		want     int // programs expected
		load     func(t *testing.T) (close func())
	}
	objects := []object{
		{name: "gateway XDP", prefixes: []string{"xlb_"}, want: 14, load: func(t *testing.T) func() {
			// Every feature the load-time variables gate switched on: a next-hop cache, the
			// mid-flow budget, a handshake table; the largest tables.
			d, err := gateway.Load(gateway.Options{NoPin: true, MaglevSlots: 1 << 20,
				Settings: datapath.Settings{ConntrackSize: 1 << 16, Seed: 7}})
			must(t, err)
			return func() { must(t, d.Close()) }
		}},
		{name: "AF_XDP steer", prefixes: []string{"xlb_steer"}, want: 1, load: func(t *testing.T) func() {
			p := netlab.Prefix()
			ns, peer := netlab.New(t, p+"v"), netlab.New(t, p+"w")
			netlab.Veth(t, ns, "vb0", "02:00:00:00:0a:01", peer, "vbp", "02:00:00:00:0a:02")
			d, err := afxdp.Load(afxdp.Config{Engine: datapath.Settings{Seed: 7}})
			must(t, err)
			t.Cleanup(func() { d.Close() })
			must(t, ns.Do(func() error { return d.Attach("vb0", datapath.AttachAuto, datapath.RoleBoth) }))
			return func() { must(t, d.Close()) }
		}},
		{name: "DSR node", prefixes: []string{"dsr_"}, want: 2, load: func(t *testing.T) func() {
			d, err := dsr.Load(dsr.Options{})
			must(t, err)
			return func() { must(t, d.Close()) }
		}},
		{name: "socket LB and reaper", prefixes: []string{"socklb_"}, want: 9, load: func(t *testing.T) func() {
			root, err := socklb.RootCgroup()
			must(t, err)
			cg := filepath.Join(root, "xlb-verifier-"+netlab.Prefix())
			must(t, os.Mkdir(cg, 0o755))
			t.Cleanup(func() {
				if err := netlab.RemoveCgroup(cg); err != nil {
					t.Error(err)
				}
			})
			d, err := socklb.Load(socklb.Options{Cgroup: cg, Sockets: socklb.MinSockets})
			must(t, err)
			if err := d.ReapUDPErr(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
				t.Errorf("socket reaper: %v", err)
			}
			return func() { must(t, d.Close()) }
		}},
	}
	var report strings.Builder
	fmt.Fprintf(&report, "verified instructions on Linux %s (budget %d):\n", kernel, verifierBudget)
	for _, o := range objects {
		got := loadedPrograms(t, o.prefixes, func() func() { return o.load(t) })
		if len(got) < o.want {
			t.Errorf("%s: %d programs seen loading (%v), want at least %d", o.name, len(got), got, o.want)
		}
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(&report, "  %-20s %-20s %8d  %3d%%\n", o.name, n, got[n], int(got[n])*100/verifierBudget)
			if got[n] > verifierBudget {
				t.Errorf("%s: program %s: %d verified instructions, over the budget of %d", o.name, n, got[n], verifierBudget)
			}
		}
	}
	t.Log(report.String())
}
