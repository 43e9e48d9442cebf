// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestGoldenSpoofedSYNKeepsFlow: a SYN on the tuple of a live flow (one forged by someone who
// guessed it) goes to the flow's backend, which answers it with a challenge ACK (RFC 5961), and
// the flow stays where it is, even after the VIP's table changed. Once the flow is closing, a
// SYN on its tuple is a new connection: balanced again by the current table.
func TestGoldenSpoofedSYNKeepsFlow(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	d := g.dp
	must(t, d.UpsertBackend(11, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.UpsertBackend(12, datapath.Backend{Addr: be2v4, Port: 8080}))
	must(t, d.SetMaglevTable(1, table(13, 11)))
	syn, toBE1 := clientTCP(45000, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	ack, ackToBE1 := clientTCP(45000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE1.bytes(t), fwdHS(ReasonFwdRedirect)})

	// The table moves the tuple to backend 12; a forged SYN on it still goes to backend 11.
	must(t, d.SetMaglevTable(1, table(13, 12)))
	spoof := syn
	spoof.Seq = 0xdead
	spoofOut := toBE1
	spoofOut.Seq = 0xdead
	g.expect(t, spoof.bytes(t), g.ext, want{xdpRedirect, spoofOut.bytes(t),
		map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTSYNKept: 1}})
	flows, err := d.Flows()
	must(t, err)
	if len(flows) != 1 || flows[0].Backend != 11 || flows[0].Closing {
		t.Fatalf("conntrack after the forged SYN: %+v, want the flow on backend 11, not closing", flows)
	}
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE1.bytes(t), fwd(ReasonFwdRedirect)})

	// Closed and quiet past the closing timeout: a SYN on the tuple is a new connection, on
	// the current table's backend.
	fin, finOut := clientTCP(45000, ap(vip4, 80), "FA", ap(be1v4, 8080), macBE1)
	g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, finOut.bytes(t), fwd(ReasonFwdRedirect)})
	ageSlotConn(t, g, syn, datapath.DefaultTCPClosingTimeout+time.Second)
	_, toBE2 := clientTCP(45000, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE2.bytes(t), fwd(ReasonFwdRedirect)})
}

// ageSlotConn makes the connection of p's tuple that its handshake slot holds quiet for age
// longer (its time is in the slot's wrapping units: no clock reading goes below zero).
func ageSlotConn(t *testing.T, g *gw, p pk, age time.Duration) {
	t.Helper()
	d := g.dp
	k := forwardKey(p.Src.Addr(), p.Src.Port(), p.Dst, datapath.TCP)
	found := false
	must(t, walkHandshakes(d.objs.HsSlots, func(i uint32, e *xlbHsEntry) {
		if e.Key.Family == 0 || e.Key.Pad[0]&hsStConn == 0 {
			return
		}
		key := e.Key
		key.Pad = [2]uint8{}
		if key != k {
			return
		}
		e.SynTime -= uint32(age >> hsTimeShift) // the check word does not cover it
		must(t, d.objs.HsSlots.Put(i, e))
		found = true
	}))
	if !found {
		t.Fatalf("no connection of %s -> %s in the handshake table", p.Src, p.Dst)
	}
	must(t, d.invalidateCaches())
}

// ageConntrack makes the conntrack entry of p's flow quiet for age longer (stampBack: on a host
// booted less than age ago it waits).
func ageConntrack(t *testing.T, g *gw, p pk, age time.Duration) {
	t.Helper()
	d := g.dp
	k := forwardKey(p.Src.Addr(), p.Src.Port(), p.Dst, datapath.TCP)
	var ce xlbCtEntry
	must(t, d.objs.Conntrack.Lookup(&k, &ce))
	ce.LastSeen = stampBack(t, ce.LastSeen, age)
	must(t, d.objs.Conntrack.Put(&k, &ce))
	must(t, d.invalidateCaches())
}

