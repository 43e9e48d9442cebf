// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"testing"

	"github.com/google/gopacket/layers"
)

// TestGoldenICMP: echo requests to a VIP are answered; ICMP errors about a VIP flow the gateway
// knows are relayed to its backend (from the client side) or to its client (from the backend
// side), with outer and quoted headers rewritten and every checksum right.
func TestGoldenICMP(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	// The flows the errors below are about.
	g.open(t, pk{Src: ap(client4, 40000), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "A"})
	g.open(t, pk{Src: ap(client4, 5000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("query")})
	g.open(t, pk{Src: ap(client6, 40000), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "A"})

	t.Run("echo to VIP v4", func(t *testing.T) {
		req := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 0), Dst: ap(vip4, 0), Proto: layers.IPProtocolICMPv4}
		in := icmpEcho(t, req, 8, 0x1234, 1, []byte("ping"))
		rep := pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip4, 0), Dst: ap(client4, 0), Proto: layers.IPProtocolICMPv4}
		g.expect(t, in, g.ext, want{xdpTX, icmpEcho(t, rep, 0, 0x1234, 1, []byte("ping")), map[Reason]uint64{ReasonICMPEchoReply: 1}})
	})
	t.Run("echo to VIP v6", func(t *testing.T) {
		req := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 0), Dst: ap(vip6, 0), Proto: layers.IPProtocolICMPv6}
		in := icmpEcho(t, req, 128, 0x1234, 1, []byte("ping6"))
		rep := pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip6, 0), Dst: ap(client6, 0), Proto: layers.IPProtocolICMPv6}
		g.expect(t, in, g.ext, want{xdpTX, icmpEcho(t, rep, 129, 0x1234, 1, []byte("ping6")), map[Reason]uint64{ReasonICMPEchoReply: 1}})
	})
	t.Run("echo to another address passes", func(t *testing.T) {
		req := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 0), Dst: ap(gwExt4, 0), Proto: layers.IPProtocolICMPv4}
		g.expect(t, icmpEcho(t, req, 8, 1, 1, nil), g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassICMP: 1}})
	})

	// A router on the client's path cannot forward our reply VIP:80 -> client:40000 and sends
	// "fragmentation needed" to the VIP: it must reach backend 1, quoting backend:8080 -> client.
	t.Run("frag needed to VIP goes to the backend", func(t *testing.T) {
		quoted := pk{Src: ap(vip4, 80), Dst: ap(client4, 40000), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 100)}
		quotedBE := quoted
		quotedBE.Src = ap(be1v4, 8080)
		q := quoted.ip(t, quoted.l4(t))[:60]
		qBE := quotedBE.ip(t, quotedBE.l4(t))[:60]
		in := icmpError(t, pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router4, 0), Dst: ap(vip4, 0)}, 3, 4, 1400, q)
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(router4, 0), Dst: ap(be1v4, 0), TTL: 63}, 3, 4, 1400, qBE)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("short quote (8 bytes of UDP) to VIP", func(t *testing.T) {
		quoted := pk{Src: ap(vip4, 53), Dst: ap(client4, 5000), Proto: layers.IPProtocolUDP, Payload: []byte("answer")}
		quotedBE := quoted
		quotedBE.Src = ap(be2v4, 5353)
		q := quoted.ip(t, quoted.l4(t))[:28]
		qBE := quotedBE.ip(t, quotedBE.l4(t))[:28]
		in := icmpError(t, pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router4, 0), Dst: ap(vip4, 0)}, 11, 0, 0, q)
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE2, Src: ap(router4, 0), Dst: ap(be2v4, 0), TTL: 63}, 11, 0, 0, qBE)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("packet too big to VIP v6 goes to the backend", func(t *testing.T) {
		quoted := pk{Src: ap(vip6, 80), Dst: ap(client6, 40000), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 200)}
		quotedBE := quoted
		quotedBE.Src = ap(be1v6, 8080)
		q := quoted.ip(t, quoted.l4(t))[:120]
		qBE := quotedBE.ip(t, quotedBE.l4(t))[:120]
		in := icmpError(t, pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router6, 0), Dst: ap(vip6, 0)}, 2, 0, 1280, q)
		out := icmpError(t, pk{SrcMAC: macInt, DstMAC: macBE1, Src: ap(router6, 0), Dst: ap(be1v6, 0), TTL: 63}, 2, 0, 1280, qBE)
		g.expect(t, in, g.ext, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToBackend: 1, ReasonFwdRedirect: 1}})
	})
	// The backend answers a UDP datagram with "port unreachable": the client must see it from
	// the VIP, quoting client -> VIP:53.
	t.Run("port unreachable from backend goes to the client", func(t *testing.T) {
		quoted := pk{Src: ap(client4, 5000), Dst: ap(be2v4, 5353), Proto: layers.IPProtocolUDP, Payload: []byte("query"), TTL: 63}
		quotedVIP := quoted
		quotedVIP.Dst = ap(vip4, 53)
		q := quoted.ip(t, quoted.l4(t))
		qv := quotedVIP.ip(t, quotedVIP.l4(t))
		in := icmpError(t, pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(be2v4, 0), Dst: ap(client4, 0)}, 3, 3, 0, q)
		out := icmpError(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: ap(vip4, 0), Dst: ap(client4, 0), TTL: 63}, 3, 3, 0, qv)
		g.expect(t, in, g.int, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToClient: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("error from a cluster router keeps its source", func(t *testing.T) {
		quoted := pk{Src: ap(client6, 40000), Dst: ap(be1v6, 8080), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 50)}
		quotedVIP := quoted
		quotedVIP.Dst = ap(vip6, 80)
		q := quoted.ip(t, quoted.l4(t))
		qv := quotedVIP.ip(t, quotedVIP.l4(t))
		rtr := ap(netipMust("2001:db8:1::1"), 0)
		in := icmpError(t, pk{SrcMAC: macBE1, DstMAC: macInt, Src: rtr, Dst: ap(client6, 0)}, 3, 0, 0, q)
		out := icmpError(t, pk{SrcMAC: macExt, DstMAC: macClient, Src: rtr, Dst: ap(client6, 0), TTL: 63}, 3, 0, 0, qv)
		g.expect(t, in, g.int, want{xdpRedirect, out, map[Reason]uint64{ReasonICMPToClient: 1, ReasonFwdRedirect: 1}})
	})
	t.Run("error about another flow passes", func(t *testing.T) {
		quoted := pk{Src: ap(client4, 5000), Dst: ap(other4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("q")}
		in := icmpError(t, pk{SrcMAC: macRouter, DstMAC: macExt, Src: ap(router4, 0), Dst: ap(client4, 0)}, 3, 3, 0, quoted.ip(t, quoted.l4(t)))
		g.expect(t, in, g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassICMP: 1}})
	})
}

