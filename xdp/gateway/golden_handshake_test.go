// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// handshakes returns the handshake table's handshakes in flight and first datagrams by client
// endpoint (its occupied slots but those holding a connection: see slotConns), each checked to be
// in the slot its tuple hashes to.
func handshakes(t *testing.T, d *Datapath) map[netip.AddrPort]xlbHsEntry {
	t.Helper()
	return slotEntries(t, d, false)
}

// slotConns returns the connections the handshake table holds (state hsStConn) by client
// endpoint.
func slotConns(t *testing.T, d *Datapath) map[netip.AddrPort]xlbHsEntry {
	t.Helper()
	return slotEntries(t, d, true)
}

// slotEntries returns the handshake table's occupied slots that hold a connection (conns) or not.
func slotEntries(t *testing.T, d *Datapath, conns bool) map[netip.AddrPort]xlbHsEntry {
	t.Helper()
	out := map[netip.AddrPort]xlbHsEntry{}
	mask := d.objs.HsSlots.MaxEntries() - 1
	must(t, walkHandshakes(d.objs.HsSlots, func(i uint32, e *xlbHsEntry) {
		if e.Key.Family == 0 || (e.Key.Pad[0]&hsStConn != 0) != conns {
			return
		}
		if h := tupleHash(&e.Key, uint32(d.opts.Seed)); h&mask != i && (h&mask)^1 != i {
			t.Errorf("handshake %+v in slot %d, its tuple hashes to %d (a pair: %d and %d)", e.Key, i, h&mask, h&mask&^1, h&mask|1)
		}
		out[netip.AddrPortFrom(fromWire(e.Key.Src, e.Key.Family), ntohs(e.Key.Sport))] = *e
	}))
	return out
}

// hsCase is one family's VIP, its first backend X (the only one in the VIP's table at first) and
// the backend Y that a table change gives every slot to.
type hsCase struct {
	name         string
	client       netip.Addr
	vip          datapath.VIPID
	vipAddr      netip.AddrPort
	x, y         datapath.BackendID
	toX, toY     netip.AddrPort
	macX, macY   string
	setupBackend datapath.Backend
}

func hsCases() []hsCase {
	return []hsCase{
		{"ipv4", client4, 1, ap(vip4, 80), 1, 11, ap(be1v4, 8080), ap(be2v4, 8080), macBE1, macBE2,
			datapath.Backend{Addr: be2v4, Port: 8080}},
		{"ipv6", client6, 4, ap(vip6, 80), 4, 12, ap(be1v6, 8080), ap(be2v6, 8080), macBE1, macBE2,
			datapath.Backend{Addr: be2v6, Port: 8080}},
	}
}

// tcp returns a client -> VIP TCP packet of c and the same packet as backend to (MAC mac) gets it.
func (c hsCase) tcp(cport uint16, flags string, to netip.AddrPort, mac string) (pk, pk) {
	in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(c.client, cport), Dst: c.vipAddr,
		Proto: layers.IPProtocolTCP, Flags: flags}
	out := in
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, mac, to, 63
	return in, out
}

// handshake sends the SYN (sequence number isn) and the ACK of a connection from client port
// cport to c's VIP through g, and checks that both go to backend to (MAC mac), the ACK as a
// handshake hit.
func (c hsCase) handshake(t *testing.T, g *gw, cport uint16, isn uint32, to netip.AddrPort, mac string) {
	t.Helper()
	syn, synOut := c.tcp(cport, "S", to, mac)
	syn.Seq, synOut.Seq = isn, isn
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synOut.bytes(t), fwd(ReasonFwdRedirect)})
	ack, ackOut := c.tcp(cport, "A", to, mac)
	ack.Seq, ackOut.Seq = isn+1, isn+1
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackOut.bytes(t), fwdHS(ReasonFwdRedirect)})
}

