// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// siteSources writes the golden site's own prefixes: the backends' networks (the cluster) and
// the gateway's address on the client side.
func siteSources(t *testing.T, g *gw) {
	t.Helper()
	for p, k := range map[string]datapath.SiteKind{
		"198.18.1.0/24": datapath.SiteCluster, "2001:db8:1::/64": datapath.SiteCluster,
		"198.18.0.1/32": datapath.SiteGateway, "2001:db8::1/128": datapath.SiteGateway,
	} {
		must(t, g.dp.SetSiteSource(netip.MustParsePrefix(p), k))
	}
}

// TestGoldenSides: what a packet may do depends on the side of the gateway it arrived from
// (side.h). Each case would have been forwarded (or reverse-NATed) before interface roles.
func TestGoldenSides(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	siteSources(t, g)
	drop := func(r Reason) want { return want{xdpDrop, nil, map[Reason]uint64{r: 1}} }

	t.Run("backend-sourced packet from the client side is not reverse-NATed", func(t *testing.T) {
		// A reflector: "from 198.18.1.10:8080" to any address would leave as VIP:80.
		for _, in := range []pk{
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(be1v4, 8080), Dst: ap(netipMust("198.18.0.99"), 5555), Proto: layers.IPProtocolTCP, Flags: "SA"},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(be2v4, 5353), Dst: ap(client4, 5000), Proto: layers.IPProtocolUDP, Payload: []byte("x")},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(be1v6, 8080), Dst: ap(client6, 5000), Proto: layers.IPProtocolTCP, Flags: "A"},
			// An all-ports VIP's backend: every port of it.
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(be3v4, 22), Dst: ap(client4, 5000), Proto: layers.IPProtocolTCP, Flags: "A"},
		} {
			g.expect(t, in.bytes(t), g.ext, drop(ReasonDropReplyWrongSide))
		}
	})

	t.Run("site sources from the client side are forged", func(t *testing.T) {
		for _, src := range []netip.Addr{be1v4, netipMust("198.18.1.77"), vip4, vip4b, netipMust("198.18.0.1")} {
			in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
			g.expect(t, in.bytes(t), g.ext, drop(ReasonDropSiteSource))
		}
		in6 := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(be1v6, 40000), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		g.expect(t, in6.bytes(t), g.ext, drop(ReasonDropSiteSource))
	})

	t.Run("an in-cluster client on the cluster side is balanced", func(t *testing.T) {
		in := pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(netipMust("198.18.1.77"), 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE1, ap(be1v4, 8080), 63
		g.expect(t, in.bytes(t), g.int, want{xdpTX, out.bytes(t), fwd(ReasonFwdTX)})
	})

	t.Run("outside sources on the cluster side are not balanced", func(t *testing.T) {
		in := pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(client4, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		g.expect(t, in.bytes(t), g.int, drop(ReasonDropWrongSide))
		// The gateway's own address, wherever it arrives.
		own := in
		own.Src = ap(netipMust("198.18.0.1"), 40000)
		g.expect(t, own.bytes(t), g.int, drop(ReasonDropSiteSource))
	})

	t.Run("a VIP address on an unserved port or protocol is dropped", func(t *testing.T) {
		for _, in := range []pk{
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4, 22), Proto: layers.IPProtocolTCP, Flags: "S"},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolUDP, Payload: []byte("x")},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 40000), Dst: ap(vip6, 443), Proto: layers.IPProtocolTCP, Flags: "S"},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 0), Dst: ap(vip4, 0), Proto: layers.IPProtocolGRE, Payload: []byte{0, 0, 0x08, 0}},
			{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 0), Dst: ap(vip4, 0), Proto: 132, Payload: make([]byte, 12)}, // SCTP
		} {
			g.expect(t, in.bytes(t), g.ext, drop(ReasonDropVIPUnserved))
		}
		// Not a VIP address: the kernel's, as before.
		other := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(netipMust("198.18.0.1"), 22), Proto: layers.IPProtocolTCP, Flags: "S"}
		g.expect(t, other.bytes(t), g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassNotVIP: 1}})
	})

	t.Run("an established flow is not replayed on another side", func(t *testing.T) {
		syn, toBE := clientTCP(42000, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
		g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE.bytes(t), fwd(ReasonFwdRedirect)})
		ack, ackOut := clientTCP(42000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
		g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackOut.bytes(t), fwdHS(ReasonFwdRedirect)})
		g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackOut.bytes(t), fwd(ReasonFwdRedirect)})
		// The same tuple from the cluster side: a client's source there is outside the site.
		g.expect(t, ack.bytes(t), g.int, drop(ReasonDropWrongSide))
	})
}

// TestGoldenSidesOneArmed: on an interface of role both, the source decides the side.
func TestGoldenSidesOneArmed(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	siteSources(t, g)
	must(t, g.ns.Do(func() error { return g.dp.Attach("ext0", datapath.AttachAuto, datapath.RoleBoth) }))
	reply := pk{SrcMAC: macBE1, DstMAC: macExt, Src: ap(be1v4, 8080), Dst: ap(client4, 40000), Proto: layers.IPProtocolTCP, Flags: "SA"}
	out := reply
	out.SrcMAC, out.DstMAC, out.Src, out.TTL = macExt, macClient, ap(vip4, 80), 63
	g.expect(t, reply.bytes(t), g.ext, want{xdpTX, out.bytes(t), map[Reason]uint64{ReasonNATReverse: 1, ReasonFwdTX: 1}})
	syn, toBE := clientTCP(43000, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE.bytes(t), fwd(ReasonFwdRedirect)})
	// A site source is the cluster's here, but a VIP or the gateway's own address never is.
	for _, src := range []netip.Addr{vip4, netipMust("198.18.0.1")} {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		g.expect(t, in.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropSiteSource: 1}})
	}
	// Once the backend's prefix is no longer the site's, its reply is a client's packet.
	must(t, g.dp.DeleteSiteSource(netip.MustParsePrefix("198.18.1.0/24")))
	g.expect(t, reply.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropReplyWrongSide: 1}})
}

// TestGoldenNoRole: an interface the datapath did not attach to has no role: nothing to or from
// a VIP's endpoints is balanced there.
func TestGoldenNoRole(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	must(t, g.ns.Do(func() error { return g.dp.Detach("ext0") }))
	syn, _ := clientTCP(44000, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
	g.expect(t, syn.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropNoRole: 1}})
}
