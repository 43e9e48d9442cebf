// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"testing"

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

	// Closing: a SYN on the tuple is a new connection, on the current table's backend.
	fin, finOut := clientTCP(45000, ap(vip4, 80), "FA", ap(be1v4, 8080), macBE1)
	g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, finOut.bytes(t), fwd(ReasonFwdRedirect)})
	_, toBE2 := clientTCP(45000, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE2.bytes(t), fwd(ReasonFwdRedirect)})
}
