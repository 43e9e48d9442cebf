// SPDX-License-Identifier: Apache-2.0
package forward

// The decision's rules, one by one, on the balancer alone (no kernel). The parity tests in
// xdp/afxdp hold the same rules to the BPF program frame for frame.

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

var (
	vip4    = netip.MustParseAddr("198.18.100.1")
	vip6    = netip.MustParseAddr("2001:db8:100::1")
	client4 = netip.MustParseAddr("198.18.128.7")
	bes     = []netip.Addr{netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("198.18.1.11"), netip.MustParseAddr("198.18.1.12")}
	web     = datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}
	dns     = datapath.Frontend{Addr: vip4, Port: 53, Proto: datapath.UDP}
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setup is a balancer with web (TCP 80 → 8080) and dns (UDP 53 → 5353) over three backends, a
// 251-slot table each filled round robin.
func setup(t *testing.T, s datapath.Settings) *Balancer {
	t.Helper()
	b, err := New(s)
	must(t, err)
	for i, a := range bes {
		must(t, b.UpsertBackend(datapath.BackendID(i+1), datapath.Backend{Addr: a, Port: 8080}))
		must(t, b.UpsertBackend(datapath.BackendID(i+11), datapath.Backend{Addr: a, Port: 5353}))
	}
	must(t, b.UpsertVIP(web, datapath.VIPConfig{ID: 1}))
	must(t, b.UpsertVIP(dns, datapath.VIPConfig{ID: 2}))
	must(t, b.SetMaglevTable(1, table(1, 2, 3)))
	must(t, b.SetMaglevTable(2, table(11, 12, 13)))
	for i, a := range bes {
		must(t, b.SetReverse(datapath.Endpoint{Addr: a, Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}))
		_ = i
	}
	return b
}

// table is a 251-slot table over ids, round robin.
func table(ids ...datapath.BackendID) []datapath.BackendID {
	t := make([]datapath.BackendID, 251)
	for i := range t {
		t[i] = ids[i%len(ids)]
	}
	return t
}

func tcp(sport uint16, flags uint8, seq uint32) Packet {
	p := sidedPacketOf(netip.AddrPortFrom(client4, sport), netip.AddrPortFrom(vip4, 80), datapath.TCP)
	p.TCPFlags, p.Seq, p.Len = flags, seq, 60
	return p
}

// addr is a decision's rewrite as an address and port.
func addr(d Decision) netip.AddrPort { return netip.AddrPortFrom(AddrOf(d.Addr, false), d.Port) }

// TestNewFlowIsTheMaglevPick: a SYN goes to table[FlowHash % M], with the pick's trace.
func TestNewFlowIsTheMaglevPick(t *testing.T) {
	b := setup(t, datapath.Settings{Seed: 9})
	for sport := uint16(1000); sport < 1100; sport++ {
		p := tcp(sport, TCPSYN, 1)
		d := b.Forward(&p, time.Second)
		h := datapath.FlowHash(9, client4, sport, 80, datapath.TCP, false)
		want := bes[table(1, 2, 3)[h%251]-1]
		if d.Action != ToBackend || d.Reason != ReasonNATForward || addr(d) != netip.AddrPortFrom(want, 8080) {
			t.Fatalf("SYN from port %d: %+v, want to %s:8080", sport, d, want)
		}
		if !d.Maglev || d.Hash != h || d.Slot != int(h%251) || d.M != 251 || !d.NewFlow || d.Conntrack != CTNone {
			t.Fatalf("SYN from port %d: trace %+v", sport, d)
		}
	}
}