// TestGoldenHandshakeSurvivesTableChange: the VIP's Maglev table changes between a SYN and its
// ACK (a backend joins while connections are being opened) so that the tuple's slot now names Y;
// a retransmitted SYN and the ACK still go to X, the backend the SYN went to, and the ACK creates
// the conntrack entry and retires the handshake. IPv4 and IPv6.
func TestGoldenHandshakeSurvivesTableChange(t *testing.T) {
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			g := caseGW(t, c, datapath.Settings{})
			d := g.dp

			syn, synToX := c.tcp(47000, "S", c.toX, c.macX)
			g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwd(ReasonFwdRedirect)})
			if hs := handshakes(t, d); len(hs) != 1 || hs[syn.Src].BackendId != uint32(c.x) || hs[syn.Src].VipId != uint32(c.vip) {
				t.Fatalf("handshake table after the SYN: %+v", hs)
			}
			if n, err := d.FlowCount(); err != nil || n != 0 {
				t.Fatalf("the SYN created %d conntrack entries (%v)", n, err)
			}

			// The control plane gives every slot to Y: a new connection goes to Y ...
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			other, otherToY := c.tcp(47001, "S", c.toY, c.macY)
			g.expect(t, other.bytes(t), g.ext, want{xdpRedirect, otherToY.bytes(t), fwd(ReasonFwdRedirect)})
			// ... a retransmission of the first SYN goes where the first went ...
			g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwdHS(ReasonFwdRedirect)})
			// ... and so does its ACK, which creates the conntrack entry.
			ack, ackToX := c.tcp(47000, "A", c.toX, c.macX)
			g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToX.bytes(t), fwdHS(ReasonFwdRedirect)})
			flows, err := d.Flows()
			must(t, err)
			if len(flows) != 1 || flows[0].Src != syn.Src || flows[0].Backend != c.x || flows[0].VIP != c.vip {
				t.Fatalf("conntrack after the ACK: %+v", flows)
			}
			if hs := handshakes(t, d); len(hs) != 1 || hs[other.Src].BackendId != uint32(c.y) {
				t.Fatalf("the ACK did not retire its handshake: %+v", hs)
			}
			// From now on conntrack keeps the flow on X.
			g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToX.bytes(t), fwd(ReasonFwdRedirect)})

			tr, err := d.BackendTraffic(c.x)
			must(t, err)
			if tr.Packets != 4 || tr.NewFlows != 2 {
				t.Errorf("backend X traffic %+v: want 4 packets, 2 new flows (each SYN counts)", tr)
			}
		})
	}
}

// TestGoldenHandshakeBackendDown: a handshake whose backend is marked down (or whose entry was
// flushed) is not used: the ACK is balanced by the VIP's current table, and a retransmitted SYN
// re-records the handshake on the new backend.
func TestGoldenHandshakeBackendDown(t *testing.T) {
	c := hsCases()[0]
	g := caseGW(t, c, datapath.Settings{})
	d := g.dp

	syn, synToX := c.tcp(48000, "S", c.toX, c.macX)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwd(ReasonFwdRedirect)})
	must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
	must(t, d.UpsertBackend(c.x, datapath.Backend{Addr: be1v4, Port: 8080, Down: true}))

	// A retransmitted SYN: X is down, so the table's choice, Y, which the handshake now records.
	_, synToY := c.tcp(48000, "S", c.toY, c.macY)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToY.bytes(t), fwd(ReasonFwdRedirect)})
	if hs := handshakes(t, d); hs[syn.Src].BackendId != uint32(c.y) {
		t.Fatalf("handshake after the SYN to Y: %+v", hs)
	}
	ack, ackToY := c.tcp(48000, "A", c.toY, c.macY)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToY.bytes(t), fwdHS(ReasonFwdRedirect)})

	// The ACK of a handshake whose backend went down after its SYN: Maglev (Y), no handshake hit.
	must(t, d.UpsertBackend(c.x, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.SetMaglevTable(c.vip, table(13, c.x)))
	syn2, syn2ToX := c.tcp(48001, "S", c.toX, c.macX)
	g.expect(t, syn2.bytes(t), g.ext, want{xdpRedirect, syn2ToX.bytes(t), fwd(ReasonFwdRedirect)})
	must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
	must(t, d.UpsertBackend(c.x, datapath.Backend{Addr: be1v4, Port: 8080, Down: true}))
	ack2, ack2ToY := c.tcp(48001, "A", c.toY, c.macY)
	g.expect(t, ack2.bytes(t), g.ext, want{xdpRedirect, ack2ToY.bytes(t), fwd(ReasonFwdRedirect)})
	flows, err := d.Flows()
	must(t, err)
	for _, f := range flows {
		if f.Backend != c.y {
			t.Errorf("flow on backend %d, want %d: %+v", f.Backend, c.y, f)
		}
	}

	// A flushed handshake is not used either.
	must(t, d.UpsertBackend(c.x, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.SetMaglevTable(c.vip, table(13, c.x)))
	syn3, syn3ToX := c.tcp(48002, "S", c.toX, c.macX)
	g.expect(t, syn3.bytes(t), g.ext, want{xdpRedirect, syn3ToX.bytes(t), fwd(ReasonFwdRedirect)})
	must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
	if _, err := d.FlushFlows(func(f datapath.Flow) bool { return f.Backend == c.x }); err != nil {
		t.Fatal(err)
	}
	if hs := handshakes(t, d); len(hs) != 0 {
		t.Fatalf("handshakes after the flush: %+v", hs)
	}
	ack3, ack3ToY := c.tcp(48002, "A", c.toY, c.macY)
	g.expect(t, ack3.bytes(t), g.ext, want{xdpRedirect, ack3ToY.bytes(t), fwd(ReasonFwdRedirect)})
}

// TestGoldenHandshakeSYNFlood: a SYN flood of more distinct tuples than the handshake table holds
// churns that table only: every established conntrack entry survives it, and keeps its backend.
func TestGoldenHandshakeSYNFlood(t *testing.T) {
	const hsSize, established, flood = 256, 64, 2048
	g := newGW(t, Options{Settings: datapath.Settings{HandshakeSize: hsSize}})
	services(t, g)
	d := g.dp
	if n := d.objs.HsSlots.MaxEntries(); n != hsSize {
		t.Fatalf("handshake table holds %d, want Options.HandshakeSize %d", n, hsSize)
	}
	must(t, d.UpsertBackend(11, datapath.Backend{Addr: be2v4, Port: 8080}))
	for i := range established {
		syn, _ := clientTCP(uint16(30000+i), ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
		ack, _ := clientTCP(uint16(30000+i), ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
		g.run(t, syn.bytes(t), g.ext)
		g.run(t, ack.bytes(t), g.ext)
	}
	before, err := d.Flows()
	must(t, err)
	if len(before) != established {
		t.Fatalf("%d conntrack entries before the flood, want %d", len(before), established)
	}
	// The table changes, then the flood: new tuples, all to Y.
	must(t, d.SetMaglevTable(1, table(13, 11)))
	r0 := g.reasons(t)
	for i := range flood {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + i%100)}), uint16(20000+i)),
			Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		if res := g.run(t, in.bytes(t), g.ext); res.Verdict != xdpRedirect {
			t.Fatalf("flood SYN %d: verdict %s", i, verdictNames[res.Verdict])
		}
	}
	r1 := g.reasons(t)
	if got := r1[ReasonNATForward] - r0[ReasonNATForward]; got != flood {
		t.Errorf("%d flood SYNs forwarded, want %d", got, flood)
	}
	after, err := d.Flows()
	must(t, err)
	if len(after) != established {
		t.Fatalf("%d conntrack entries after the flood, want %d", len(after), established)
	}
	for _, f := range after {
		if f.Backend != 1 || f.Src.Addr() != client4 {
			t.Errorf("conntrack entry changed by the flood: %+v", f)
		}
	}
	if hs := handshakes(t, d); len(hs) > hsSize {
		t.Errorf("handshake table holds %d entries, more than its size %d", len(hs), hsSize)
	}
	// The established flows still reach X through conntrack.
	ack, toX := clientTCP(30000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toX.bytes(t), fwd(ReasonFwdRedirect)})
}

