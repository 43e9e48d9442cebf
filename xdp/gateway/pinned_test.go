// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestOpenPinned: a Pinned view reads what the loader wrote and what the program did (a flow it
// remembered, its counters) from the pins alone, also once the loader has exited, and cannot
// write.
func TestOpenPinned(t *testing.T) {
	d, opts := loadPinnedDir(t)
	dir := opts.PinPath
	f := datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}
	must(t, d.UpsertVIP(f, datapath.VIPConfig{ID: 7, Affinity: datapath.AffinityClientIP,
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}))
	must(t, d.UpsertBackend(3, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.UpsertBackend(4, datapath.Backend{Addr: netipMust("198.18.1.11"), Port: 8080, Down: true}))
	must(t, d.SetMaglevTable(7, table(13, 3)))
	must(t, d.SetReverse(datapath.Endpoint{Addr: be1v4, Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 7}))
	// An ACK of an unknown flow: conntrack remembers it, the VIP and backend counters move. No
	// interface is attached and BPF_PROG_TEST_RUN sends nothing, whatever the verdict.
	// The runs arrive on lo (ifindex 1), which nothing attached: it gets the client role.
	must(t, d.objs.IfRoles.Put(uint32(1), uint8(datapath.RoleClient)))
	in, _ := clientTCP(40000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	if _, err := d.Program().Run(&ebpf.RunOptions{Data: in.bytes(t)}); err != nil {
		t.Fatal(err)
	}
	// A SYN of another client port: no conntrack entry, a handshake entry (read below).
	syn, _ := clientTCP(40001, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
	syn.Seq = 0x12345678
	if _, err := d.Program().Run(&ebpf.RunOptions{Data: syn.bytes(t)}); err != nil {
		t.Fatal(err)
	}

	type state struct {
		vips     map[datapath.Frontend]datapath.VIPConfig
		backends map[datapath.BackendID]datapath.Backend
		tables   map[datapath.VIPID][]datapath.BackendID
		reverses map[datapath.Endpoint]datapath.ReverseNAT
		flows    []datapath.Flow
		reasons  map[Reason]uint64
		vip, be  datapath.Traffic
	}
	type reader interface {
		VIPs() (map[datapath.Frontend]datapath.VIPConfig, error)
		Backends() (map[datapath.BackendID]datapath.Backend, error)
		MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error)
		Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error)
		Flows() ([]datapath.Flow, error)
		ReasonCounts() (map[Reason]uint64, error)
		VIPTraffic(datapath.VIPID) (datapath.Traffic, error)
		BackendTraffic(datapath.BackendID) (datapath.Traffic, error)
	}
	read := func(r reader) state {
		t.Helper()
		var s state
		var errs [8]error
		s.vips, errs[0] = r.VIPs()
		s.backends, errs[1] = r.Backends()
		s.tables, errs[2] = r.MaglevTables()
		s.reverses, errs[3] = r.Reverses()
		s.flows, errs[4] = r.Flows()
		s.reasons, errs[5] = r.ReasonCounts()
		s.vip, errs[6] = r.VIPTraffic(7)
		s.be, errs[7] = r.BackendTraffic(3)
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		for i := range s.flows {
			s.flows[i].Idle = 0 // read at two different times
		}
		return s
	}
	want := read(d)
	if len(want.flows) != 1 || want.flows[0].Src != ap(client4, 40000) || want.flows[0].Backend != 3 ||
		want.vip.Packets != 2 || want.be.Packets != 2 {
		t.Fatalf("the program did not remember the flow or count it: flows %+v, VIP %+v, backend %+v",
			want.flows, want.vip, want.be)
	}
	must(t, d.Close()) // the loader exits; the pins stay

	p, err := OpenPinned(dir)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer p.Close()
	if got := read(p); fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("the pinned view reads\n%+v\nthe loader read\n%+v", got, want)
	}
	// Read-only: the kernel refuses writes through its descriptors.
	var k xlbSvcKey
	if err := p.d.objs.Vips.NextKey(nil, &k); err != nil {
		t.Fatal(err)
	}
	if err := p.d.objs.Vips.Delete(&k); !errors.Is(err, unix.EPERM) {
		t.Errorf("deleting a VIP through the pinned view: %v, want EPERM", err)
	}
	if err := p.d.objs.Conntrack.Update(&xlbFlowKey{}, &xlbCtEntry{}, ebpf.UpdateAny); !errors.Is(err, unix.EPERM) {
		t.Errorf("writing conntrack through the pinned view: %v, want EPERM", err)
	}
	if err := p.d.objs.HsSlots.Update(uint32(0), &xlbHsEntry{}, ebpf.UpdateAny); !errors.Is(err, unix.EPERM) {
		t.Errorf("writing the handshake table through the pinned view: %v, want EPERM", err)
	}
	if tb, err := p.MaglevTable(7); err != nil || len(tb) != 13 || tb[0] != 3 {
		t.Errorf("the pinned view's table of VIP 7: %v %v", tb, err)
	}

	// The SYN: the handshake table remembers its backend and its ISN, which the pinned view
	// reads; a tuple with no SYN has no entry.
	h, ok, err := p.Handshake(ap(client4, 40001), ap(vip4, 80), datapath.TCP)
	if err != nil || !ok || h.Backend != 3 || h.VIP != 7 || h.ISN != 0x12345678 || h.Client != ap(client4, 40001) ||
		h.VIPAddr != ap(vip4, 80) || h.Age > time.Minute {
		t.Errorf("the SYN's handshake entry through the pinned view: %+v %v %v", h, ok, err)
	}
	if h, ok, err := p.Handshake(ap(client4, 40002), ap(vip4, 80), datapath.TCP); ok || err != nil {
		t.Errorf("the handshake entry of a tuple with no SYN: %+v %v %v", h, ok, err)
	}
}

