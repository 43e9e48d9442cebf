// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestLoadCarriesOldReverseOver: a reverse map pinned by a build whose rev_value had no
// candidates (8 bytes) is replaced at load with its entries kept, so a loader upgrade does not
// stop the replies of running services from being translated.
func TestLoadCarriesOldReverseOver(t *testing.T) {
	dir, opts := pinnedOptions(t, "m")
	d1, err := Load(opts)
	must(t, err)
	must(t, d1.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d1.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d1.Close())

	// What the earlier build pinned: {vip_id 1, vip_port 80, flags 0} for be1v4:8080/TCP.
	path := filepath.Join(dir, xlbMapReverse)
	spec, err := loadXlb()
	must(t, err)
	old := spec.Maps[xlbMapReverse].Copy()
	old.ValueSize, old.Pinning, old.Contents = oldRevValueSize, ebpf.PinNone, nil
	m, err := ebpf.NewMap(old)
	must(t, err)
	defer m.Close()
	key := svcKey(be1v4, 8080, datapath.TCP)
	val := make([]byte, oldRevValueSize)
	binary.LittleEndian.PutUint32(val, 1)
	binary.BigEndian.PutUint16(val[4:], 80)
	must(t, m.Put(&key, val))
	must(t, os.Remove(path))
	must(t, m.Pin(path))

	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	rev, err := d2.Reverses()
	must(t, err)
	ep := datapath.Endpoint{Addr: be1v4, Port: 8080, Proto: datapath.TCP}
	if len(rev) != 1 || rev[ep] != (datapath.ReverseNAT{VIP: 1}) {
		t.Fatalf("reverse entries after the upgrade: %+v", rev)
	}
	var v xlbRevValue
	must(t, d2.objs.Reverse.Lookup(&key, &v))
	if v.VipPort != binary.LittleEndian.Uint16([]byte{0, 80}) || v.Cand != [datapath.MaxReverseCandidates]uint32{} {
		t.Fatalf("carried-over value %+v, want vip_port 80 (network order), no candidates", v)
	}
}

// TestLoadRemovesRetiredPins: the address filter pinned by a build with the murmur filter hash
// (addr_filter) is unpinned at load; this build's bitmap is addr_bitmap, rebuilt from the maps.
func TestLoadRemovesRetiredPins(t *testing.T) {
	dir, opts := pinnedOptions(t, "r")
	d1, err := Load(opts)
	must(t, err)
	must(t, d1.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d1.Close())

	// What the earlier build pinned: addr_filter, 2048 words, and no addr_bitmap (Load must
	// create it and rebuild it from vips).
	must(t, os.Remove(filepath.Join(dir, xlbMapAddrBitmap)))
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "addr_filter", Type: ebpf.Array, KeySize: 4, ValueSize: 8,
		MaxEntries: 2 * addrFilterWords})
	must(t, err)
	defer old.Close()
	must(t, old.Pin(filepath.Join(dir, "addr_filter")))

	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	if _, err := os.Stat(filepath.Join(dir, "addr_filter")); !os.IsNotExist(err) {
		t.Errorf("the retired addr_filter pin is still there after Load: %v", err)
	}
	var word uint64
	must(t, d2.objs.AddrBitmap.Lookup(filterBit(vip4)/64, &word))
	if word&(1<<(filterBit(vip4)%64)) == 0 {
		t.Errorf("addr_bitmap has no bit for the pinned VIP %v after Load", vip4)
	}
}

// pinnedOptions returns a pin directory of its own (tag: a suffix for its name) and small
// Options pinning there; the pins and the directory are removed when the test ends.
func pinnedOptions(t *testing.T, tag string) (string, Options) {
	dir := "/sys/fs/bpf/" + netlab.Prefix() + tag
	opts := Options{PinPath: dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(dir)
	})
	return dir, opts
}

// TestLoadReplacesOldHandshakeSlots: a build with the live-flow filter in a map of its own
// (ct_live) pinned hs_slots with another slot layout (a 64-bit SYN time where this build keeps a
// 32-bit one and the filter's word), which the kernel cannot tell apart: the ct_live pin beside it
// marks it, and Load replaces both. The filter is then rebuilt from conntrack into the new slots.
func TestLoadReplacesOldHandshakeSlots(t *testing.T) {
	dir, opts := pinnedOptions(t, "h")
	d1, err := Load(opts)
	must(t, err)
	k := hsKey(hsCases()[0], 40001)
	must(t, d1.objs.Conntrack.Put(&k, &xlbCtEntry{LastSeen: monotonicNow(), BackendId: 1, VipId: 1}))
	// An old-layout slot: every byte set, as a 64-bit SYN time and a check word would leave it.
	old := xlbHsEntry{Key: k, SynTime: ^uint32(0), BackendId: 7, VipId: 7, Isn: 7, Check: ^uint32(0), Live: ^uint32(0)}
	must(t, d1.objs.HsSlots.Put(uint32(3), &old))
	must(t, d1.Close())

	live, err := ebpf.NewMap(&ebpf.MapSpec{Name: "ct_live", Type: ebpf.Array, KeySize: 4, ValueSize: 8,
		MaxEntries: 1 << 18, Flags: 0x400}) // BPF_F_MMAPABLE, as the earlier build made it
	must(t, err)
	defer live.Close()
	must(t, live.Pin(filepath.Join(dir, "ct_live")))

	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	if _, err := os.Stat(filepath.Join(dir, "ct_live")); !os.IsNotExist(err) {
		t.Errorf("the retired ct_live pin is still there after Load: %v", err)
	}
	var e xlbHsEntry
	must(t, d2.objs.HsSlots.Lookup(uint32(3), &e))
	if e != (xlbHsEntry{}) {
		t.Errorf("slot 3 after Load: %+v, want the old table replaced by an empty one", e)
	}
	slot, mask := liveSlot(&k, uint32(d2.opts.Seed), d2.live.slots, d2.live.half)
	must(t, d2.objs.HsSlots.Lookup(slot, &e))
	if e.Live&mask == 0 {
		t.Errorf("the pinned TCP flow has no live-flow filter bit in the new table (slot %d: %+v)", slot, e)
	}
}

