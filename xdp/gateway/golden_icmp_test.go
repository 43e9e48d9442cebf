// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// open sends a client's packet p (MACs filled in here) through the gateway so that its flow
// exists (a conntrack entry, or a handshake for a SYN), and checks it was forwarded.
func (g *gw) open(t *testing.T, p pk) {
	t.Helper()
	p.SrcMAC, p.DstMAC = macClient, macExt
	if res := g.run(t, p.bytes(t), g.ext); res.Verdict != xdpRedirect && res.Verdict != xdpTX {
		t.Fatalf("opening flow %s -> %s: verdict %s", p.Src, p.Dst, verdictNames[res.Verdict])
	}
}

var (
	vip4c     = netip.MustParseAddr("198.18.100.3") // every frontend has source ranges
	outsider4 = netip.MustParseAddr("198.18.0.30")  // outside 198.18.0.8/29
)

// TestGoldenICMPHostile: ICMP that a hostile network sends a gateway. Errors are relayed only
// about flows the gateway knows, never with a path MTU below the floors, never about a client
// outside the VIP's source ranges; echo requests from such clients are not answered; a quote is
// read and rewritten within the error's IP datagram, whatever trailer its frame has.
func TestGoldenICMPHostile(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	ranges := []netip.Prefix{netip.MustParsePrefix("198.18.0.8/29")}
	must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4c, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{ID: 20, SourceRanges: ranges}))
	must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4c, Port: 80, Proto: datapath.TCP},
		datapath.VIPConfig{ID: 21, SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.40/32")}}))
	must(t, g.dp.UpsertBackend(20, datapath.Backend{Addr: be1v4, Port: 8443}))
	must(t, g.dp.SetMaglevTable(20, table(13, 20)))
	must(t, g.dp.SetMaglevTable(21, table(13, 20)))

	router := pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router4, 0), Dst: ap(vip4, 0)}
	router6 := pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router6, 0), Dst: ap(vip6, 0)}
	drop := func(r Reason) want { return want{xdpDrop, nil, map[Reason]uint64{r: 1}} }
	// quote is the first n bytes of the reply VIP:vport -> client, as a router quotes it.
	quote := func(src, dst netip.AddrPort, n int) []byte {
		q := pk{Src: src, Dst: dst, Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 100)}
		return q.ip(t, q.l4(t))[:n]
	}

	t.Run("frag needed about a flow that does not exist", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 1400, quote(ap(vip4, 80), ap(client4, 41000), 60))
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})
	t.Run("packet too big about a flow that does not exist", func(t *testing.T) {
		in := icmpError(t, router6, 2, 0, 1280, quote(ap(vip6, 80), ap(client6, 41000), 100))
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})
	t.Run("error quoting a VIP port no frontend has", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 1400, quote(ap(vip4, 22), ap(client4, 41000), 60))
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})

	g.open(t, pk{Src: ap(client4, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "A"})
	g.open(t, pk{Src: ap(client6, 40000), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "A"})
	t.Run("frag needed advertising 68 bytes", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 68, quote(ap(vip4, 80), ap(client4, 40000), 60))
		g.expect(t, in, g.ext, drop(ReasonDropICMPPTBLow))
	})
	t.Run("frag needed advertising 551 bytes", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 551, quote(ap(vip4, 80), ap(client4, 40000), 60))
		g.expect(t, in, g.ext, drop(ReasonDropICMPPTBLow))
	})
	t.Run("packet too big advertising 1279 bytes", func(t *testing.T) {
		in := icmpError(t, router6, 2, 0, 1279, quote(ap(vip6, 80), ap(client6, 40000), 100))
		g.expect(t, in, g.ext, drop(ReasonDropICMPPTBLow))
	})
	t.Run("frag needed advertising 552 bytes is relayed", func(t *testing.T) {
		q := quote(ap(vip4, 80), ap(client4, 40000), 60)
		qBE := quote(ap(be1v4, 8080), ap(client4, 40000), 60)
		in := icmpError(t, router, 3, 4, 552, q)
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(router4, 0), Dst: ap(be1v4, 0), TTL: 63}, 3, 4, 552, qBE)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("truncated quote (4 bytes of TCP)", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 1400, quote(ap(vip4, 80), ap(client4, 40000), 24))
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})
	t.Run("truncated quote (IP header only)", func(t *testing.T) {
		in := icmpError(t, router6, 2, 0, 1400, quote(ap(vip6, 80), ap(client6, 40000), 40))
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})
	// The quote's last 8 bytes lie beyond the error's IP datagram, in the frame's trailer: the
	// quote ends at 8 bytes of TCP, whose checksum it does not hold.
	t.Run("Ethernet trailer after a 28-byte quote", func(t *testing.T) {
		q := quote(ap(vip4, 80), ap(client4, 40000), 28)
		qBE := quote(ap(be1v4, 8080), ap(client4, 40000), 28)
		trailer := bytes.Repeat([]byte{0xa5, 0x5a}, 8)
		in := append(icmpError(t, router, 3, 4, 1400, q), trailer...)
		out := append(icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(router4, 0), Dst: ap(be1v4, 0), TTL: 63}, 3, 4, 1400, qBE), trailer...)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("Ethernet trailer after a UDP quote", func(t *testing.T) {
		g.open(t, pk{Src: ap(client4, 5000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("query")})
		qp := pk{Src: ap(vip4, 53), Dst: ap(client4, 5000), Proto: layers.IPProtocolUDP, Payload: []byte("answer")}
		qBE := qp
		qBE.Src = ap(be2v4, 5353)
		trailer := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66}
		in := append(icmpError(t, router, 11, 0, 0, qp.ip(t, qp.l4(t))[:28]), trailer...)
		out := append(icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE2, Src: ap(router4, 0), Dst: ap(be2v4, 0), TTL: 63}, 11, 0, 0,
			qBE.ip(t, qBE.l4(t))[:28]), trailer...)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("quote cut inside the 8 bytes of UDP", func(t *testing.T) {
		qp := pk{Src: ap(vip4, 53), Dst: ap(client4, 5000), Proto: layers.IPProtocolUDP, Payload: []byte("answer")}
		in := append(icmpError(t, router, 11, 0, 0, qp.ip(t, qp.l4(t))[:27]), 0x11, 0x22, 0x33, 0x44, 0x55)
		g.expect(t, in, g.ext, drop(ReasonDropICMPUnknown))
	})

	t.Run("error about a client outside the source ranges", func(t *testing.T) {
		in := icmpError(t, router, 3, 4, 1400, quote(ap(vip4, 443), ap(outsider4, 40000), 60))
		g.expect(t, in, g.ext, drop(ReasonDropICMPSrcRange))
	})
	t.Run("error from the cluster about a client outside the source ranges", func(t *testing.T) {
		q := pk{Src: ap(outsider4, 40000), Dst: ap(be1v4, 8443), Proto: layers.IPProtocolTCP, Flags: "A"}
		in := icmpError(t, pk{SrcMAC: macBE1, DstMAC: macInt, Src: ap(be1v4, 0), Dst: ap(outsider4, 0)}, 3, 3, 0, q.ip(t, q.l4(t)))
		g.expect(t, in, g.int, drop(ReasonDropICMPSrcRange))
	})
	t.Run("error from the cluster about a flow that does not exist", func(t *testing.T) {
		q := pk{Src: ap(client4, 41000), Dst: ap(be1v4, 8080), Proto: layers.IPProtocolTCP, Flags: "A"}
		in := icmpError(t, pk{SrcMAC: macBE1, DstMAC: macInt, Src: ap(be1v4, 0), Dst: ap(client4, 0)}, 3, 3, 0, q.ip(t, q.l4(t)))
		g.expect(t, in, g.int, drop(ReasonDropICMPUnknown))
	})
	t.Run("error from the cluster naming another backend than the flow's", func(t *testing.T) {
		q := pk{Src: ap(client4, 40000), Dst: ap(be2v4, 5353), Proto: layers.IPProtocolUDP}
		in := icmpError(t, pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(be2v4, 0), Dst: ap(client4, 0)}, 3, 3, 0, q.ip(t, q.l4(t)))
		g.expect(t, in, g.int, drop(ReasonDropICMPUnknown))
	})
	t.Run("frag needed about a half-open connection goes to its SYN's backend", func(t *testing.T) {
		g.open(t, pk{Src: ap(client4, 42000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S", Seq: 1})
		q := quote(ap(vip4, 80), ap(client4, 42000), 60)
		qBE := quote(ap(be1v4, 8080), ap(client4, 42000), 60)
		in := icmpError(t, router, 3, 4, 1400, q)
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(router4, 0), Dst: ap(be1v4, 0), TTL: 63}, 3, 4, 1400, qBE)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})

	echo := func(src, dst netip.Addr) []byte {
		return icmpEcho(t, pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, 0), Dst: ap(dst, 0)}, 8, 0x1234, 1, []byte("ping"))
	}
	reply := func(src, dst netip.Addr) []byte {
		return icmpEcho(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(src, 0), Dst: ap(dst, 0)}, 0, 0x1234, 1, []byte("ping"))
	}
	t.Run("echo from outside every frontend's source ranges", func(t *testing.T) {
		g.expect(t, echo(outsider4, vip4c), g.ext, drop(ReasonDropICMPSrcRange))
	})
	t.Run("echo from inside one frontend's source ranges", func(t *testing.T) {
		g.expect(t, echo(client4, vip4c), g.ext, want{xdpTX, reply(vip4c, client4), map[Reason]uint64{ReasonICMPEchoReply: 1}})
		other := netip.MustParseAddr("198.18.0.40")
		g.expect(t, echo(other, vip4c), g.ext, want{xdpTX, reply(vip4c, other), map[Reason]uint64{ReasonICMPEchoReply: 1}})
	})
	t.Run("echo to an address with an unrestricted frontend", func(t *testing.T) {
		g.expect(t, echo(outsider4, vip4), g.ext, want{xdpTX, reply(vip4, outsider4), map[Reason]uint64{ReasonICMPEchoReply: 1}})
	})
	t.Run("echo after the ranges change", func(t *testing.T) {
		must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4c, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 21}))
		g.expect(t, echo(outsider4, vip4c), g.ext, want{xdpTX, reply(vip4c, outsider4), map[Reason]uint64{ReasonICMPEchoReply: 1}})
		must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4c, Port: 80, Proto: datapath.TCP},
			datapath.VIPConfig{ID: 21, SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.40/32")}}))
		g.expect(t, echo(outsider4, vip4c), g.ext, drop(ReasonDropICMPSrcRange))
		must(t, g.dp.DeleteVIP(datapath.Frontend{Addr: vip4c, Port: 443, Proto: datapath.TCP}))
		g.expect(t, echo(client4, vip4c), g.ext, drop(ReasonDropICMPSrcRange))
		must(t, g.dp.DeleteVIP(datapath.Frontend{Addr: vip4c, Port: 80, Proto: datapath.TCP}))
		g.expect(t, echo(outsider4, vip4c), g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassICMP: 1}})
	})
}