// TestGoldenHandshakePortReuse: a SYN on a tuple whose handshake entry is still fresh but with
// another sequence number is a new connection (a client reusing its port), not a retransmission:
// it is balanced by the VIP's current table, and its ACK follows it, not the old SYN's backend
// (which may have been taken out of service for new flows meanwhile).
func TestGoldenHandshakePortReuse(t *testing.T) {
	for _, c := range hsCases() {
		t.Run(c.name, func(t *testing.T) {
			g := caseGW(t, c, datapath.Settings{})
			d := g.dp

			syn, synToX := c.tcp(49000, "S", c.toX, c.macX)
			syn.Seq, synToX.Seq = 100, 100
			g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwd(ReasonFwdRedirect)})
			must(t, d.SetMaglevTable(c.vip, table(13, c.y)))
			// The same SYN again is a retransmission: X.
			g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synToX.bytes(t), fwdHS(ReasonFwdRedirect)})
			// A SYN with another ISN is a new connection: the current table's Y ...
			syn2, syn2ToY := c.tcp(49000, "S", c.toY, c.macY)
			syn2.Seq, syn2ToY.Seq = 900000, 900000
			g.expect(t, syn2.bytes(t), g.ext, want{xdpRedirect, syn2ToY.bytes(t), fwd(ReasonFwdRedirect)})
			if hs := handshakes(t, d); hs[syn.Src].BackendId != uint32(c.y) || hs[syn.Src].Isn != 900000 {
				t.Fatalf("handshake after the new SYN: %+v", hs[syn.Src])
			}
			// ... and so does its ACK.
			ack, ackToY := c.tcp(49000, "A", c.toY, c.macY)
			ack.Seq, ackToY.Seq = 900001, 900001
			g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToY.bytes(t), fwdHS(ReasonFwdRedirect)})
			flows, err := d.Flows()
			must(t, err)
			if len(flows) != 1 || flows[0].Backend != c.y {
				t.Fatalf("conntrack after the ACK: %+v", flows)
			}
		})
	}
}
