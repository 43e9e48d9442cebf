// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// udpCases are hsCases for the families' DNS VIPs (services): X the VIP's own backend (the only
// one in its table at first), Y a backend that a table change gives every slot to.
func udpCases() []hsCase {
	return []hsCase{
		{"ipv4", client4, 2, ap(vip4, 53), 2, 21, ap(be2v4, 5353), ap(be1v4, 5353), macBE2, macBE1,
			datapath.Backend{Addr: be1v4, Port: 5353}},
		{"ipv6", client6, 5, ap(vip6, 53), 5, 22, ap(be2v6, 5353), ap(be1v6, 5353), macBE2, macBE1,
			datapath.Backend{Addr: be1v6, Port: 5353}},
	}
}

// udp returns a client -> VIP datagram of c and the same datagram as backend to (MAC mac) gets it.
func (c hsCase) udp(cport uint16, to netip.AddrPort, mac string) (pk, pk) {
	in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(c.client, cport), Dst: c.vipAddr,
		Proto: layers.IPProtocolUDP, Payload: []byte("q")}
	out := in
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, mac, to, 63
	return in, out
}

// slotOf returns the handshake slot of the tuple client:cport -> vip, proto in d's table.
func slotOf(d *Datapath, client netip.Addr, cport uint16, vip netip.AddrPort, proto datapath.Protocol) uint32 {
	k := forwardKey(client, cport, vip, proto)
	s, _ := liveSlot(&k, uint32(d.opts.Seed), d.live.slots, 0)
	return s
}

// udpPortOn returns a client port above from whose datagram to c's VIP falls on slot s.
func udpPortOn(t *testing.T, c hsCase, d *Datapath, s uint32, from uint16) uint16 {
	t.Helper()
	for p := from + 1; p < 65535; p++ {
		if slotOf(d, c.client, p, c.vipAddr, datapath.UDP) == s {
			return p
		}
	}
	t.Fatalf("no client port above %d falls on slot %d", from, s)
	return 0
}

// TestGoldenUDPFirstDatagram: a datagram flow's first datagram is recorded in its tuple's
// handshake slot, not in conntrack; the second goes where the first went, even across a change
// of the VIP's Maglev table, creates the conntrack entry and empties the slot; the third is
// conntrack's. A flood of one datagram per tuple is balanced, counted as new flows, and leaves
// conntrack alone. IPv4 and IPv6.
func TestGoldenUDPFirstDatagram(t *testing.T) {
	for _, c := range udpCases() {
		t.Run(c.name, func(t *testing.T) {
			// The default table: 300 one-shot flows over 65,536 slots.
			g := caseGW(t, c, datapath.Settings{})
			d := g.dp

			q, qToX := c.udp(7000, c.toX, c.macX)
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			if n := countEntries(t, d.objs.Conntrack); n != 0 {
				t.Fatalf("the first datagram made %d conntrack entries, want 0", n)
			}
			if e, ok := handshakes(t, d)[q.Src]; !ok || e.Key.Proto != uint8(datapath.UDP) || e.BackendId != uint32(c.x) || e.VipId != uint32(c.vip) {
				t.Fatalf("the first datagram's slot: %+v (found %v), want a UDP entry naming backend %d", e, ok, c.x)
			}

			// Every slot of the table moves to Y: the second datagram still goes to X.
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			flows, err := d.Flows()
			must(t, err)
			if len(flows) != 1 || flows[0].Backend != c.x || flows[0].Src != q.Src || flows[0].Proto != datapath.UDP {
				t.Fatalf("conntrack after the second datagram: %+v, want the flow on backend %d", flows, c.x)
			}
			if _, ok := handshakes(t, d)[q.Src]; ok {
				t.Fatal("the second datagram left the first's entry in its slot")
			}
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			if tr, _ := g.traffic(t, c.vip); tr.Packets != 3 || tr.NewFlows != 1 {
				t.Fatalf("VIP traffic %+v, want 3 packets of 1 new flow", tr)
			}

			// A flood of one-shot datagrams: each balanced by the table, none in conntrack.
			for i := range 300 {
				f, fToY := c.udp(uint16(20000+i), c.toY, c.macY)
				g.expect(t, f.bytes(t), g.ext, want{xdpRedirect, fToY.bytes(t), fwd(ReasonFwdRedirect)})
			}
			// Only a flow whose slot an earlier one holds (a recent first datagram) goes into
			// conntrack at once: counted from the hashes (about one run in two has one).
			used, shared := map[uint32]bool{}, 0
			for i := range 300 {
				slot := slotOf(d, c.client, uint16(20000+i), c.vipAddr, datapath.UDP)
				if used[slot] {
					shared++
				}
				used[slot] = true
			}
			if n := countEntries(t, d.objs.Conntrack); n < 1 || n > 1+shared {
				t.Fatalf("conntrack after 300 one-shot datagrams: %d entries, want 1 (at most %d: %d flows found their slot held)", n, 1+shared, shared)
			}
			if tr, _ := g.traffic(t, c.vip); tr.NewFlows != 301 {
				t.Fatalf("VIP traffic %+v, want 301 new flows", tr)
			}
		})
	}
}

