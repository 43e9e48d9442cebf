// SPDX-License-Identifier: Apache-2.0
package gateway

// Direct server return at the gateway: the carrier (dsr.h) on the packets that open a flow
// here, none on established flows, and what happens when it does not fit.

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// dsrServices configures the golden services (services) and makes the backends of VIP ids 1,
// 2, 4 and 5 (web and dns, both families) backends of direct server return.
func dsrServices(t testing.TB, g *gw) {
	t.Helper()
	services(t, g)
	for id, be := range map[datapath.BackendID]datapath.Backend{
		1: {Addr: be1v4, Port: 8080, DSR: true}, 2: {Addr: be2v4, Port: 5353, DSR: true},
		4: {Addr: be1v6, Port: 8080, DSR: true}, 5: {Addr: be2v6, Port: 5353, DSR: true},
	} {
		must(t, g.dp.UpsertBackend(id, be))
	}
}

// carrier4 is the IPv4 option that carries frontend vip:port.
func carrier4(vip datapath.Frontend) []layers.IPv4Option {
	data := make([]byte, 6)
	binary.BigEndian.PutUint16(data, vip.Port)
	copy(data[2:], vip.Addr.AsSlice())
	return []layers.IPv4Option{{OptionType: datapath.CarrierOpt4Type, OptionLength: datapath.CarrierOpt4Len, OptionData: data}}
}

// carrier6 is the IPv6 Destination Options header that carries frontend vip:port in front of a
// header of protocol next.
func carrier6(vip datapath.Frontend, next layers.IPProtocol) []byte {
	h := make([]byte, datapath.CarrierOpt6HdrLen)
	h[0] = byte(next)
	h[1] = datapath.CarrierOpt6HdrLen/8 - 1
	h[2], h[3] = datapath.CarrierOpt6Type, datapath.CarrierOpt6Data
	binary.BigEndian.PutUint16(h[4:], vip.Port)
	copy(h[6:], vip.Addr.AsSlice())
	h[22], h[23] = 1, 0 // PadN
	return h
}

// padded is want followed by the Ethernet padding in carries after its IP datagram: a frame that
// grew at its head keeps its tail.
func padded(t testing.TB, want, in []byte) []byte {
	t.Helper()
	end := func(f []byte) int { // where an untagged frame's IP datagram ends
		if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
			return 14 + int(binary.BigEndian.Uint16(f[16:]))
		}
		return 14 + 40 + int(binary.BigEndian.Uint16(f[18:]))
	}
	return append(append([]byte(nil), want[:end(want)]...), in[end(in):]...)
}

func dsrFwd(out Reason, extra ...Reason) map[Reason]uint64 {
	m := map[Reason]uint64{ReasonNATForward: 1, out: 1}
	for _, r := range extra {
		m[r]++
	}
	return m
}

// TestGoldenDSRCarrier: the packets that open a flow at this gateway (the SYN, the handshake's
// ACK, a flow's first two datagrams) carry the frontend; the established flow's next packets do
// not.
func TestGoldenDSRCarrier(t *testing.T) {
	g := newGW(t, Options{})
	dsrServices(t, g)
	web := datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}

	syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7}
	out := syn
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE1, ap(be1v4, 8080), 63
	plain := out
	out.IPv4Options = carrier4(web)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, padded(t, out.bytes(t), syn.bytes(t)), dsrFwd(ReasonFwdRedirect, ReasonDSRCarried)})

	// The handshake's ACK: no conntrack entry yet, so it carries the frontend too.
	ack := syn
	ack.Flags, ack.Seq = "A", 8
	out.Flags, out.Seq = "A", 8
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, padded(t, out.bytes(t), ack.bytes(t)),
		dsrFwd(ReasonFwdRedirect, ReasonDSRCarried, ReasonHandshakeHit)})

	// Established: plain DNAT, by conntrack and then by the flow cache's fast path.
	ack.Seq, plain.Seq, plain.Flags = 9, 9, "A"
	for range 2 {
		g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, plain.bytes(t), fwd(ReasonFwdRedirect)})
	}

	// IPv6: a Destination Options header after the fixed header.
	syn6 := syn
	syn6.Src, syn6.Dst = ap(client6, 40001), ap(vip6, 80)
	out6 := syn6
	out6.SrcMAC, out6.DstMAC, out6.Dst, out6.TTL = macInt, macBE1, ap(be1v6, 8080), 63
	out6.Ext6 = carrier6(datapath.Frontend{Addr: vip6, Port: 80, Proto: datapath.TCP}, layers.IPProtocolTCP)
	out6.Ext6Types = []layers.IPProtocol{layers.IPProtocolIPv6Destination}
	g.expect(t, syn6.bytes(t), g.ext, want{xdpRedirect, padded(t, out6.bytes(t), syn6.bytes(t)), dsrFwd(ReasonFwdRedirect, ReasonDSRCarried)})

	// UDP: the first datagram carries it; the second (which finds the first's handshake slot
	// and makes the conntrack entry) and the next ones do not: the node has seen the first.
	q := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5000), Dst: ap(vip4, 53),
		Proto: layers.IPProtocolUDP, Payload: []byte("who")}
	qo := q
	qo.SrcMAC, qo.DstMAC, qo.Dst, qo.TTL = macInt, macBE2, ap(be2v4, 5353), 63
	plainQ := qo
	qo.IPv4Options = carrier4(datapath.Frontend{Addr: vip4, Port: 53, Proto: datapath.UDP})
	g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, padded(t, qo.bytes(t), q.bytes(t)), dsrFwd(ReasonFwdRedirect, ReasonDSRCarried)})
	for range 2 {
		g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, plainQ.bytes(t), fwd(ReasonFwdRedirect)})
	}

	// A backend that is not of direct server return: no carrier.
	nd := syn
	nd.Dst, nd.Src = ap(vip4, 443), ap(client4, 40002)
	ndo := nd
	ndo.SrcMAC, ndo.DstMAC, ndo.Dst, ndo.TTL = macInt, macBE1, ap(be1v4, 8443), 63
	g.expect(t, nd.bytes(t), g.ext, want{xdpRedirect, ndo.bytes(t), fwd(ReasonFwdRedirect)})
}