// TestHandshakeFollowsItsSYN: the handshake's ACK goes where its SYN went even when the table
// changed in between (the handshake table), then conntrack holds the flow and the handshake
// entry is gone; a SYN with another sequence number is another connection.
func TestHandshakeFollowsItsSYN(t *testing.T) {
	b := setup(t, datapath.Settings{})
	syn := tcp(4000, TCPSYN, 100)
	first := b.Forward(&syn, time.Second)
	// Every slot now names another backend.
	other := first.Backend%3 + 1
	must(t, b.SetMaglevTable(1, table(other)))
	ack := tcp(4000, TCPACK, 101)
	d := b.Forward(&ack, time.Second+time.Millisecond)
	if d.Backend != first.Backend || !d.Handshake || !d.HandshakeHit || d.Maglev {
		t.Fatalf("the handshake's ACK: %+v, want backend %d from the handshake table", d, first.Backend)
	}
	if _, ok := b.hs[ack.key()]; ok {
		t.Error("the handshake entry outlived the ACK that made the conntrack entry")
	}
	data := tcp(4000, TCPACK, 500)
	if d := b.Forward(&data, 2*time.Second); d.Backend != first.Backend || d.Conntrack != CTUsed {
		t.Fatalf("data after the handshake: %+v, want backend %d by conntrack", d, first.Backend)
	}
	// A SYN on the live tuple (forged, or a client's retry) keeps the flow's backend, which
	// answers it with a challenge ACK: one spoofed SYN must not re-point an established flow.
	spoof := tcp(4000, TCPSYN, 7777)
	if d := b.Forward(&spoof, 3*time.Second); d.Backend != first.Backend || !d.SYNKept || d.Maglev {
		t.Fatalf("a SYN on a live tuple: %+v, want the flow's backend %d kept", d, first.Backend)
	}
	// Once the flow closes, a new SYN on the tuple (client port reuse) is balanced afresh, and
	// conntrack takes it.
	fin := tcp(4000, TCPFIN|TCPACK, 600)
	b.Forward(&fin, 3*time.Second)
	syn2 := tcp(4000, TCPSYN, 9999)
	if d := b.Forward(&syn2, 4*time.Second); d.Backend != other || !d.Maglev || d.SYNKept {
		t.Fatalf("a new SYN on a closing tuple: %+v, want the table's backend %d", d, other)
	}
	if c := b.ct[syn2.key()]; c.backend != other {
		t.Errorf("conntrack after the new SYN names backend %d, want %d", c.backend, other)
	}
}

// TestConntrackStates: an established flow keeps its backend across a table change; once idle
// past its timeout, or its backend down, it is balanced again (Reselected); a flow whose entry
// names another frontend is not taken by it.
func TestConntrackStates(t *testing.T) {
	b := setup(t, datapath.Settings{UDPTimeout: 5 * time.Second})
	q := sidedPacketOf(netip.AddrPortFrom(client4, 5000), netip.AddrPortFrom(vip4, 53), datapath.UDP)
	first := b.Forward(&q, time.Second)
	if !first.NewFlow || first.Conntrack != CTNone {
		t.Fatalf("first datagram: %+v", first)
	}
	if _, ok := b.ct[q.key()]; ok {
		t.Fatalf("the first datagram made a conntrack entry: %+v", b.ct[q.key()])
	}
	other := (first.Backend-10)%3 + 11
	must(t, b.SetMaglevTable(2, table(other)))
	// The second datagram follows the first (its handshake-table entry), not the new table, and
	// creates the conntrack entry; it is no new flow.
	if d := b.Forward(&q, 1500*time.Millisecond); d.Backend != first.Backend || !d.FirstDatagram || d.Conntrack != CTNone || d.NewFlow {
		t.Fatalf("second datagram: %+v, want backend %d by the first datagram's entry", d, first.Backend)
	}
	if _, ok := b.hs[q.key()]; ok {
		t.Fatal("the second datagram left the first's entry in the handshake table")
	}
	if d := b.Forward(&q, 2*time.Second); d.Backend != first.Backend || d.Conntrack != CTUsed || d.NewFlow {
		t.Fatalf("within the timeout: %+v, want backend %d by conntrack", d, first.Backend)
	}
	if d := b.Forward(&q, 8*time.Second); d.Conntrack != CTExpired || !d.Reselected || d.Backend != other {
		t.Fatalf("idle past the timeout: %+v, want expired and balanced again to %d", d, other)
	}
	// Balanced again, the flow starts over: its next datagram replaces the expired entry.
	if d := b.Forward(&q, 8500*time.Millisecond); !d.FirstDatagram || d.Backend != other {
		t.Fatalf("the datagram after the expired one: %+v, want %d by the first datagram's entry", d, other)
	}
	if c := b.ct[q.key()]; c.backend != other || c.lastSeen != int64(8500*time.Millisecond) {
		t.Fatalf("conntrack after the flow started over: %+v, want backend %d", c, other)
	}
	must(t, b.UpsertBackend(other, datapath.Backend{Addr: bes[other-11], Port: 5353, Down: true}))
	must(t, b.SetMaglevTable(2, table(first.Backend)))
	if d := b.Forward(&q, 9*time.Second); d.Conntrack != CTBackendGone || !d.Reselected || d.Backend != first.Backend {
		t.Fatalf("backend down: %+v, want backend-gone and balanced again to %d", d, first.Backend)
	}
	// The entry belongs to dns (VIP 2): a web frontend on the same tuple's VIP address and
	// port would be another frontend. Move dns's port to show it.
	must(t, b.DeleteVIP(dns))
	must(t, b.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 0, Proto: datapath.UDP}, datapath.VIPConfig{ID: 3}))
	must(t, b.SetMaglevTable(3, table(12)))
	if d := b.Forward(&q, 10*time.Second); d.Conntrack != CTOtherVIP || d.Backend != 12 {
		t.Fatalf("an entry of a deleted frontend: %+v, want other-vip and the all-ports frontend's backend", d)
	}
}