// icmpEcho builds an echo request/reply (type typ) from p.Src to p.Dst.
func icmpEcho(t *testing.T, p pk, typ uint8, id, seq uint16, data []byte) []byte {
	t.Helper()
	rest := uint32(id)<<16 | uint32(seq)
	return icmpError(t, p, typ, 0, rest, data)
}

// TestGoldenFragments: the fragments of one datagram to a VIP reach one backend; a fragment whose
// first fragment was never seen is dropped and counted; fragments to other hosts pass untouched.
func TestGoldenFragments(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	payload := make([]byte, 200)
	for i := range payload {
		payload[i] = byte(i)
	}
	for _, v6 := range []bool{false, true} {
		name := "v4"
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 7000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: payload, IPID: 0x4242}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE2, ap(be2v4, 5353), 63
		frag := pk.fragments4
		if v6 {
			name = "v6"
			in.Src, in.Dst = ap(client6, 7000), ap(vip6, 53)
			out.Src, out.Dst = in.Src, ap(be2v6, 5353)
			frag = pk.fragments6
		}
		t.Run(name, func(t *testing.T) {
			a, b := frag(in, t, 96)
			wa, wb := frag(out, t, 96)
			// The second fragment before the first: nothing to go by.
			g.expect(t, b, g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropFragUnknown: 1}})
			g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
			g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
		})
	}
	t.Run("fragments to another host pass", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 7000), Dst: ap(other4, 53), Proto: layers.IPProtocolUDP, Payload: payload, IPID: 7}
		a, b := in.fragments4(t, 96)
		g.expect(t, a, g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassNotVIP: 1}})
		g.expect(t, b, g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassNotVIP: 1}})
	})
}

