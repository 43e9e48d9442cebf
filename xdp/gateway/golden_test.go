// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// XDP verdicts.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

var verdictNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

// want is the expected outcome of one golden packet.
type want struct {
	verdict uint32
	// out is the exact expected output; nil means the input, unchanged.
	out []byte
	// reasons are the exact expected counter increments (others must not move).
	reasons map[Reason]uint64
}

// expect runs in through the program and checks verdict, bytes and counters.
func (g *gw) expect(t *testing.T, in []byte, ifindex int, w want) []byte {
	t.Helper()
	before := g.reasons(t)
	res := g.run(t, in, ifindex)
	after := g.reasons(t)
	if res.Verdict != w.verdict {
		t.Errorf("verdict %s, want %s\n%s", verdictNames[res.Verdict], verdictNames[w.verdict], dump("in", in))
	}
	exp := w.out
	if exp == nil {
		exp = in
	}
	if !bytes.Equal(res.Data, exp) {
		t.Errorf("output differs\n%s\n%s", dump("got", res.Data), dump("want", exp))
	}
	for r := Reason(0); int(r) < numReasons; r++ {
		if d := after[r] - before[r]; d != w.reasons[r] {
			t.Errorf("counter %s moved by %d, want %d", r, d, w.reasons[r])
		}
	}
	return res.Data
}

func dump(name string, b []byte) string {
	p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	return name + ":\n" + hex.Dump(b) + p.String()
}

// fwd is the counter set of a forwarded client -> VIP packet.
func fwd(out Reason) map[Reason]uint64 {
	return map[Reason]uint64{ReasonNATForward: 1, out: 1}
}

// fwdHS is the counter set of a forwarded client -> VIP packet that took its backend from the
// handshake table.
func fwdHS(out Reason) map[Reason]uint64 {
	return map[Reason]uint64{ReasonNATForward: 1, ReasonHandshakeHit: 1, out: 1}
}

// services configures the golden VIPs. Each VIP has its own backend endpoint, except VIPs 9 and
// 10, which share one (their reverse NAT is ambiguous).
func services(t testing.TB, g *gw) {
	t.Helper()
	d := g.dp
	type svc struct {
		id   datapath.VIPID
		f    datapath.Frontend
		cfg  datapath.VIPConfig
		be   datapath.Backend
		ambi bool
	}
	svcs := []svc{
		{1, datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: be1v4, Port: 8080}, false},
		{2, datapath.Frontend{Addr: vip4, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{}, datapath.Backend{Addr: be2v4, Port: 5353}, false},
		{3, datapath.Frontend{Addr: vip4b, Port: 0, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: be3v4}, false},
		{4, datapath.Frontend{Addr: vip6, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: be1v6, Port: 8080}, false},
		{5, datapath.Frontend{Addr: vip6, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{}, datapath.Backend{Addr: be2v6, Port: 5353}, false},
		{6, datapath.Frontend{Addr: vip4, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.8/29")}},
			datapath.Backend{Addr: be1v4, Port: 8443}, false},
		{7, datapath.Frontend{Addr: vip4, Port: 8000, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: beExt4, Port: 80}, false},
		{8, datapath.Frontend{Addr: vip4, Port: 8001, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: beNoNei4, Port: 80}, false},
		{9, datapath.Frontend{Addr: vip4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: be2v4, Port: 9000}, true},
		{10, datapath.Frontend{Addr: vip4, Port: 82, Proto: datapath.TCP}, datapath.VIPConfig{}, datapath.Backend{Addr: be2v4, Port: 9000}, true},
	}
	for _, s := range svcs {
		s.cfg.ID = s.id
		must(t, d.UpsertVIP(s.f, s.cfg))
		must(t, d.UpsertBackend(datapath.BackendID(s.id), s.be))
		must(t, d.SetMaglevTable(s.id, table(13, datapath.BackendID(s.id))))
		ep := datapath.Endpoint{Addr: s.be.Addr, Port: s.be.Port, Proto: s.f.Proto}
		must(t, d.SetReverse(ep, datapath.ReverseNAT{VIP: s.id, Ambiguous: s.ambi}))
	}
}

func TestGoldenForwardNewTCPFlow(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7}
	out := syn
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE1, ap(be1v4, 8080), 63
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwd(ReasonFwdRedirect)})

	// A SYN leaves no conntrack entry (SYN-flood policy); the first ACK creates it.
	flows, err := g.dp.Flows()
	must(t, err)
	if len(flows) != 0 {
		t.Fatalf("SYN created conntrack entries: %+v", flows)
	}
	ack := syn
	ack.Flags = "A"
	out.Flags = "A"
	// The ACK takes the SYN's backend from the handshake table (see TestGoldenHandshake*).
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwdHS(ReasonFwdRedirect)})
	flows, err = g.dp.Flows()
	must(t, err)
	if len(flows) != 1 || flows[0].Backend != 1 || flows[0].VIP != 1 || flows[0].Src != ap(client4, 40000) {
		t.Fatalf("conntrack after ACK: %+v", flows)
	}
	tr, err := g.dp.VIPTraffic(1)
	must(t, err)
	if tr.Packets != 2 || tr.NewFlows != 1 || tr.Bytes != uint64(len(syn.bytes(t))*2) {
		t.Errorf("VIP traffic %+v, want 2 packets, 1 new flow", tr)
	}
	bt, err := g.dp.BackendTraffic(1)
	must(t, err)
	if bt.Packets != 2 || bt.NewFlows != 1 {
		t.Errorf("backend traffic %+v, want 2 packets, 1 new flow", bt)
	}
}

