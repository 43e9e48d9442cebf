package xdp

import (
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