// TestGoldenPassUnchanged: traffic that is not for a VIP address reaches the host byte for byte.
func TestGoldenPassUnchanged(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	notVIP := map[Reason]uint64{ReasonPassNotVIP: 1}
	opts := []layers.IPv4Option{{OptionType: 7, OptionLength: 7, OptionData: []byte{4, 0, 0, 0, 0}}, {OptionType: 0}}
	arp := make([]byte, 42)
	copy(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0xc, 1, 0x08, 0x06})
	// A VIP address on an unserved port or protocol is no longer passed: TestGoldenSides.
	cases := []struct {
		name    string
		in      []byte
		reasons map[Reason]uint64
	}{
		{"tcp to another host", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1), Dst: ap(other4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}.bytes(t), notVIP},
		{"ipv4 options to another host", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1), Dst: ap(other4, 80), Proto: layers.IPProtocolTCP, Flags: "S", IPv4Options: opts}.bytes(t), notVIP},
		{"ipv6 extension headers to another host", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1), Dst: ap(netipMust("2001:db8:200::1"), 80), Proto: layers.IPProtocolTCP, Flags: "S", Ext6: ext6HopDst(), Ext6Types: []layers.IPProtocol{0}}.bytes(t), notVIP},
		{"arp", arp, map[Reason]uint64{ReasonPassNotIP: 1}},
		{"ipv6 with too many extension headers", manyExt6(t), map[Reason]uint64{ReasonPassIPv6Ext: 1}},
		{"ipv6 routing header with segments left to a VIP", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "S",
			Ext6: []byte{6, 2, 0, 1, 0, 0, 0, 0, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, Ext6Types: []layers.IPProtocol{43}}.bytes(t), map[Reason]uint64{ReasonPassIPv6Ext: 1}},
		{"TTL 1 to a VIP: the kernel answers", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S", TTL: 1}.bytes(t), map[Reason]uint64{ReasonPassTTL: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g.expect(t, c.in, g.ext, want{xdpPass, nil, c.reasons})
		})
	}
	t.Run("no neighbour yet: rewritten, handed to the kernel", func(t *testing.T) {
		in, out := clientTCP(1, ap(vip4, 8001), "S", ap(beNoNei4, 80), "")
		out.SrcMAC, out.DstMAC, out.TTL = macClient, macExt, 64 // the kernel routes it: MACs and TTL as received
		g.expect(t, in.bytes(t), g.ext, want{xdpPass, out.bytes(t), map[Reason]uint64{ReasonNATForward: 1, ReasonPassNoNeigh: 1}})
	})
	t.Run("udp6 with zero checksum to a VIP is dropped", func(t *testing.T) {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1), Dst: ap(vip6, 53), Proto: layers.IPProtocolUDP, UDPZeroCsum: true}
		g.expect(t, in.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropUDP6ZeroCsum: 1}})
	})
}

// manyExt6 is an IPv6 packet with 7 Destination Options headers (more than we walk).
func manyExt6(t *testing.T) []byte {
	var ext []byte
	for i := range 7 {
		next := byte(60)
		if i == 6 {
			next = 6
		}
		ext = append(ext, next, 0, 1, 4, 0, 0, 0, 0)
	}
	p := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "S",
		Ext6: ext, Ext6Types: []layers.IPProtocol{60}}
	return p.bytes(t)
}