// TestLoadKeepsSlotConnections: the handshake table holds the connections whose handshakes
// completed (HS_ST_CONN), so it is no longer wholly disposable. A restart with the same
// HandshakeSize adopts the pinned table, connections and all; one with another size replaces
// it, and Load first moves its live connections into conntrack (with their backend, VIP and
// closing state), where the live-flow filter rebuild gives them their bits. A connection idle
// past its timeout, and a handshake in flight, are not moved.
func TestLoadKeepsSlotConnections(t *testing.T) {
	_, opts := pinnedOptions(t, "k")
	opts.Settings.HandshakeSize = 256
	d1, err := Load(opts)
	must(t, err)
	c := hsCases()[0]
	// The slots' times are written in hs_time's 32-bit units, wrapping as the datapath's do: an
	// "idle" time two hours back is below zero on a host booted minutes ago, and must still read
	// as two hours old (slotAge), not as the clock's zero.
	start := monotonicNow()
	now := uint32(start >> hsTimeShift)
	conn, closing, idle, hs := hsKey(c, 41001), hsKey(c, 41002), hsKey(c, 41003), hsKey(c, 41004)
	conn.Pad[0], closing.Pad[0], idle.Pad[0] = hsStConn, hsStConn|hsStClosing, hsStConn
	used := map[uint32]bool{}
	for _, e := range []xlbHsEntry{
		{Key: conn, SynTime: now, BackendId: 1, VipId: 1},
		{Key: closing, SynTime: now, BackendId: 11, VipId: 1},
		{Key: idle, SynTime: now - uint32(2*time.Hour>>hsTimeShift), BackendId: 1, VipId: 1},
		{Key: hs, SynTime: now, BackendId: 1, VipId: 1},
	} {
		k := e.Key
		k.Pad[0] = 0
		slot, _ := liveSlot(&k, uint32(d1.opts.Seed), d1.live.slots, 0)
		if used[slot] {
			t.Fatalf("two of the test's tuples share slot %d: pick other ports", slot)
		}
		used[slot] = true
		must(t, d1.objs.HsSlots.Put(slot, &e))
	}
	must(t, d1.Close())

	// The same size: the table is adopted as it is.
	d2, err := Load(opts)
	must(t, err)
	if conns := slotConns(t, d2); len(conns) != 3 {
		t.Fatalf("connections in the adopted table: %+v, want the 3 written", conns)
	}
	if n := countEntries(t, d2.objs.Conntrack); n != 0 {
		t.Fatalf("conntrack after adopting the table: %d entries, want 0", n)
	}
	must(t, d2.Close())

	// Another size: the live connections move into conntrack.
	opts.Settings.HandshakeSize = 512
	d3, err := Load(opts)
	must(t, err)
	defer d3.Close()
	if n := d3.objs.HsSlots.MaxEntries(); n != 512 {
		t.Fatalf("handshake table of %d slots after Load, want 512", n)
	}
	want := map[uint16]xlbCtEntry{41001: {BackendId: 1, VipId: 1}, 41002: {BackendId: 11, VipId: 1, Flags: ctFlagClosing}}
	for port, w := range want {
		k := hsKey(c, port)
		var e xlbCtEntry
		if err := d3.objs.Conntrack.Lookup(&k, &e); err != nil {
			t.Fatalf("port %d: no conntrack entry after the table was replaced: %v", port, err)
		}
		if e.BackendId != w.BackendId || e.VipId != w.VipId || e.Flags != w.Flags || e.VipPort != k.Dport {
			t.Errorf("port %d: conntrack entry %+v, want %+v and the service port", port, e, w)
		}
		// Its slot's time: the unit that began at most one unit before start, read by a clock
		// that has not passed the moment of this check.
		if lo, hi := readingBefore(start, 1<<hsTimeShift), monotonicNow(); e.LastSeen < lo || e.LastSeen > hi {
			t.Errorf("port %d: conntrack entry last seen at %d ns, want its slot's time (%d..%d)", port, e.LastSeen, lo, hi)
		}
		if slot, mask := liveSlot(&k, uint32(d3.opts.Seed), d3.live.slots, d3.live.half); d3.live.bits(slot)&mask == 0 {
			t.Errorf("port %d: the moved connection has no live-flow filter bit", port)
		}
	}
	if n := countEntries(t, d3.objs.Conntrack); n != 2 {
		t.Errorf("conntrack after the table was replaced: %d entries, want 2 (not the idle connection, not the handshake)", n)
	}
}