// TestGoldenForgedRSTThenSYNKeepsFlow: a RST (or FIN) marks a connection closing whatever its
// sequence number: the gateway cannot know the backend's window, and the backend ignores a
// forged one out of it (RFC 5961). So a SYN on the tuple of a closing connection, within the
// closing timeout, still goes to the connection's backend, which answers a forged one with a
// challenge ACK, and makes the connection live again: a forged RST followed by a forged SYN does
// not move it, even after the VIP's table changed, whether the connection lives in its handshake
// slot or in conntrack. Quiet past the closing timeout, the tuple is balanced by the table again.
func TestGoldenForgedRSTThenSYNKeepsFlow(t *testing.T) {
	for _, c := range []struct {
		name  string
		slot  bool   // the connection opened with a handshake this gateway saw (its slot holds it)
		flags string // what the forger sends first
	}{
		{"slot/RST", true, "R"},
		{"slot/FIN", true, "FA"},
		{"conntrack/RST", false, "R"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGW(t, Options{Settings: datapath.Settings{TCPClosingTimeout: time.Second}})
			services(t, g)
			d := g.dp
			must(t, d.UpsertBackend(11, datapath.Backend{Addr: be1v4, Port: 8080}))
			must(t, d.UpsertBackend(12, datapath.Backend{Addr: be2v4, Port: 8080}))
			must(t, d.SetMaglevTable(1, table(13, 11)))
			const port = 45100
			ack, ackToBE1 := clientTCP(port, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
			ack.Seq, ackToBE1.Seq = 1001, 1001
			if c.slot {
				syn, toBE1 := clientTCP(port, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
				syn.Seq, toBE1.Seq = 1000, 1000
				g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
				g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE1.bytes(t), fwdHS(ReasonFwdRedirect)})
			} else {
				// A flow this gateway picks up mid-way (ECMP moved it here): conntrack.
				g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE1.bytes(t), fwd(ReasonFwdRedirect)})
			}
			flow := func() datapath.Flow {
				t.Helper()
				flows, err := d.Flows()
				must(t, err)
				if len(flows) != 1 || flows[0].InSlot != c.slot || flows[0].Backend != 11 {
					t.Fatalf("flows: %+v, want one on backend 11 (in its slot: %v)", flows, c.slot)
				}
				return flows[0]
			}
			flow()

			// The table moves the tuple to backend 12. The forger's packet, any sequence
			// number, goes to the flow's backend (which ignores it) and marks it closing.
			must(t, d.SetMaglevTable(1, table(13, 12)))
			forged, forgedOut := clientTCP(port, ap(vip4, 80), c.flags, ap(be1v4, 8080), macBE1)
			forged.Seq, forgedOut.Seq = 0xdead0000, 0xdead0000
			g.expect(t, forged.bytes(t), g.ext, want{xdpRedirect, forgedOut.bytes(t), fwd(ReasonFwdRedirect)})
			if f := flow(); !f.Closing {
				t.Fatalf("flow after the forged %s: %+v, want closing", c.flags, f)
			}

			// The forged SYN: still backend 11 (its challenge ACK answers the forger), and the
			// connection is live again.
			spoof, spoofOut := clientTCP(port, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
			spoof.Seq, spoofOut.Seq = 0xbad, 0xbad
			g.expect(t, spoof.bytes(t), g.ext, want{xdpRedirect, spoofOut.bytes(t),
				map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonCTSYNKept: 1}})
			if f := flow(); f.Closing {
				t.Fatalf("flow after the forged SYN: %+v, want live (not closing)", f)
			}
			// The victim's next segment follows its connection.
			data, dataOut := clientTCP(port, ap(vip4, 80), "PA", ap(be1v4, 8080), macBE1)
			data.Seq, dataOut.Seq = 1001, 1001
			g.expect(t, data.bytes(t), g.ext, want{xdpRedirect, dataOut.bytes(t), fwd(ReasonFwdRedirect)})

			// A real close, quiet past the closing timeout: a SYN on the tuple is a new
			// connection, on the table's backend.
			fin, finOut := clientTCP(port, ap(vip4, 80), "FA", ap(be1v4, 8080), macBE1)
			g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, finOut.bytes(t), fwd(ReasonFwdRedirect)})
			if c.slot {
				ageSlotConn(t, g, fin, 2*time.Second)
			} else {
				ageConntrack(t, g, fin, 2*time.Second)
			}
			syn2, syn2Out := clientTCP(port, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
			syn2.Seq, syn2Out.Seq = 5000, 5000
			g.expect(t, syn2.bytes(t), g.ext, want{xdpRedirect, syn2Out.bytes(t), fwd(ReasonFwdRedirect)})
		})
	}
}