// TestDrops: source ranges, an expiring TTL, an IPv6 UDP datagram without checksum, an empty
// table; and a packet for no frontend is not ours.
func TestDrops(t *testing.T) {
	b := setup(t, datapath.Settings{})
	must(t, b.UpsertVIP(web, datapath.VIPConfig{ID: 1, SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}))
	p := tcp(1, TCPSYN, 1)
	if d := b.Forward(&p, time.Second); d.Action != Drop || d.Reason != ReasonDropSrcRange || !d.SourceRejected {
		t.Errorf("a client outside the source ranges: %+v", d)
	}
	must(t, b.UpsertVIP(web, datapath.VIPConfig{ID: 1}))
	p.TTL = 1
	if d := b.Forward(&p, time.Second); d.Action != Drop || d.Reason != ReasonDropTTL {
		t.Errorf("TTL 1: %+v", d)
	}
	must(t, b.UpsertVIP(datapath.Frontend{Addr: vip6, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 4}))
	q := sidedPacketOf(netip.MustParseAddrPort("[2001:db8:80::1]:5"), netip.AddrPortFrom(vip6, 53), datapath.UDP)
	q.UDPNoChecksum = true
	if d := b.Forward(&q, time.Second); d.Action != Drop || d.Reason != ReasonDropUDP6ZeroCsum {
		t.Errorf("IPv6 UDP without checksum: %+v", d)
	}
	q.UDPNoChecksum = false
	if d := b.Forward(&q, time.Second); d.Action != Drop || d.Reason != ReasonDropNoBackend || d.M != 0 {
		t.Errorf("a frontend without a table: %+v", d)
	}
	other := sidedPacketOf(netip.AddrPortFrom(client4, 1), netip.MustParseAddrPort("198.18.100.9:80"), datapath.TCP)
	if d := b.Forward(&other, time.Second); d.Action != NotOurs {
		t.Errorf("a packet for no frontend: %+v", d)
	}
}

// TestRateGuard: above NewFlowRate per window, flows are balanced but not remembered.
func TestRateGuard(t *testing.T) {
	b := setup(t, datapath.Settings{NewFlowRate: 2})
	limited := 0
	for i := range 5 {
		q := sidedPacketOf(netip.AddrPortFrom(client4, uint16(6000+i)), netip.AddrPortFrom(vip4, 53), datapath.UDP)
		for range 2 { // the second datagram makes the conntrack entry
			d := b.Forward(&q, time.Second)
			if d.Action != ToBackend {
				t.Fatalf("datagram of flow %d: %+v", i, d)
			}
			if d.RateLimited {
				limited++
			}
		}
	}
	if n, _ := b.FlowCount(); n != 2 || limited != 3 {
		t.Errorf("5 new flows at a rate of 2: %d recorded, %d limited; want 2 and 3", n, limited)
	}
}

