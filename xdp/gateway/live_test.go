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

// TestSynSeen: a handshake slot's coarse SYN time reads back as a clock reading no later than
// now and less than one unit (2^hsTimeShift ns) before the SYN; a time a little after now (another
// CPU) reads as now, as the datapath counts it fresh.
func TestSynSeen(t *testing.T) {
	const unit = 1 << hsTimeShift
	now := uint64(5_000_000_000_000) // about 83 minutes of uptime
	for _, ago := range []uint64{0, 1, unit - 1, unit, 59 * 1_000_000_000, 3600 * 1_000_000_000} {
		syn := now - ago
		got := synSeen(uint32(syn>>hsTimeShift), now)
		if got > syn || syn-got >= unit {
			t.Errorf("a SYN %d ns ago reads back as %d ns ago", ago, now-got)
		}
	}
	if got := synSeen(uint32(now>>hsTimeShift)+100, now); got != now {
		t.Errorf("a SYN time 100 units after now reads back as %d ns before now, want now", now-got)
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