// TestOpenPinnedErrors: no datapath, or one whose maps this build cannot read, is a clear error.
func TestOpenPinnedErrors(t *testing.T) {
	empty := fmt.Sprintf("/sys/fs/bpf/%s", netlab.Prefix())
	t.Cleanup(func() { os.RemoveAll(empty) })
	if _, err := OpenPinned(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("no such directory: %v", err)
	}
	must(t, os.MkdirAll(empty, 0o700))
	if _, err := OpenPinned(empty); err == nil || !strings.Contains(err.Error(), "is not pinned") {
		t.Errorf("an empty directory: %v", err)
	}

	// A datapath's pins, then one map at a time swapped for one of another layout: a value of
	// another size, or a reasons map with another number of counters (an older build's).
	d, opts := loadPinnedDir(t)
	must(t, d.Close())
	dir := opts.PinPath
	p, err := OpenPinned(dir)
	if err != nil {
		t.Fatalf("the pins of a datapath of this build: %v", err)
	}
	must(t, p.Close())
	for _, c := range []struct {
		name string
		spec ebpf.MapSpec
	}{
		{xlbMapBackends, ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}},
		{xlbMapReasons, ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: uint32(numReasons) - 1}},
	} {
		path := filepath.Join(dir, c.name)
		orig, err := ebpf.LoadPinnedMap(path, nil)
		must(t, err)
		must(t, orig.Unpin())
		m, err := ebpf.NewMap(&c.spec)
		must(t, err)
		must(t, m.Pin(path))
		_, err = OpenPinned(dir)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "made by another build") {
			t.Errorf("%s of another layout: %v", c.name, err)
		} else {
			t.Logf("%s of another layout: %v", c.name, err)
		}
		must(t, m.Unpin())
		m.Close()
		must(t, orig.Pin(path))
		orig.Close()
	}

	// The handshake table, which a Load replaces rather than refuses: one of another layout, or
	// none, fails Handshake alone, naming it.
	path := filepath.Join(dir, xlbMapHsSlots)
	orig, err := ebpf.LoadPinnedMap(path, nil)
	must(t, err)
	must(t, orig.Unpin())
	defer func() {
		must(t, orig.Pin(path))
		orig.Close()
	}()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	must(t, err)
	defer m.Close()
	for _, pinned := range []bool{true, false} {
		if pinned {
			must(t, m.Pin(path))
		}
		p, err := OpenPinned(dir)
		if err != nil {
			t.Fatalf("handshakes pinned %v: %v", pinned, err)
		}
		_, _, herr := p.Handshake(ap(client4, 1), ap(vip4, 80), datapath.TCP)
		if _, err := p.VIPs(); err != nil || herr == nil || !strings.Contains(herr.Error(), xlbMapHsSlots) {
			t.Errorf("handshakes of another layout (pinned %v): VIPs %v, Handshake %v", pinned, err, herr)
		}
		must(t, p.Close())
		if pinned {
			must(t, m.Unpin())
		}
	}
}

// loadPinnedDir loads a datapath pinned in a new directory under /sys/fs/bpf (small conntrack and
// Maglev slots), and returns it with its options; when the test ends, a loader adopts and removes
// whatever is pinned there, and the directory goes.
func loadPinnedDir(t *testing.T) (*Datapath, Options) {
	t.Helper()
	opts := Options{PinPath: fmt.Sprintf("/sys/fs/bpf/%s", netlab.Prefix()), MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}}
	d, err := Load(opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(opts.PinPath)
	})
	return d, opts
}
