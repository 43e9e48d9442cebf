// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestProgsPins: the tail-call table of the programs that pinned links run is pinned, under the
// id of their xlb_xdp, before a link runs them and only while one does; a pin of another table
// under our id is replaced, a removed one put back; Remove leaves none.
func TestProgsPins(t *testing.T) {
	dir, opts := pinnedOptions(t, "pp")
	ns := netlab.New(t, netlab.Prefix()+"pp")
	peer := netlab.New(t, netlab.Prefix()+"pq")
	netlab.Veth(t, ns, "a0", macExt, peer, "a1", macClient)
	netlab.Veth(t, ns, "b0", macInt, peer, "b1", macBE1)
	progsDir := filepath.Join(dir, "progs")
	attach := func(d *Datapath, ifname string) {
		t.Helper()
		must(t, ns.Do(func() error { return d.Attach(ifname, datapath.AttachAuto, datapath.RoleBoth) }))
	}
	progID := func(d *Datapath) string {
		t.Helper()
		info, err := d.objs.XlbXdp.Info()
		must(t, err)
		id, _ := info.ID()
		return strconv.FormatUint(uint64(id), 10)
	}
	pinned := func(want ...string) {
		t.Helper()
		ents, err := os.ReadDir(progsDir)
		must(t, err)
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("pinned tail-call tables %v, want %v", got, want)
		}
	}
	isOurs := func(d *Datapath) {
		t.Helper()
		m, err := ebpf.LoadPinnedMap(filepath.Join(progsDir, progID(d)), nil)
		must(t, err)
		defer m.Close()
		same, err := sameMap(m, d.objs.Progs)
		must(t, err)
		if !same {
			t.Fatal("the table pinned under our program's id is not ours")
		}
	}

	a, err := Load(opts)
	must(t, err)
	// A table of another generation left under the id our program got.
	must(t, os.MkdirAll(progsDir, 0o700))
	stale, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 2})
	must(t, err)
	must(t, stale.Pin(filepath.Join(progsDir, progID(a))))
	stale.Close()
	attach(a, "a0")
	pinned(progID(a))
	isOurs(a)
	// Removed behind our back: the next attachment puts it back.
	must(t, os.Remove(filepath.Join(progsDir, progID(a))))
	attach(a, "b0")
	pinned(progID(a))
	isOurs(a)
	aID := progID(a)
	must(t, a.Close())

	// The next generation switches one link, then the other: the old table lives until the
	// second switch.
	b, err := Load(opts)
	must(t, err)
	attach(b, "a0")
	pinned(aID, progID(b))
	attach(b, "b0")
	pinned(progID(b))
	isOurs(b)

	// Detached from one interface, the generation still runs on the other; from both, its table
	// goes.
	must(t, ns.Do(func() error { return b.Detach("a0") }))
	pinned(progID(b))
	must(t, ns.Do(func() error { return b.Detach("b0") }))
	if _, err := os.Stat(progsDir); !os.IsNotExist(err) {
		t.Errorf("%s still there with no link left (%v)", progsDir, err)
	}

	// Remove, with the links attached again, leaves none.
	attach(b, "a0")
	attach(b, "b0")
	pinned(progID(b))
	must(t, ns.Do(b.Remove))
	if _, err := os.Stat(progsDir); !os.IsNotExist(err) {
		t.Errorf("%s still there after Remove (%v)", progsDir, err)
	}
}
