// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestReadPinned: the read-only view of an agent's pins gives back the plan applied, while the
// agent runs and after it exits (its programs still balancing), with the counters the
// programs kept; a directory without an agent's pins is a clear error.
func TestReadPinned(t *testing.T) {
	s := newSite(t)
	pin := pinDir(t)
	p := plan{
		front("198.18.200.1", 80, datapath.TCP):    eps(ep(b10, 8080), ep(b11, 8080)),
		front("198.18.200.1", 53, datapath.UDP):    {Endpoints: []netip.AddrPort{ep(b10, 5353)}, AffinityTimeout: 3 * time.Hour},
		front("198.18.200.2", 80, datapath.TCP):    eps(), // no endpoint: refused
		front("2001:db8:200::1", 80, datapath.TCP): eps(ep(netip.MustParseAddr("2001:db8:1::10"), 8080)),
	}
	d, err := Load(Options{Cgroup: s.cgroup, PinPath: pin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apply(d, p); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*4"); r[0].Err != "" {
		t.Fatalf("connects: %+v", r[0])
	}
	want := func() string {
		var out []string
		for f, cf := range p {
			out = append(out, fmt.Sprintf("%s %v %v", f, cf.Endpoints, cf.AffinityTimeout))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}()
	check := func(when string) PinnedAgent {
		t.Helper()
		pa, err := ReadPinned(pin)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		var got []string
		for _, f := range pa.Frontends {
			if f.Missing != 0 {
				t.Errorf("%s: %s read with %d slots missing", when, f.Frontend, f.Missing)
			}
			got = append(got, fmt.Sprintf("%s %v %v", f.Frontend, f.Endpoints, f.AffinityTimeout))
		}
		if !slices.IsSortedFunc(pa.Frontends, func(a, b PinnedFrontend) int { return a.Frontend.Compare(b.Frontend) }) {
			t.Errorf("%s: frontends not sorted: %v", when, got)
		}
		slices.Sort(got)
		if g := strings.Join(got, "\n"); g != want {
			t.Errorf("%s: the pinned view reads\n%s\nwant\n%s", when, g, want)
		}
		if pa.Counters.Connects < 4 || pa.Attached != 8 || pa.Hooks != 8 {
			t.Errorf("%s: counters %+v, %d of %d programs attached; want the 4 connects, all 8", when, pa.Counters, pa.Attached, pa.Hooks)
		}
		return pa
	}
	check("with the agent running")
	// A slot deleted under a frontend (as by a read racing an update): counted as missing, the
	// frontend's other endpoints still listed.
	var sk socklbSlotKey
	var sv socklbSlotValue
	for it := d.objs.Slots.Iterate(); it.Next(&sk, &sv); {
		if sv.Ep == endpointOf(ep(b11, 8080)) {
			break
		}
	}
	saved := sv
	if err := d.objs.Slots.Delete(&sk); err != nil {
		t.Fatal(err)
	}
	pa, err := ReadPinned(pin)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(pa.Frontends, func(f PinnedFrontend) bool { return f.Frontend == front("198.18.200.1", 80, datapath.TCP) })
	if i < 0 || pa.Frontends[i].Missing != 1 || !slices.Equal(pa.Frontends[i].Endpoints, []netip.AddrPort{ep(b10, 8080)}) {
		t.Errorf("with a slot deleted: %+v", pa.Frontends)
	}
	if err := d.objs.Slots.Put(&sk, &saved); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	check("with the agent gone")

	// A program detached (its link pin gone), then a map of another layout.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := link.LoadPinnedLink(filepath.Join(pin, "link_connect4"), nil)
	must(err)
	must(l.Unpin())
	if pa, err := ReadPinned(pin); err != nil || pa.Attached != 7 {
		t.Errorf("with connect4's link unpinned: %d of %d attached, %v", pa.Attached, pa.Hooks, err)
	}
	must(l.Pin(filepath.Join(pin, "link_connect4")))
	l.Close()
	stats := filepath.Join(pin, "map_stats")
	orig, err := ebpf.LoadPinnedMap(stats, nil)
	must(err)
	must(orig.Unpin())
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 3})
	must(err)
	must(other.Pin(stats))
	if _, err := ReadPinned(pin); err == nil || !strings.Contains(err.Error(), stats) || !strings.Contains(err.Error(), "made by another build") {
		t.Errorf("ReadPinned with a stats map of another layout: %v", err)
	}
	must(other.Unpin())
	other.Close()
	must(orig.Pin(stats))
	orig.Close()

	empty := filepath.Join("/sys/fs/bpf", "xlb-test-"+netlab.Prefix())
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(empty)
	if _, err := ReadPinned(empty); err == nil || !strings.Contains(err.Error(), "is not pinned (no pinned node agent there)") {
		t.Errorf("ReadPinned of an empty directory: %v", err)
	}
	if _, err := ReadPinned(""); err == nil || !strings.Contains(err.Error(), "pins nothing") {
		t.Errorf("ReadPinned of no directory: %v", err)
	}
}
