// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestLiveFilterRebuiltAtLoad: a loader adopting pinned maps rebuilds the live-flow filter from
// conntrack before anything is attached, so a TCP or UDP entry that an earlier build's program
// made without setting its bit (or that the filter otherwise lacks) has it: a SYN (a datagram)
// on that tuple then asks conntrack and keeps the flow's backend. Entries idle past their
// timeouts get no bit (the datapath would treat them as gone).
func TestLiveFilterRebuiltAtLoad(t *testing.T) {
	d, opts := loadPinnedDir(t)
	now := monotonicNow()
	key := func(sport uint16, proto datapath.Protocol) xlbFlowKey {
		return forwardKey(client4, sport, ap(vip4, 80), proto)
	}
	live, udp, idle := key(40001, datapath.TCP), key(40002, datapath.UDP), key(40003, datapath.TCP)
	idleUDP := key(40004, datapath.UDP)
	// The adopting loader runs with 30 s established and UDP timeouts: an entry idle for longer
	// than that exists on any machine up for a minute.
	opts.TCPEstablishedTimeout, opts.UDPTimeout = 30*time.Second, 30*time.Second
	idleFor := uint64(opts.TCPEstablishedTimeout + liveSkew + 10*time.Second)
	entries := []struct {
		k xlbFlowKey
		e xlbCtEntry
	}{
		{live, xlbCtEntry{LastSeen: now, BackendId: 1, VipId: 1}},
		{udp, xlbCtEntry{LastSeen: now, BackendId: 2, VipId: 2}},
	}
	if now <= idleFor {
		t.Skip("the machine has been up for less than a minute")
	}
	entries = append(entries, struct {
		k xlbFlowKey
		e xlbCtEntry
	}{idle, xlbCtEntry{LastSeen: now - idleFor, BackendId: 1, VipId: 1}}, struct {
		k xlbFlowKey
		e xlbCtEntry
	}{idleUDP, xlbCtEntry{LastSeen: now - idleFor, BackendId: 2, VipId: 2}})
	for _, x := range entries {
		must(t, d.objs.Conntrack.Put(&x.k, &x.e))
	}
	bitSet := func(d *Datapath, k xlbFlowKey) bool { return liveBit(d, k, d.live.half) }
	if bitSet(d, live) {
		t.Fatal("the entry written behind the datapath's back has its bit already")
	}
	must(t, d.Close())

	d2, err := Load(opts)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer d2.Close()
	if !bitSet(d2, live) {
		t.Error("the adopted TCP entry has no bit after Load")
	}
	if !bitSet(d2, udp) {
		t.Error("the adopted UDP entry has no bit after Load (a datagram asks the filter too)")
	}
	if bitSet(d2, idleUDP) {
		t.Error("the adopted UDP entry idle past its timeout has a bit")
	}
	if bitSet(d2, idle) {
		t.Error("the adopted TCP entry idle past its timeout has a bit")
	}
	var c xlbClockValue
	must(t, d2.objs.Clock.Lookup(uint32(0), &c))
	if c.LiveHalf != d2.live.half {
		t.Errorf("clock names half %d, the loader rebuilt half %d", c.LiveHalf, d2.live.half)
	}
}

// TestSlotAge: a handshake slot's coarse SYN time reads back as an age less than one unit
// (2^hsTimeShift ns) from the true one, whatever the clock reads — seconds
// after boot (where a time written "two hours ago" wrapped the units below zero) as after weeks;
// a time a little after now (another CPU) is age 0, as the datapath counts it fresh; one far after
// now is older than any timeout.
func TestSlotAge(t *testing.T) {
	const unit = 1 << hsTimeShift
	for _, now := range []uint64{3_000_000_000, 5_000_000_000_000, 20 * 24 * 3600 * 1_000_000_000} {
		for _, ago := range []uint64{0, 1, unit - 1, unit, 59 * 1_000_000_000, 2 * 3600 * 1_000_000_000} {
			// The units of the reading ago before now, as the datapath wrote them (hs_time),
			// wrapped below zero when that reading would be before the clock's zero.
			t0 := uint32((int64(now) - int64(ago)) >> hsTimeShift)
			got := slotAge(t0, now)
			if diff := int64(got) - int64(ago); diff <= -unit || diff >= unit {
				t.Errorf("clock at %d ns: a SYN %d ns ago reads back as %d ns ago", now, ago, got)
			}
		}
		if got := slotAge(uint32(now>>hsTimeShift)+100, now); got != 0 {
			t.Errorf("clock at %d ns: a SYN time 100 units after now reads back as %v old, want 0", now, got)
		}
		if got := slotAge(uint32(now>>hsTimeShift)+1<<30, now); got != slotAgeUnknown {
			t.Errorf("clock at %d ns: a SYN time 2^30 units after now reads back as %v old, want unknown", now, got)
		}
	}
	if got := readingBefore(3_000_000_000, 2*time.Hour); got != 0 {
		t.Errorf("the reading 2 h before a clock at 3 s is %d, want 0 (before the clock's zero)", got)
	}
}