// TestGoldenDSRNoRoom: a packet the carrier would not fit on (the egress MTU is 1500). A UDP
// datagram that cannot be fragmented (DF, IPv6) is answered with an ICMP "too big" for 1500
// less the carrier, from the VIP, quoting the datagram exactly as the client sent it; one that
// may be fragmented, and a TCP segment, go without the carrier.
func TestGoldenDSRNoRoom(t *testing.T) {
	g := newGW(t, Options{})
	dsrServices(t, g)
	big := bytes.Repeat([]byte{'x'}, 1500-20-8) // an IPv4 UDP datagram of exactly 1500 bytes

	q := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5001), Dst: ap(vip4, 53),
		Proto: layers.IPProtocolUDP, Payload: big, DF: true, IPID: 0x1234}
	in := q.bytes(t)
	quote := append([]byte(nil), in[14:14+28]...)
	icmp := pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip4, 0), Dst: ap(client4, 0)}
	want4 := icmpError(t, icmp, 3, 4, 1500-datapath.CarrierOpt4Len, quote)
	g.expect(t, in, g.ext, want{xdpTX, want4, map[Reason]uint64{ReasonNATForward: 1, ReasonDSRTooBig: 1}})

	// Without DF: DNATed, no carrier.
	q.DF, q.Src = false, ap(client4, 5002)
	qo := q
	qo.SrcMAC, qo.DstMAC, qo.Dst, qo.TTL = macInt, macBE2, ap(be2v4, 5353), 63
	g.expect(t, q.bytes(t), g.ext, want{xdpRedirect, qo.bytes(t), dsrFwd(ReasonFwdRedirect, ReasonDSRNoRoom)})

	// IPv6: a "packet too big" quoting the IPv6 header and 8 bytes.
	q6 := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 5003), Dst: ap(vip6, 53),
		Proto: layers.IPProtocolUDP, Payload: bytes.Repeat([]byte{'y'}, 1500-40-8)}
	in6 := q6.bytes(t)
	icmp6 := pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip6, 0), Dst: ap(client6, 0)}
	want6 := icmpError(t, icmp6, 2, 0, 1500-datapath.CarrierOpt6HdrLen, in6[14:14+48])
	g.expect(t, in6, g.ext, want{xdpTX, want6, map[Reason]uint64{ReasonNATForward: 1, ReasonDSRTooBig: 1}})

	// A TCP segment that opens a flow here (after an ECMP move, say) and does not fit: without.
	seg := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40010), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "A", Seq: 100, Payload: bytes.Repeat([]byte{'z'}, 1500-40)}
	so := seg
	so.SrcMAC, so.DstMAC, so.Dst, so.TTL = macInt, macBE1, ap(be1v4, 8080), 63
	g.expect(t, seg.bytes(t), g.ext, want{xdpRedirect, so.bytes(t), dsrFwd(ReasonFwdRedirect, ReasonDSRNoRoom)})

	// A client packet with IPv4 options of its own: the carrier must be the only one: without.
	opt := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40011), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 1,
		IPv4Options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}}
	oo := opt
	oo.SrcMAC, oo.DstMAC, oo.Dst, oo.TTL = macInt, macBE1, ap(be1v4, 8080), 63
	g.expect(t, opt.bytes(t), g.ext, want{xdpRedirect, oo.bytes(t), dsrFwd(ReasonFwdRedirect, ReasonDSRNoRoom)})
}