// TestGoldenMalformed: hostile and broken packets are never forwarded. A packet cut at every
// length, and packets whose headers lie, get PASS (unchanged) or DROP, never TX or REDIRECT.
func TestGoldenMalformed(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	valid := [][]byte{
		pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1), Dst: ap(vip4, 80), Proto: layers.IPProtocolTCP, Flags: "S"}.bytes(t),
		pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 1), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("abc")}.bytes(t),
		pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client6, 1), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "S", Ext6: ext6HopDst(), Ext6Types: []layers.IPProtocol{0}}.bytes(t),
		pk{SrcMAC: macClient, DstMAC: macExt, VLAN: 7, Src: ap(client4, 1), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("abc")}.bytes(t),
	}
	check := func(t *testing.T, in []byte) {
		t.Helper()
		res := g.run(t, in, g.ext)
		switch res.Verdict {
		case xdpPass:
			if string(res.Data) != string(in) {
				t.Errorf("passed a modified packet\n%s\n%s", dump("in", in), dump("out", res.Data))
			}
		case xdpDrop:
		default:
			t.Errorf("verdict %s for a malformed packet\n%s", verdictNames[res.Verdict], dump("in", in))
		}
	}
	t.Run("truncated at every length", func(t *testing.T) {
		for _, v := range valid {
			for n := 14; n < ipEnd(v); n++ {
				// Keep the IP length fields claiming the full packet: truncation must be caught.
				check(t, v[:n])
			}
		}
	})
	ipOff := 14
	lie := func(base []byte, f func(b []byte)) []byte {
		b := append([]byte{}, base...)
		f(b)
		return b
	}
	v4, udp4, v6 := valid[0], valid[1], valid[2]
	cases := map[string][]byte{
		"ihl 4":                 lie(v4, func(b []byte) { b[ipOff] = 0x44 }),
		"ihl 15 past the end":   lie(v4, func(b []byte) { b[ipOff] = 0x4f }),
		"tot_len past the end":  lie(v4, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+2:], 1500) }),
		"tot_len below ihl":     lie(v4, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+2:], 12) }),
		"tot_len cuts tcp":      lie(v4, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+2:], 30) }),
		"version 5":             lie(v4, func(b []byte) { b[ipOff] = 0x55 }),
		"tcp doff 4":            lie(v4, func(b []byte) { b[ipOff+20+12] = 0x40 }),
		"tcp doff past the end": lie(v4, func(b []byte) { b[ipOff+20+12] = 0xf0 }),
		"udp len past the end":  lie(udp4, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+20+4:], 400) }),
		"udp len below 8":       lie(udp4, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+20+4:], 4) }),
		"ipv6 payload past end": lie(v6, func(b []byte) { binary.BigEndian.PutUint16(b[ipOff+4:], 900) }),
		"ipv6 ext len past end": lie(v6, func(b []byte) { b[ipOff+40+1] = 200 }),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) { check(t, in) })
	}
	r := g.reasons(t)
	if r[ReasonDropMalformedL4] == 0 || r[ReasonPassMalformedL3] == 0 {
		t.Errorf("malformed counters did not move: %v", r)
	}
	if r[ReasonFwdRedirect] != 0 || r[ReasonFwdTX] != 0 {
		t.Errorf("something malformed was forwarded: %v", r)
	}
}

// ipEnd is where the IP datagram of frame b ends (frames are padded to 60 bytes).
func ipEnd(b []byte) int {
	off := 14
	if b[12] == 0x81 {
		off = 18
	}
	if b[off]>>4 == 4 {
		return off + int(binary.BigEndian.Uint16(b[off+2:]))
	}
	return off + 40 + int(binary.BigEndian.Uint16(b[off+4:]))
}