// TestGoldenUDPSlotSharing: what a datagram may do to a slot it shares. A fresh TCP handshake's
// entry is never taken over (a datagram flood must not cost a connection its SYN's record): the
// datagram goes into conntrack at once, and the handshakes' ACKs (two, the second in the pair's
// other slot) still find their SYNs' backends; nor are the connections the slots then hold.
// A first datagram takes only its home slot: a second flow there within HS_DATAGRAM_HOLD_NS
// finds it held and goes into conntrack at once, so that flows sharing a slot cannot keep taking
// each other's entry (neither would ever reach its second datagram). A first datagram older than
// the hold may be taken over; its flow's next datagram is then balanced as a first one (by the
// table: the same backend here). A first datagram older than the UDP timeout is no first
// datagram: the next one starts over. IPv4 and IPv6.
func TestGoldenUDPSlotSharing(t *testing.T) {
	for _, c := range udpCases() {
		t.Run(c.name, func(t *testing.T) {
			g := newGW(t, Options{Settings: datapath.Settings{HandshakeSize: 256, UDPTimeout: time.Second}})
			services(t, g)
			d := g.dp
			web := hsCases()[0] // the family's web VIP, whose handshake shares a datagram's slot
			if c.name == "ipv6" {
				web = hsCases()[1]
			}

			// Two handshakes in flight on the pair of home slot s (the second in the other
			// slot); a datagram of home slot s finds it held.
			const a = 30000
			s := slotOf(d, c.client, a, web.vipAddr, datapath.TCP)
			_, a2 := sharedSlot(t, web, d, a, false)
			for _, port := range []uint16{a, a2} {
				syn, synToX := web.tcp(port, "S", web.toX, web.macX)
				g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwd(ReasonFwdRedirect)})
			}
			b := udpPortOn(t, c, d, s, 7000)
			qb, qbToX := c.udp(b, c.toX, c.macX)
			g.expect(t, qb.bytes(t), g.ext, want{xdpRedirect, qbToX.bytes(t), fwd(ReasonFwdRedirect)})
			if n := countEntries(t, d.objs.Conntrack); n != 1 {
				t.Fatalf("a datagram on a fresh handshake's slot: %d conntrack entries, want 1 (its own)", n)
			}
			if hs := handshakes(t, d); len(hs) != 2 || hs[ap(web.client, a)].Key.Proto != uint8(datapath.TCP) ||
				hs[ap(web.client, a2)].Key.Proto != uint8(datapath.TCP) {
				t.Fatalf("the pair after the datagram: %+v, want the two SYNs' entries", hs)
			}
			for _, port := range []uint16{a, a2} {
				ack, ackToX := web.tcp(port, "A", web.toX, web.macX)
				g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToX.bytes(t), fwdHS(ReasonFwdRedirect)})
			}

			// The handshakes done, the pair holds the connections: a datagram does not take its
			// slot's either (it goes into conntrack at once).
			p0 := udpPortOn(t, c, d, s, b)
			q0, q0ToX := c.udp(p0, c.toX, c.macX)
			g.expect(t, q0.bytes(t), g.ext, want{xdpRedirect, q0ToX.bytes(t), fwd(ReasonFwdRedirect)})
			if n := countEntries(t, d.objs.Conntrack); n != 2 {
				t.Fatalf("a datagram on a connection's slot: %d conntrack entries, want 2", n)
			}
			if conns := slotConns(t, d); len(conns) != 2 {
				t.Fatalf("the pair after a datagram on it: %+v, want the two connections", conns)
			}

			// The connections flushed, the pair is empty: another flow's first datagram takes the
			// home slot, and a third flow's first datagram takes it over (a tie: the home slot).
			if n, err := d.FlushFlows(func(f datapath.Flow) bool { return f.InSlot }); err != nil || n != 2 {
				t.Fatalf("flush the connections in their slots: %d flushed, %v; want 2", n, err)
			}
			p1 := udpPortOn(t, c, d, s, p0)
			p2 := udpPortOn(t, c, d, s, p1)
			p3 := udpPortOn(t, c, d, s, p2)
			send := func(port uint16) {
				t.Helper()
				q, qToX := c.udp(port, c.toX, c.macX)
				g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			}
			entries := func(want int, why string) {
				t.Helper()
				if n := countEntries(t, d.objs.Conntrack); n != want {
					t.Fatalf("%s: %d conntrack entries, want %d", why, n, want)
				}
			}
			// setAge makes slot s's entry look as old as age (negative: ahead of the clock, which
			// counts as now for up to a second), whatever the time the test takes.
			setAge := func(age time.Duration) {
				t.Helper()
				var e xlbHsEntry
				must(t, d.objs.HsSlots.Lookup(s, &e))
				e.SynTime = uint32((int64(monotonicNow()) - int64(age)) >> hsTimeShift) // the check word does not cover it
				must(t, d.objs.HsSlots.Put(s, &e))
			}
			firstIs := func(port uint16, why string) {
				t.Helper()
				if hs := handshakes(t, d); len(hs) != 1 || hs[ap(c.client, port)].Key.Proto != uint8(datapath.UDP) {
					t.Fatalf("slot %d %s: %+v, want port %d's first datagram alone", s, why, hs, port)
				}
			}

			// The slot empty, a flow's first datagram takes it. A second flow within the hold
			// finds it held and goes into conntrack at once (two flows sharing a slot do not take
			// each other's entry in turn, each datagram a first one forever).
			send(p1)
			firstIs(p1, "after a first datagram")
			setAge(-500 * time.Millisecond)
			send(p2)
			entries(3, "a datagram on a recent first datagram's slot")
			firstIs(p1, "after a second flow's datagram")
			// A first datagram older than HS_DATAGRAM_HOLD_NS may be taken over: a third flow takes
			// p1's; p1's next datagram then finds the slot held and goes into conntrack at once.
			setAge(300 * time.Millisecond)
			send(p3)
			firstIs(p3, "after a third flow's datagram")
			entries(3, "a datagram taking over an older first datagram")
			setAge(-500 * time.Millisecond)
			send(p1)
			entries(4, "the taken-over flow's next datagram")

			// A first datagram older than the UDP timeout (1 s) is no first datagram: p3's next
			// datagram starts over, in its own slot.
			setAge(2 * time.Second)
			send(p3)
			entries(4, "a datagram after a stale first one")
			firstIs(p3, "after p3 started over")
			if tr, _ := g.traffic(t, c.vip); tr.NewFlows != 7 {
				t.Fatalf("VIP traffic %+v, want 7 new flows (b, p0, p1 to p3, p1 and p3 again)", tr)
			}
		})
	}
}

