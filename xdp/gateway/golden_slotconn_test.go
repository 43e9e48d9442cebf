// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestGoldenSlotConnections: a completed handshake leaves its connection in its handshake slot
// instead of inserting into conntrack (docs/datapath.md, "Conntrack and the flood policy"), and
// the slot must then be everything conntrack was to it: its later packets — past the handshake's
// sequence window, after a table change, missing the flow cache — keep its backend; a forged SYN
// on its tuple keeps it too (ct_syn_kept) and leaves the slot alone; a FIN makes it closing; the
// flow listing shows it. A SYN of another tuple taking the slot over (both slots of the pair
// holding connections) first moves it into conntrack with its backend, VIP and closing state,
// and its packets keep their backend from there; a closing one quiet for a while is overwritten
// instead. A connection idle past its timeout is no
// connection: its next packet is balanced anew (ct_reselect) and recorded as a mid-flow pickup.
// IPv4 and IPv6.
func TestGoldenSlotConnections(t *testing.T) {
	const slots = 256
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			g := caseGW(t, c, datapath.Settings{HandshakeSize: slots, TCPEstablishedTimeout: 30 * time.Second})
			d := g.dp
			const a = 52000
			slotA, b := sharedSlot(t, c, d, a, false)

			// A's handshake on X: the slot holds the connection, conntrack nothing.
			c.handshake(t, g, a, 1000, c.toX, c.macX)
			synA, _ := c.tcp(a, "S", c.toX, c.macX)
			if n := countEntries(t, d.objs.Conntrack); n != 0 {
				t.Fatalf("the completed handshake made %d conntrack entries, want 0", n)
			}
			flows, err := d.Flows()
			must(t, err)
			if len(flows) != 1 || flows[0].Src != synA.Src || flows[0].Backend != c.x || flows[0].VIP != c.vip ||
				!flows[0].InSlot || flows[0].Closing || flows[0].Reverse {
				t.Fatalf("flows after the handshake: %+v, want A on backend %d in its slot", flows, c.x)
			}
			if n, err := d.FlowCount(); err != nil || n != 1 {
				t.Fatalf("flow count %d (%v), want 1", n, err)
			}

			// The table gives every slot to Y. A's data, far past the SYN's sequence number and
			// missing the flow cache, still goes to X, and is no handshake hit.
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			must(t, d.invalidateCaches())
			dataA, dataAToX := c.tcp(a, "A", c.toX, c.macX)
			dataA.Seq, dataAToX.Seq = 1001+0x60000000, 1001+0x60000000
			g.expect(t, dataA.bytes(t), g.ext, want{xdpRedirect, dataAToX.bytes(t), fwd(ReasonFwdRedirect)})

			// A forged SYN on A's tuple keeps A's backend, and the slot keeps the connection.
			spoof, spoofToX := c.tcp(a, "S", c.toX, c.macX)
			spoof.Seq, spoofToX.Seq = 0xdead, 0xdead
			g.expect(t, spoof.bytes(t), g.ext, want{xdpRedirect, spoofToX.bytes(t),
				map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTSYNKept: 1}})
			if conns := slotConns(t, d); len(conns) != 1 || conns[synA.Src].BackendId != uint32(c.x) || conns[synA.Src].Key.Pad[0] != hsStConn {
				t.Fatalf("the slot after a forged SYN: %+v, want A's connection on %d", conns, c.x)
			}

			// A's FIN: the connection is closing.
			finA, finAToX := c.tcp(a, "FA", c.toX, c.macX)
			finA.Seq, finAToX.Seq = 2000, 2000
			g.expect(t, finA.bytes(t), g.ext, want{xdpRedirect, finAToX.bytes(t), fwd(ReasonFwdRedirect)})
			flows, err = d.Flows()
			must(t, err)
			if len(flows) != 1 || !flows[0].Closing || !flows[0].InSlot {
				t.Fatalf("flows after A's FIN: %+v, want A closing, in its slot", flows)
			}

			// Z, of the same home slot, completes its handshake (on Y) in the pair's other slot.
			// Then B's SYN (to Y), both slots holding connections, takes the home slot: A moves
			// into conntrack, closing, on X.
			_, z := sharedSlot(t, c, d, b, false)
			c.handshake(t, g, z, 0, c.toY, c.macY)
			synB, synBToY := c.tcp(b, "S", c.toY, c.macY)
			g.expect(t, synB.bytes(t), g.ext, want{xdpRedirect, synBToY.bytes(t), fwd(ReasonFwdRedirect)})
			var ce xlbCtEntry
			k := hsKey(c, a)
			must(t, d.objs.Conntrack.Lookup(&k, &ce))
			if ce.BackendId != uint32(c.x) || ce.VipId != uint32(c.vip) || ce.Flags != ctFlagClosing || ce.VipPort != k.Dport {
				t.Fatalf("A's conntrack entry after B's SYN: %+v, want backend %d, VIP %d, closing", ce, c.x, c.vip)
			}
			if now := monotonicNow(); ce.LastSeen > now || now-ce.LastSeen > uint64(2*time.Second) {
				t.Fatalf("A's conntrack entry was last seen %d ns before now, want its slot's time", now-ce.LastSeen)
			}
			if hs := handshakes(t, d); len(hs) != 1 || hs[synB.Src].BackendId != uint32(c.y) {
				t.Fatalf("the slot after B's SYN: %+v, want B's handshake", hs)
			}
			flows, err = d.Flows()
			must(t, err)
			slices.SortFunc(flows, func(x, y datapath.Flow) int { return cmp.Compare(x.Src.Port(), y.Src.Port()) })
			if len(flows) != 2 || flows[0].Src != synA.Src || flows[0].InSlot || !flows[0].Closing ||
				flows[1].Src.Port() != z || !flows[1].InSlot || flows[1].Closing {
				t.Fatalf("flows after B's SYN: %+v, want A in conntrack, closing, and Z in its slot", flows)
			}
			must(t, d.invalidateCaches())
			lastA, lastAToX := c.tcp(a, "A", c.toX, c.macX)
			lastA.Seq, lastAToX.Seq = 2001, 2001
			g.expect(t, lastA.bytes(t), g.ext, want{xdpRedirect, lastAToX.bytes(t), fwd(ReasonFwdRedirect)})

			// B's handshake completes on Y; its slot connection goes idle past the established
			// timeout: its next packet is balanced anew (the table: X), a mid-flow pickup into
			// conntrack, and the slot is emptied.
			ackB, ackBToY := c.tcp(b, "A", c.toY, c.macY)
			g.expect(t, ackB.bytes(t), g.ext, want{xdpRedirect, ackBToY.bytes(t), fwdHS(ReasonFwdRedirect)})
			must(t, d.SetMaglevTable(c.vip, table(13, c.x)))
			var e xlbHsEntry
			must(t, d.objs.HsSlots.Lookup(slotA, &e))
			e.SynTime -= uint32(40 * time.Second >> hsTimeShift) // the check word does not cover it
			must(t, d.objs.HsSlots.Put(slotA, &e))
			must(t, d.invalidateCaches())
			dataB, dataBToX := c.tcp(b, "A", c.toX, c.macX)
			dataB.Seq, dataBToX.Seq = 0x50000000, 0x50000000
			g.expect(t, dataB.bytes(t), g.ext, want{xdpRedirect, dataBToX.bytes(t),
				map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTReselect: 1}})
			k = hsKey(c, b)
			must(t, d.objs.Conntrack.Lookup(&k, &ce))
			if ce.BackendId != uint32(c.x) {
				t.Fatalf("B's conntrack entry after its idle slot: %+v, want backend %d", ce, c.x)
			}
			if conns := slotConns(t, d); len(conns) != 1 {
				t.Fatalf("connections in slots after the pickup: %+v, want Z's alone", conns)
			}

			// A closing connection quiet for longer than HS_CLOSING_PROMOTE_NS is not worth
			// conntrack: the next SYN on its pair takes its slot rather than Z's, and does not
			// move it into conntrack.
			_, p := sharedSlot(t, c, d, z, false)
			_, q := sharedSlot(t, c, d, p, false)
			c.handshake(t, g, p, 0, c.toX, c.macX)
			finP, finPToX := c.tcp(p, "FA", c.toX, c.macX)
			g.expect(t, finP.bytes(t), g.ext, want{xdpRedirect, finPToX.bytes(t), fwd(ReasonFwdRedirect)})
			must(t, d.objs.HsSlots.Lookup(slotA, &e))
			e.SynTime -= uint32(3 * time.Second >> hsTimeShift)
			must(t, d.objs.HsSlots.Put(slotA, &e))
			before := countEntries(t, d.objs.Conntrack)
			synQ, synQToX := c.tcp(q, "S", c.toX, c.macX)
			g.expect(t, synQ.bytes(t), g.ext, want{xdpRedirect, synQToX.bytes(t), fwd(ReasonFwdRedirect)})
			if n := countEntries(t, d.objs.Conntrack); n != before {
				t.Fatalf("a SYN on the slot of a closing connection quiet for 3 s moved it into conntrack (%d entries, was %d)", n, before)
			}
			if hs := handshakes(t, d); len(hs) != 1 || hs[synQ.Src].BackendId != uint32(c.x) {
				t.Fatalf("the slot after Q's SYN: %+v, want Q's handshake", hs)
			}
			if conns := slotConns(t, d); len(conns) != 1 {
				t.Fatalf("connections in slots after Q's SYN: %+v, want Z's alone", conns)
			}
		})
	}
}