func TestGoldenForwardUDPAndIPv6(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	cases := []struct {
		name    string
		in, out pk
		reason  Reason
	}{
		{"udp4", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5000), Dst: ap(vip4, 53),
			Proto: layers.IPProtocolUDP, Payload: []byte("query")},
			pk{SrcMAC: macInt, DstMAC: macBE2, Src: ap(client4, 5000), Dst: ap(be2v4, 5353),
				Proto: layers.IPProtocolUDP, Payload: []byte("query"), TTL: 63}, ReasonFwdRedirect},
		{"udp4 zero checksum stays zero", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5001), Dst: ap(vip4, 53),
			Proto: layers.IPProtocolUDP, Payload: []byte("q"), UDPZeroCsum: true},
			pk{SrcMAC: macInt, DstMAC: macBE2, Src: ap(client4, 5001), Dst: ap(be2v4, 5353),
				Proto: layers.IPProtocolUDP, Payload: []byte("q"), TTL: 63, UDPZeroCsum: true}, ReasonFwdRedirect},
		{"tcp6", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 40000), Dst: ap(vip6, 80),
			Proto: layers.IPProtocolTCP, Flags: "S"},
			pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(client6, 40000), Dst: ap(be1v6, 8080),
				Proto: layers.IPProtocolTCP, Flags: "S", TTL: 63}, ReasonFwdRedirect},
		{"udp6", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 5000), Dst: ap(vip6, 53),
			Proto: layers.IPProtocolUDP, Payload: []byte("query6")},
			pk{SrcMAC: macInt, DstMAC: macBE2, Src: ap(client6, 5000), Dst: ap(be2v6, 5353),
				Proto: layers.IPProtocolUDP, Payload: []byte("query6"), TTL: 63}, ReasonFwdRedirect},
		{"all-ports VIP keeps the port", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1234), Dst: ap(vip4b, 4444),
			Proto: layers.IPProtocolTCP, Flags: "S"},
			pk{SrcMAC: macInt, DstMAC: macBE3, Src: ap(client4, 1234), Dst: ap(be3v4, 4444),
				Proto: layers.IPProtocolTCP, Flags: "S", TTL: 63}, ReasonFwdRedirect},
		{"IPv4 options are kept", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1235), Dst: ap(vip4, 80),
			Proto: layers.IPProtocolTCP, Flags: "S", IPv4Options: []layers.IPv4Option{{OptionType: 7, OptionLength: 7, OptionData: []byte{4, 0, 0, 0, 0}}, {OptionType: 0}}},
			pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(client4, 1235), Dst: ap(be1v4, 8080),
				Proto: layers.IPProtocolTCP, Flags: "S", TTL: 63, IPv4Options: []layers.IPv4Option{{OptionType: 7, OptionLength: 7, OptionData: []byte{4, 0, 0, 0, 0}}, {OptionType: 0}}}, ReasonFwdRedirect},
		{"IPv6 extension headers are walked", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1236), Dst: ap(vip6, 80),
			Proto: layers.IPProtocolTCP, Flags: "S", Ext6: ext6HopDst(), Ext6Types: []layers.IPProtocol{0}},
			pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(client6, 1236), Dst: ap(be1v6, 8080),
				Proto: layers.IPProtocolTCP, Flags: "S", TTL: 63, Ext6: ext6HopDst(), Ext6Types: []layers.IPProtocol{0}}, ReasonFwdRedirect},
		{"backend on the ingress link: XDP_TX", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1237), Dst: ap(vip4, 8000),
			Proto: layers.IPProtocolTCP, Flags: "S"},
			pk{SrcMAC: macExt, DstMAC: macBEExt, Src: ap(client4, 1237), Dst: ap(beExt4, 80),
				Proto: layers.IPProtocolTCP, Flags: "S", TTL: 63}, ReasonFwdTX},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g.expect(t, c.in.bytes(t), g.ext, want{map[Reason]uint32{ReasonFwdTX: xdpTX}[c.reason] | redirectIf(c.reason), c.out.bytes(t), fwd(c.reason)})
		})
	}
	// A tagged frame is balanced, then handed to the kernel, which owns the VLAN device the
	// route leaves by: rewritten, tag, MACs and TTL as received.
	t.Run("VLAN: rewritten, forwarded by the kernel", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, VLAN: 100, Src: ap(client4, 1238), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		out := in
		out.Dst = ap(be1v4, 8080)
		g.expect(t, in.bytes(t), g.ext, want{xdpPass, out.bytes(t), map[Reason]uint64{ReasonNATForward: 1, ReasonPassVLANEgress: 1}})
	})
}

func redirectIf(r Reason) uint32 {
	if r == ReasonFwdRedirect {
		return xdpRedirect
	}
	return 0
}

// ext6HopDst is a Hop-by-Hop header (PadN) followed by a Destination Options header (PadN),
// then TCP.
func ext6HopDst() []byte {
	return []byte{
		60, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop: next = dstopts, len 0, PadN(4)
		6, 0, 1, 4, 0, 0, 0, 0, // dstopts: next = TCP
	}
}