// TestTupleHashSpread: the handshake table's slot (tupleHash's low bits) and the live-flow
// filter's bit (its top bits) must spread the tuples a real client population sends, or
// connections share slots (and move into conntrack) far more often than the table's size says.
// The sets: the 16,384 source ports of one client address (a NAT gateway's connections), 16,384
// client addresses of a /18 with one port each, and the ports of one IPv6 client; each over the
// default 65,536 slots, where 16,384 random tuples would fill 65,536 × (1 - e^-0.25) ≈ 14,497.
func TestTupleHashSpread(t *testing.T) {
	const slots = 65536
	vip4 := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.1"), 80)
	vip6 := netip.AddrPortFrom(netip.MustParseAddr("2001:db8:100::1"), 443)
	sets := map[string]func(i int) xlbFlowKey{
		"ports of one IPv4 client": func(i int) xlbFlowKey {
			k, _ := wireKey(netip.AddrPortFrom(netip.MustParseAddr("198.19.0.1"), uint16(1024+i)), vip4, datapath.TCP)
			return k
		},
		"addresses of a /18": func(i int) xlbFlowKey {
			a := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
			k, _ := wireKey(netip.AddrPortFrom(a, 40000), vip4, datapath.TCP)
			return k
		},
		"ports of one IPv6 client": func(i int) xlbFlowKey {
			k, _ := wireKey(netip.AddrPortFrom(netip.MustParseAddr("2001:db8:5::7"), uint16(1024+i)), vip6, datapath.TCP)
			return k
		},
	}
	for name, key := range sets {
		for _, seed := range []uint32{0, 0x5eed1234} {
			used := map[uint32]bool{}
			var top [16]int
			for i := range 16384 {
				k := key(i)
				h := tupleHash(&k, seed)
				used[h&(slots-1)] = true
				top[h>>28]++
			}
			if len(used) < 13500 {
				t.Errorf("%s, seed %#x: %d slots used, want about 14,497 (random tuples)", name, seed, len(used))
			}
			for b, n := range top {
				if n < 850 || n > 1200 {
					t.Errorf("%s, seed %#x: live-flow bit %d taken by %d tuples, want about 1,024", name, seed, b, n)
				}
			}
		}
	}
}

// awaitClock returns once the boot-relative clock the datapath stamps with reads at least d:
// at once on a host up for longer, after up to d in a test guest booted seconds ago. A test that
// needs a time d in the past (an entry "last seen at the clock's zero" and older than its
// timeout) calls it rather than subtract d from now, which would wrap below zero.
func awaitClock(t *testing.T, d time.Duration) {
	t.Helper()
	if now := time.Duration(monotonicNow()); now < d {
		t.Logf("the clock reads %v since boot: waiting %v", now, d-now)
		time.Sleep(d - now)
	}
}

// stampBack returns datapath time stamp moved back by d, so that its entry looks idle for d
// more. A stamp less than d after the clock's zero (a host or test guest booted less than d ago)
// cannot move back that far without wrapping into the future, where the datapath counts it live:
// stampBack then waits until the clock has moved d past the stamp (at most d) and returns the
// clock's zero, which is then at least d before now.
func stampBack(t *testing.T, stamp uint64, d time.Duration) uint64 {
	t.Helper()
	if stamp >= uint64(d) {
		return stamp - uint64(d) // clock-ok: checked not to wrap
	}
	wait := d - time.Duration(stamp)
	t.Logf("a stamp %v after boot cannot move %v back: waiting %v", time.Duration(stamp), d, wait)
	time.Sleep(wait)
	return 0
}
