// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// forwardKey is the forward flow key of client:cport -> vip, proto.
func forwardKey(client netip.Addr, cport uint16, vip netip.AddrPort, proto datapath.Protocol) xlbFlowKey {
	src, fam := toWire(client)
	dst, _ := toWire(vip.Addr())
	k := xlbFlowKey{Sport: htons(cport), Dport: htons(vip.Port()), Proto: uint8(proto), Family: fam}
	k.Src.W, k.Dst.W = src.W, dst.W
	return k
}

// hsKey is the forward flow key of client:cport -> c's VIP, TCP.
func hsKey(c hsCase, cport uint16) xlbFlowKey {
	return forwardKey(c.client, cport, c.vipAddr, datapath.TCP)
}

// caseGW is a gateway with settings s, the services, and c's backend Y.
func caseGW(t *testing.T, c hsCase, s datapath.Settings) *gw {
	g := newGW(t, Options{Settings: s})
	services(t, g)
	must(t, g.dp.UpsertBackend(c.y, c.setupBackend))
	return g
}

// hsGW is caseGW with a handshake table of slots slots.
func hsGW(t *testing.T, c hsCase, slots uint32) *gw {
	return caseGW(t, c, datapath.Settings{HandshakeSize: slots})
}

// sharedSlot returns the handshake slot of client port a's tuple to c's VIP and another client
// port whose tuple falls on the same slot of d's table (with another live-flow filter bit there
// when otherBit).
func sharedSlot(t *testing.T, c hsCase, d *Datapath, a uint16, otherBit bool) (uint32, uint16) {
	t.Helper()
	seed := uint32(d.opts.Seed)
	ka := hsKey(c, a)
	slotA, maskA := liveSlot(&ka, seed, d.live.slots, 0)
	for p := a + 1; p < 65535; p++ {
		kb := hsKey(c, p)
		if s, m := liveSlot(&kb, seed, d.live.slots, 0); s == slotA && (!otherBit || m != maskA) {
			return slotA, p
		}
	}
	t.Fatalf("no client port shares port %d's slot", a)
	return 0, 0
}

// TestGoldenHandshakeSlots: the handshake table is a table of two-slot pairs, so what a hostile
// client can do to it is bounded by what a pair holds. Tuples whose hashes share a home slot: the
// second SYN takes the pair's other slot (an empty slot costs nothing to take, a fresh handshake
// its record); the third, both slots holding fresh handshakes, takes the home slot over, and the
// first tuple's ACK, finding no entry of its own, is balanced by the current table (not sent to
// another SYN's backend) and recorded as a mid-flow pickup. An entry whose check word does not
// match its fields (two SYNs writing the slot at once, or anything else than the datapath's own
// write) is no entry: an ACK cannot be steered by it. A completed handshake leaves its connection
// in its slot. IPv4 and IPv6.
func TestGoldenHandshakeSlots(t *testing.T) {
	const slots = 256
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			g := hsGW(t, c, slots)
			d := g.dp
			// Three client ports whose tuples have one home slot.
			const a = 50000
			slotA, b := sharedSlot(t, c, d, a, false)
			_, b2 := sharedSlot(t, c, d, b, false)

			// A's SYN goes to X; the table then moves every tuple to Y; B's SYN (to Y) takes
			// the pair's other slot.
			synA, synAToX := c.tcp(a, "S", c.toX, c.macX)
			g.expect(t, synA.bytes(t), g.ext, want{xdpRedirect, synAToX.bytes(t), fwd(ReasonFwdRedirect)})
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			synB, synBToY := c.tcp(b, "S", c.toY, c.macY)
			g.expect(t, synB.bytes(t), g.ext, want{xdpRedirect, synBToY.bytes(t), fwd(ReasonFwdRedirect)})
			var e xlbHsEntry
			must(t, d.objs.HsSlots.Lookup(slotA^1, &e))
			if hs := handshakes(t, d); len(hs) != 2 || hs[synA.Src].BackendId != uint32(c.x) ||
				e.BackendId != uint32(c.y) || e.Key.Sport != htons(b) {
				t.Fatalf("handshake table after the second SYN: %+v (slot %d: %+v), want A's entry at home and B's beside it", hs, slotA^1, e)
			}
			// C's SYN: both slots hold fresh handshakes; it takes the home slot, A's.
			synC, synCToY := c.tcp(b2, "S", c.toY, c.macY)
			g.expect(t, synC.bytes(t), g.ext, want{xdpRedirect, synCToY.bytes(t), fwd(ReasonFwdRedirect)})
			if hs := handshakes(t, d); len(hs) != 2 || hs[synB.Src].BackendId != uint32(c.y) || hs[synC.Src].BackendId != uint32(c.y) {
				t.Fatalf("handshake table after the third SYN: %+v, want B's and C's entries", hs)
			}
			// A's ACK finds no entry of its own: Maglev (Y) and a mid-flow pickup, and the
			// entries stay.
			ackA, ackAToY := c.tcp(a, "A", c.toY, c.macY)
			g.expect(t, ackA.bytes(t), g.ext, want{xdpRedirect, ackAToY.bytes(t), fwd(ReasonFwdRedirect)})
			if hs := handshakes(t, d); len(hs) != 2 {
				t.Fatalf("A's ACK changed the pair's handshake entries: %+v", hs)
			}

			// A slot whose check word does not match: C's entry, its backend changed to X.
			must(t, d.objs.HsSlots.Lookup(slotA, &e))
			e.BackendId = uint32(c.x)
			must(t, d.objs.HsSlots.Put(slotA, &e))
			r0 := g.reasons(t)
			ackC, ackCToY := c.tcp(b2, "A", c.toY, c.macY)
			g.expect(t, ackC.bytes(t), g.ext, want{xdpRedirect, ackCToY.bytes(t), fwd(ReasonFwdRedirect)})
			if r := g.reasons(t); r[ReasonHandshakeHit] != r0[ReasonHandshakeHit] {
				t.Fatal("an entry with a wrong check word was taken")
			}

			// A flush empties the slots; a new handshake on C's tuple writes its home slot
			// again, and the ACK that completes it leaves the connection there (no conntrack
			// entry).
			if _, err := d.FlushFlows(nil); err != nil {
				t.Fatal(err)
			}
			if hs := handshakes(t, d); len(hs) != 0 {
				t.Fatalf("handshake table after a flush: %+v", hs)
			}
			g.expect(t, synC.bytes(t), g.ext, want{xdpRedirect, synCToY.bytes(t), fwd(ReasonFwdRedirect)})
			g.expect(t, ackC.bytes(t), g.ext, want{xdpRedirect, ackCToY.bytes(t), fwdHS(ReasonFwdRedirect)})
			must(t, d.objs.HsSlots.Lookup(slotA, &e))
			if e.Key.Pad[0] != hsStConn || e.BackendId != uint32(c.y) || e.Key.Sport != htons(b2) {
				t.Fatalf("slot %d after the completed handshake: %+v, want C's connection on Y", slotA, e)
			}
			if n := countEntries(t, d.objs.Conntrack); n != 0 {
				t.Fatalf("the completed handshake made %d conntrack entries, want 0", n)
			}
		})
	}
}
