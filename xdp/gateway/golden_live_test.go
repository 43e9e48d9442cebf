// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// liveBitSet reports whether the live-flow filter's half (0 or 1) has the bit of the forward
// TCP tuple client:cport -> vip.
func liveBitSet(t *testing.T, d *Datapath, c hsCase, cport uint16, half uint32) bool {
	t.Helper()
	return liveBit(d, hsKey(c, cport), half)
}

// liveBit reports whether the live-flow filter's half (0 or 1) has the bit of flow key k.
func liveBit(d *Datapath, k xlbFlowKey, half uint32) bool {
	slot, mask := liveSlot(&k, uint32(d.opts.Seed), d.live.slots, half)
	return d.live.bits(slot)&mask != 0
}

// TestGoldenLiveFilter: a TCP packet that creates a conntrack entry (here a mid-flow pickup: an
// ACK whose handshake this gateway did not see) sets the tuple's bit in both halves of the
// live-flow filter, at the bit the loader computes (a SYN of a tuple without one skips the
// conntrack lookup); a rebuild keeps a live entry's bit, so a forged SYN on the tuple still keeps
// the flow's backend (ct_syn_kept) after the table changed. An entry idle past its timeout loses
// its bit in the next rebuild: a SYN on it is balanced by the current table without asking
// conntrack, and its ACK follows the SYN (the handshake table) without asking conntrack either:
// the new connection lives in its slot, and is the tuple's flow from then on. IPv4 and IPv6.
func TestGoldenLiveFilter(t *testing.T) {
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			// A short established timeout: the machine may have been up for less than the default.
			g := caseGW(t, c, datapath.Settings{TCPEstablishedTimeout: 30 * time.Second})
			d := g.dp
			const live, idle = 46000, 46001
			for _, port := range []uint16{live, idle} {
				if liveBitSet(t, d, c, port, 0) || liveBitSet(t, d, c, port, 1) {
					t.Fatalf("port %d: bit set before any packet", port)
				}
				ack, ackToX := c.tcp(port, "A", c.toX, c.macX)
				g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToX.bytes(t), fwd(ReasonFwdRedirect)})
				if !liveBitSet(t, d, c, port, 0) || !liveBitSet(t, d, c, port, 1) {
					t.Fatalf("port %d: the ACK that created the conntrack entry left its bit clear", port)
				}
			}

			// The idle flow looks idle past the established timeout; the live one stays fresh.
			ageOne(t, d, c, idle, 30*time.Second+liveSkew+10*time.Second)
			half := d.live.half
			must(t, d.rebuildLive())
			if d.live.half == half {
				t.Fatal("the rebuild did not switch halves")
			}
			if !liveBitSet(t, d, c, live, d.live.half) {
				t.Fatal("the rebuild dropped the live flow's bit")
			}
			if liveBitSet(t, d, c, idle, d.live.half) {
				t.Fatal("the rebuild kept the bit of a flow idle past its timeout")
			}

			// The table gives every slot to Y. A forged SYN on the live tuple still goes to X.
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			spoof, spoofToX := c.tcp(live, "S", c.toX, c.macX)
			spoof.Seq, spoofToX.Seq = 0xdead, 0xdead
			g.expect(t, spoof.bytes(t), g.ext, want{xdpRedirect, spoofToX.bytes(t),
				map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTSYNKept: 1}})

			// A SYN on the idle tuple is a new connection on Y; its ACK follows it, and the
			// connection lives in its slot (the idle entry, never asked, is not its flow).
			c.handshake(t, g, idle, 500, c.toY, c.macY)
			must(t, d.invalidateCaches()) // the next packet reads the slot, not the flow cache
			data, dataToY := c.tcp(idle, "A", c.toY, c.macY)
			data.Seq, dataToY.Seq = 0x70000000, 0x70000000 // far past the SYN's: not the handshake
			g.expect(t, data.bytes(t), g.ext, want{xdpRedirect, dataToY.bytes(t), fwd(ReasonFwdRedirect)})
			flows, err := d.Flows()
			must(t, err)
			n := 0
			for _, f := range flows {
				if f.Src.Port() == idle {
					n++
					if f.Backend != c.y || !f.InSlot {
						t.Fatalf("the idle tuple's flow after the new handshake: %+v, want backend %d, in its slot", f, c.y)
					}
				}
			}
			if n != 1 {
				t.Fatalf("the idle tuple has %d flows listed, want 1: %+v", n, flows)
			}
		})
	}
}