// TestGoldenDSRForged: a packet to a VIP that arrives with a carrier (only a gateway writes
// them) is dropped, established flow or not, DSR backend or not, whatever frontend it names: a
// node would otherwise take it for the gateway's. A packet to another address passes
// untouched; an option that is not the carrier, or a carrier that is not first (which a node
// refuses), is forwarded as any packet with options.
func TestGoldenDSRForged(t *testing.T) {
	g := newGW(t, Options{})
	dsrServices(t, g)
	forged := datapath.Frontend{Addr: vip4, Port: 22, Proto: datapath.TCP} // a frontend of the attacker's choosing
	drop := want{xdpDrop, nil, map[Reason]uint64{ReasonDropCarrierForged: 1}}

	syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40020), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7, IPv4Options: carrier4(forged)}
	g.expect(t, syn.bytes(t), g.ext, drop)
	// Established: the flow opened without a carrier (to the backend that is not of DSR, to keep
	// the expected bytes plain), then one arrives.
	open := syn
	open.IPv4Options, open.Src, open.Dst = nil, ap(client4, 40021), ap(vip4, 443)
	oo := open
	oo.SrcMAC, oo.DstMAC, oo.Dst, oo.TTL = macInt, macBE1, ap(be1v4, 8443), 63
	g.expect(t, open.bytes(t), g.ext, want{xdpRedirect, oo.bytes(t), fwd(ReasonFwdRedirect)})
	open.Flags, open.Seq, oo.Flags, oo.Seq = "A", 8, "A", 8
	g.expect(t, open.bytes(t), g.ext, want{xdpRedirect, oo.bytes(t), map[Reason]uint64{ReasonNATForward: 1, ReasonFwdRedirect: 1, ReasonHandshakeHit: 1}})
	g.expect(t, open.bytes(t), g.ext, want{xdpRedirect, oo.bytes(t), fwd(ReasonFwdRedirect)})
	open.IPv4Options = carrier4(forged)
	g.expect(t, open.bytes(t), g.ext, drop)
	// A backend that is not of direct server return, and UDP.
	nd := syn
	nd.Dst = ap(vip4, 443)
	g.expect(t, nd.bytes(t), g.ext, drop)
	q := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 5010), Dst: ap(vip4, 53),
		Proto: layers.IPProtocolUDP, Payload: []byte("who"), IPv4Options: carrier4(forged)}
	g.expect(t, q.bytes(t), g.ext, drop)
	// A port the VIP does not serve: still the VIP's address.
	np := syn
	np.Dst = ap(vip4, 9999)
	g.expect(t, np.bytes(t), g.ext, drop)

	// IPv6: a Destination Options header whose first option is the carrier's.
	syn6 := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 40022), Dst: ap(vip6, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7,
		Ext6:      carrier6(datapath.Frontend{Addr: vip6, Port: 22, Proto: datapath.TCP}, layers.IPProtocolTCP),
		Ext6Types: []layers.IPProtocol{layers.IPProtocolIPv6Destination}}
	g.expect(t, syn6.bytes(t), g.ext, drop)

	// Not to a VIP: not ours, untouched.
	other := syn
	other.Dst = ap(client4, 80)
	g.expect(t, other.bytes(t), g.ext, want{xdpPass, other.bytes(t), map[Reason]uint64{ReasonPassNotVIP: 1}})

	// The carrier after another option: a node refuses it (xdp/dsr), so it is forwarded as any
	// packet with options (without a carrier of ours).
	late := syn
	late.Src = ap(client4, 40023)
	late.IPv4Options = append([]layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 1}}, carrier4(forged)...)
	lo := late
	lo.SrcMAC, lo.DstMAC, lo.Dst, lo.TTL = macInt, macBE1, ap(be1v4, 8080), 63
	g.expect(t, late.bytes(t), g.ext, want{xdpRedirect, lo.bytes(t), dsrFwd(ReasonFwdRedirect, ReasonDSRNoRoom)})
}