// TestReply: a backend's reply gets its VIP and service port back; an ambiguous endpoint's reply
// gets its flow's frontend from the reverse conntrack entry, or without one from the candidates'
// Maglev tables; a packet from no backend endpoint is not ours.
func TestReply(t *testing.T) {
	b := setup(t, datapath.Settings{Seed: 3})
	r := sidedPacketOf(netip.AddrPortFrom(bes[0], 8080), netip.AddrPortFrom(client4, 4000), datapath.TCP)
	d := b.Reply(&r, time.Second)
	if d.Action != ToClient || addr(d) != netip.AddrPortFrom(vip4, 80) || d.VIP != 1 {
		t.Fatalf("a reply: %+v, want from %s:80", d, vip4)
	}
	stranger := sidedPacketOf(netip.MustParseAddrPort("198.18.1.99:8080"), netip.AddrPortFrom(client4, 4000), datapath.TCP)
	if d := b.Reply(&stranger, time.Second); d.Action != NotOurs {
		t.Errorf("a packet from no backend: %+v", d)
	}

	// api (198.18.100.2:80) shares the backends' port 8080 with web: ambiguous endpoints.
	api := datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.2"), Port: 80, Proto: datapath.TCP}
	must(t, b.UpsertVIP(api, datapath.VIPConfig{ID: 5}))
	must(t, b.SetMaglevTable(5, table(1, 2, 3)))
	amb := datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{1, 5}}
	for _, a := range bes {
		must(t, b.SetReverse(datapath.Endpoint{Addr: a, Port: 8080, Proto: datapath.TCP}, amb))
	}
	// A flow to api through this balancer: its SYN records the reverse entry, so the reply
	// is api's whatever the tables say.
	syn := sidedPacketOf(netip.AddrPortFrom(client4, 4100), netip.AddrPortFrom(api.Addr, 80), datapath.TCP)
	syn.TCPFlags = TCPSYN
	fwd := b.Forward(&syn, time.Second)
	back := sidedPacketOf(addr(fwd), netip.AddrPortFrom(client4, 4100), datapath.TCP)
	if d := b.Reply(&back, time.Second); d.Action != ToClient || d.VIP != 5 || d.Conntrack != CTUsed || d.ReverseByHash {
		t.Fatalf("an ambiguous endpoint's reply with a reverse entry: %+v, want api's by conntrack", d)
	}
	// Without an entry (the flow went through another gateway): the one candidate whose table
	// sends the forward tuple to this endpoint. web and api have the same table: both do, so
	// the reply is not translated; give api another table and it is web's alone.
	must(t, b.SetMaglevTable(5, table(99)))
	for sport := uint16(7000); sport < 7010; sport++ {
		fwdPort := datapath.FlowHash(3, client4, sport, 80, datapath.TCP, false)
		be := bes[table(1, 2, 3)[fwdPort%251]-1]
		rp := sidedPacketOf(netip.AddrPortFrom(be, 8080), netip.AddrPortFrom(client4, sport), datapath.TCP)
		if d := b.Reply(&rp, time.Second); d.Action != ToClient || d.VIP != 1 || !d.ReverseByHash {
			t.Fatalf("port %d: an ambiguous endpoint's reply without entry: %+v, want web's by Maglev", sport, d)
		}
	}
	must(t, b.SetMaglevTable(5, table(1, 2, 3)))
	rp := sidedPacketOf(netip.AddrPortFrom(bes[0], 8080), netip.AddrPortFrom(client4, 7777), datapath.TCP)
	if d := b.Reply(&rp, time.Second); d.Action != Drop || d.Reason != ReasonDropReverseNoCT {
		// Either none or both candidates name it: never a guess.
		t.Fatalf("an ambiguous reply both tables (or none) explain: %+v", d)
	}
}

// sidedPacketOf is PacketOf arrived on the side its source says: a backend's (198.18.1.0/24,
// 2001:db8:1::/64) on a cluster-facing interface, anyone else's on a client-facing one.
func sidedPacketOf(src, dst netip.AddrPort, proto datapath.Protocol) Packet {
	p := PacketOf(src, dst, proto)
	p.Role = datapath.RoleClient
	for _, c := range []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("2001:db8:1::/64")} {
		if c.Contains(src.Addr()) {
			p.Role = datapath.RoleCluster
		}
	}
	return p
}