// TestGoldenUDPLiveFilter: a datagram that misses the flow cache asks the live-flow filter before
// conntrack. The second datagram, which creates the conntrack entry, sets the tuple's bit, so the
// flow's later datagrams (the flow cache emptied) find their entry and keep their backend across
// a table change. An entry the filter lacks (written behind the datapath's back) is not looked up
// — the datagram is balanced as a first one — until a rebuild of the filter adds its bit; a
// rebuild drops the bit of an entry idle past the UDP timeout. IPv4 and IPv6.
func TestGoldenUDPLiveFilter(t *testing.T) {
	for _, c := range udpCases() {
		t.Run(c.name, func(t *testing.T) {
			g := caseGW(t, c, datapath.Settings{UDPTimeout: 30 * time.Second})
			d := g.dp
			bit := func(cport uint16) bool {
				return liveBit(d, forwardKey(c.client, cport, c.vipAddr, datapath.UDP), d.live.half)
			}

			const a = 7100
			q, qToX := c.udp(a, c.toX, c.macX)
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			if bit(a) {
				t.Fatal("the first datagram set the bit (it writes no conntrack entry)")
			}
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})
			if !bit(a) {
				t.Fatal("the second datagram created the conntrack entry and left its bit clear")
			}
			must(t, d.SetMaglevTable(c.vip, table(13, c.y))) // also empties the flow caches
			g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qToX.bytes(t), fwd(ReasonFwdRedirect)})

			// An entry on X written behind the datapath's back: no bit, not looked up.
			const b = 7101
			kb := forwardKey(c.client, b, c.vipAddr, datapath.UDP)
			must(t, d.objs.Conntrack.Put(&kb, &xlbCtEntry{LastSeen: uint64(monotonicNow()), BackendId: uint32(c.x), VipId: uint32(c.vip), VipPort: htons(c.vipAddr.Port())}))
			qb, qbToY := c.udp(b, c.toY, c.macY)
			g.expect(t, qb.bytes(t), g.ext, want{xdpRedirect, qbToY.bytes(t), fwd(ReasonFwdRedirect)})
			must(t, d.rebuildLive())
			if !bit(b) {
				t.Fatal("the rebuild left the UDP entry's bit clear")
			}
			_, qbToX := c.udp(b, c.toX, c.macX)
			g.expect(t, qb.bytes(t), g.ext, want{xdpRedirect, qbToX.bytes(t), fwd(ReasonFwdRedirect)})

			// Idle past the UDP timeout: a rebuild drops the bit.
			var e xlbCtEntry
			must(t, d.objs.Conntrack.Lookup(&kb, &e))
			e.LastSeen = stampBack(t, e.LastSeen, 30*time.Second+liveSkew+10*time.Second)
			must(t, d.objs.Conntrack.Put(&kb, &e))
			must(t, d.rebuildLive())
			if bit(b) {
				t.Fatal("the rebuild kept the bit of a UDP entry idle past its timeout")
			}
		})
	}
}