// ageOne makes the conntrack entry of client:cport -> c's VIP look idle for age.
func ageOne(t *testing.T, d *Datapath, c hsCase, cport uint16, age time.Duration) {
	t.Helper()
	k := hsKey(c, cport)
	var e xlbCtEntry
	must(t, d.objs.Conntrack.Lookup(&k, &e))
	e.LastSeen = stampBack(t, e.LastSeen, age)
	must(t, d.objs.Conntrack.Put(&k, &e))
	must(t, d.invalidateCaches())
}

// TestGoldenLiveBitsInSlot: the live-flow filter's bits live in the handshake slots, which the
// handshakes themselves keep changing. A completed handshake leaves its connection in the slot,
// with no conntrack entry and so no bit; another tuple's SYN taking the slot over (both slots of
// its pair holding connections) moves it into conntrack (hs_promote) and sets its bit, which must
// survive that SYN's write and a flush of the handshakes, or a SYN on the live tuple would skip
// conntrack and lose its flow's backend (ct_syn_kept). The slot's SYN time, kept in coarse 32-bit units, reads back as the SYN's clock.
// IPv4 and IPv6.
func TestGoldenLiveBitsInSlot(t *testing.T) {
	const slots = 256
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			g := hsGW(t, c, slots)
			d := g.dp
			// A and B share a slot and have different bits in it.
			const a = 51000
			slotA, b := sharedSlot(t, c, d, a, true)
			synA, synAToX := c.tcp(a, "S", c.toX, c.macX)
			g.expect(t, synA.bytes(t), g.ext, want{xdpRedirect, synAToX.bytes(t), fwd(ReasonFwdRedirect)})
			var e xlbHsEntry
			must(t, d.objs.HsSlots.Lookup(slotA, &e))
			if age := slotAge(e.SynTime, monotonicNow()); age > time.Second {
				t.Errorf("the SYN's slot time reads back as %v before now", age)
			}
			ackA, ackAToX := c.tcp(a, "A", c.toX, c.macX)
			g.expect(t, ackA.bytes(t), g.ext, want{xdpRedirect, ackAToX.bytes(t), fwdHS(ReasonFwdRedirect)})
			check := func(when string) {
				t.Helper()
				if !liveBitSet(t, d, c, a, 0) || !liveBitSet(t, d, c, a, 1) {
					t.Fatalf("%s: A's live-flow filter bit is gone", when)
				}
			}
			if liveBitSet(t, d, c, a, 0) || countEntries(t, d.objs.Conntrack) != 0 {
				t.Fatal("A's ACK made a conntrack entry (its connection belongs in its slot)")
			}
			// A third tuple of the same home slot: its connection takes the pair's other slot.
			_, b2 := sharedSlot(t, c, d, b, false)
			c.handshake(t, g, b2, 0, c.toX, c.macX)
			if conns := slotConns(t, d); len(conns) != 2 || countEntries(t, d.objs.Conntrack) != 0 {
				t.Fatalf("connections in slots: %+v, want A's and the third tuple's, no conntrack entry", conns)
			}
			synB, synBToX := c.tcp(b, "S", c.toX, c.macX)
			g.expect(t, synB.bytes(t), g.ext, want{xdpRedirect, synBToX.bytes(t), fwd(ReasonFwdRedirect)})
			check("after B's SYN took the slot over (A moved into conntrack)")
			if liveBitSet(t, d, c, b, 0) {
				t.Fatal("B's SYN set its own bit (a SYN makes no conntrack entry)")
			}
			if _, err := d.FlushFlows(func(f datapath.Flow) bool { return f.Src.Port() == b }); err != nil {
				t.Fatal(err)
			}
			check("after B's handshake was flushed")
			if hs := handshakes(t, d); len(hs) != 0 {
				t.Fatalf("handshake table after the flush: %+v", hs)
			}
			// The table moves every tuple to Y: a forged SYN on A's tuple still finds its bit,
			// asks conntrack and keeps A's backend.
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			spoof, spoofToX := c.tcp(a, "S", c.toX, c.macX)
			spoof.Seq, spoofToX.Seq = 0xdead, 0xdead
			g.expect(t, spoof.bytes(t), g.ext, want{xdpRedirect, spoofToX.bytes(t),
				map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTSYNKept: 1}})
		})
	}
}
