// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
)

// TestGoldenBogusSources: a packet to a VIP from an address no client can have is dropped and
// counted, from either side; balanced, a multicast source made bpf_fib_lookup fail and the
// DNATed packet was passed to the gateway's kernel (found by FuzzParity in xdp/afxdp).
func TestGoldenBogusSources(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	for _, src := range []string{"0.1.2.3", "127.0.0.1", "169.254.1.1", "224.0.0.5", "239.1.1.1", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::ffff:198.18.0.10", "fe80::1", "febf::1", "ff02::1", "ff30:3030::1"} {
		a := netip.MustParseAddr(src)
		dst := ap(vip4, 80)
		if a.Is6() {
			dst = ap(vip6, 80)
		}
		for _, side := range []int{g.ext, g.int} {
			in := pk{SrcMAC: macClient, DstMAC: macExt, Src: netip.AddrPortFrom(a, 40000), Dst: dst,
				Proto: layers.IPProtocolTCP, Flags: "S", Seq: 1}
			g.expect(t, in.bytes(t), side, want{xdpDrop, nil, map[Reason]uint64{ReasonDropBogusSource: 1}})
		}
	}
	// The edges of the ranges are clients.
	for _, src := range []string{"1.0.0.1", "126.255.255.255", "128.0.0.1", "169.253.1.1", "223.255.255.254", "fec0::1", "2001:db8::10"} {
		a := netip.MustParseAddr(src)
		dst, be := ap(vip4, 80), ap(be1v4, 8080)
		if a.Is6() {
			dst, be = ap(vip6, 80), ap(be1v6, 8080)
		}
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: netip.AddrPortFrom(a, 40000), Dst: dst,
			Proto: layers.IPProtocolTCP, Flags: "S", Seq: 1}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE1, be, 63
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwd(ReasonFwdRedirect)})
	}
}