// TestGoldenPathMTU: a packet too big for the link it would leave by, which may not be
// fragmented, is answered with an ICMP "too big" its sender can use: a client's, from the VIP
// quoting what the client sent; a backend's reply, from the gateway quoting what the backend
// sent. Without DF the kernel gets it (and fragments it).
func TestGoldenPathMTU(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	const mtu = 1400
	for _, c := range []string{
		fmt.Sprintf("route add %s/32 dev int0 mtu lock %d", be3v4, mtu),
		fmt.Sprintf("-6 route add %s/128 dev int0 mtu lock %d", be1v6, mtu),
		fmt.Sprintf("route add 198.18.0.64/26 dev ext0 mtu lock %d", mtu),
		fmt.Sprintf("-6 route add 2001:db8:0:0:1::/80 dev ext0 mtu lock %d", mtu),
		"neigh replace 198.18.0.70 lladdr " + macClient + " dev ext0 nud permanent",
		"neigh replace 2001:db8::1:0:0:70 lladdr " + macClient + " dev ext0 nud permanent",
	} {
		g.ns.MustIP(t, c)
	}
	farClient4 := netip.MustParseAddr("198.18.0.70")
	farClient6 := netip.MustParseAddr("2001:db8::1:0:0:70")
	big := make([]byte, 1500-40)
	mtuRest := uint32(mtu)

	t.Run("client's DF packet too big for the backend's link", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4b, 8080),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big, DF: true}
		q := in.ip(t, in.l4(t))[:28]
		out := icmpError(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip4b, 0), Dst: ap(client4, 0)}, 3, 4, mtuRest, q)
		g.expect(t, in.bytes(t), g.ext, want{xdpTX, out, map[Reason]uint64{ReasonNATForward: 1, ReasonICMPTooBigClient: 1}})
	})
	t.Run("client's UDP datagram too big, DF", func(t *testing.T) {
		must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4b, Port: 0, Proto: datapath.UDP}, datapath.VIPConfig{ID: 30}))
		must(t, g.dp.UpsertBackend(30, datapath.Backend{Addr: be3v4}))
		must(t, g.dp.SetMaglevTable(30, table(13, 30)))
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5000), Dst: ap(vip4b, 53),
			Proto: layers.IPProtocolUDP, Payload: big[:1400], DF: true}
		q := in.ip(t, in.l4(t))[:28]
		out := icmpError(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip4b, 0), Dst: ap(client4, 0)}, 3, 4, mtuRest, q)
		g.expect(t, in.bytes(t), g.ext, want{xdpTX, out, map[Reason]uint64{ReasonNATForward: 1, ReasonICMPTooBigClient: 1}})
	})
	t.Run("client's packet too big without DF goes to the kernel", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40001), Dst: ap(vip4b, 8080),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big}
		out := in
		out.Dst = ap(be3v4, 8080)
		g.expect(t, in.bytes(t), g.ext, want{xdpPass, out.bytes(t), map[Reason]uint64{ReasonNATForward: 1, ReasonPassFIB: 1}})
	})
	t.Run("client's IPv6 packet too big for the backend's link", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 40000), Dst: ap(vip6, 80),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big[:1440]}
		q := in.ip(t, in.l4(t))[:48]
		out := icmpError(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip6, 0), Dst: ap(client6, 0)}, 2, 0, mtuRest, q)
		g.expect(t, in.bytes(t), g.ext, want{xdpTX, out, map[Reason]uint64{ReasonNATForward: 1, ReasonICMPTooBigClient: 1}})
	})
	t.Run("a packet that fits still goes", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4b, 8080),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big[:mtu-40], DF: true}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE3, ap(be3v4, 8080), 63
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwd(ReasonFwdRedirect)})
	})
	t.Run("backend's DF reply too big for the client's link", func(t *testing.T) {
		in := pk{SrcMAC: macBE3, DstMAC: macInt, Src: ap(be3v4, 8080), Dst: ap(farClient4, 40000),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big, DF: true}
		q := in.ip(t, in.l4(t))[:28]
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE3, Src: ap(netipMust("198.18.1.1"), 0), Dst: ap(be3v4, 0)}, 3, 4, mtuRest, q)
		g.expect(t, in.bytes(t), g.int, want{xdpTX, out, map[Reason]uint64{ReasonICMPTooBigBackend: 1}})
	})
	t.Run("backend's reply too big without DF goes to the kernel", func(t *testing.T) {
		in := pk{SrcMAC: macBE3, DstMAC: macInt, Src: ap(be3v4, 8080), Dst: ap(farClient4, 40000),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big}
		out := in
		out.Src = ap(vip4b, 8080)
		g.expect(t, in.bytes(t), g.int, want{xdpPass, out.bytes(t), map[Reason]uint64{ReasonNATReverse: 1, ReasonPassFIB: 1}})
	})
	t.Run("backend's IPv6 reply too big for the client's link", func(t *testing.T) {
		in := pk{SrcMAC: macBE1, DstMAC: macInt, Src: ap(be1v6, 8080), Dst: ap(farClient6, 40000),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: big}
		q := in.ip(t, in.l4(t))[:48]
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(netipMust("2001:db8:1::1"), 0), Dst: ap(be1v6, 0)}, 2, 0, mtuRest, q)
		g.expect(t, in.bytes(t), g.int, want{xdpTX, out, map[Reason]uint64{ReasonICMPTooBigBackend: 1}})
	})
}
