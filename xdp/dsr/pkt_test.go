// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Test addresses: the lab ranges only.
var (
	client4 = netip.MustParseAddr("198.18.1.10")
	vip4    = netip.MustParseAddr("198.18.100.1")
	pod4    = netip.MustParseAddr("198.19.2.20")
	node4   = netip.MustParseAddr("198.19.0.2")
	client6 = netip.MustParseAddr("2001:db8:1::10")
	vip6    = netip.MustParseAddr("2001:db8:100::1")
	pod6    = netip.MustParseAddr("2001:db8:2::20")
	node6   = netip.MustParseAddr("2001:db8::2")

	macA, _ = net.ParseMAC("02:00:00:00:00:0a")
	macB, _ = net.ParseMAC("02:00:00:00:00:0b")
)

// pk describes a test packet. Every length and checksum is computed by gopacket, so expected
// outputs are built independently of the programs' incremental updates.
type pk struct {
	Src, Dst netip.AddrPort
	Proto    layers.IPProtocol
	Flags    string // TCP: S A F R P
	Payload  []byte
	// Carrier, when valid, is the VIP frontend carried (IPv4 option or IPv6 Destination
	// Options header, datapath.h's format).
	Carrier netip.AddrPort
	// IPv4: more options (after the carrier), the id, fragment fields.
	Opts4   []byte
	ID      uint16
	FragOff uint16 // in bytes, a multiple of 8
	MF      bool
	// UDPZeroCsum sends a UDP checksum of 0.
	UDPZeroCsum bool
}

func (p pk) is4() bool { return p.Src.Addr().Is4() }

// carrier4 is the IPv4 carrier option for frontend f.
func carrier4(f netip.AddrPort) []byte {
	b := []byte{0x9e, 8, 0, 0}
	binary.BigEndian.PutUint16(b[2:], f.Port())
	a := f.Addr().As4()
	return append(b, a[:]...)
}

// carrier6 is the IPv6 carrier (a 24-byte Destination Options header) for frontend f, with
// next header next.
func carrier6(f netip.AddrPort, next layers.IPProtocol) []byte {
	b := []byte{byte(next), 2, 0x1e, 18, 0, 0}
	binary.BigEndian.PutUint16(b[4:], f.Port())
	a := f.Addr().As16()
	b = append(b, a[:]...)
	return append(b, 1, 0)
}

// netLayer is the IP header (no options, no extension headers) for pseudo-header checksums.
func (p pk) netLayer() gopacket.NetworkLayer {
	if p.is4() {
		return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: p.Proto, Id: p.ID,
			SrcIP: p.Src.Addr().AsSlice(), DstIP: p.Dst.Addr().AsSlice()}
	}
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: p.Proto,
		SrcIP: p.Src.Addr().AsSlice(), DstIP: p.Dst.Addr().AsSlice()}
}

// l4 is the transport header and payload with a correct checksum.
func (p pk) l4(t testing.TB) []byte {
	t.Helper()
	nl := p.netLayer()
	var ls []gopacket.SerializableLayer
	switch p.Proto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.Src.Port()), DstPort: layers.TCPPort(p.Dst.Port()),
			Seq: 1000, Window: 65535, DataOffset: 5}
		for _, f := range p.Flags {
			switch f {
			case 'S':
				tcp.SYN = true
			case 'A':
				tcp.ACK = true
			case 'F':
				tcp.FIN = true
			case 'R':
				tcp.RST = true
			case 'P':
				tcp.PSH = true
			}
		}
		must(t, tcp.SetNetworkLayerForChecksum(nl))
		ls = []gopacket.SerializableLayer{tcp}
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.Src.Port()), DstPort: layers.UDPPort(p.Dst.Port())}
		must(t, udp.SetNetworkLayerForChecksum(nl))
		ls = []gopacket.SerializableLayer{udp}
	default:
		return p.Payload
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		append(ls, gopacket.Payload(p.Payload))...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if p.Proto == layers.IPProtocolUDP && p.UDPZeroCsum {
		b[6], b[7] = 0, 0
	}
	return b
}

// ip wraps data (L4 bytes, or a fragment of them) in the IP header, with the carrier.
func (p pk) ip(t testing.TB, data []byte) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if p.is4() {
		ip := p.netLayer().(*layers.IPv4)
		ip.FragOffset = p.FragOff / 8
		if p.MF {
			ip.Flags = layers.IPv4MoreFragments
		}
		raw := append([]byte(nil), p.Opts4...)
		if p.Carrier.IsValid() {
			raw = append(carrier4(p.Carrier), raw...)
		}
		if len(raw) == 0 { // gopacket computes the lengths and the checksum
			must(t, gopacket.SerializeLayers(buf, opts, ip, gopacket.Payload(data)))
			return buf.Bytes()
		}
		if len(raw)%4 != 0 {
			t.Fatalf("IPv4 options of %d bytes: want a multiple of 4", len(raw))
		}
		// The options go in as raw bytes (gopacket would rewrite a malformed one): IHL says
		// how many, and the header checksum is computed here.
		ip.IHL = uint8(5 + len(raw)/4)
		must(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: false},
			ip, gopacket.Payload(append(raw, data...))))
		b := buf.Bytes()
		b[0] = 0x40 | ip.IHL
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		b[10], b[11] = 0, 0
		binary.BigEndian.PutUint16(b[10:], ipChecksum(b[:ip.IHL*4]))
		return b
	}
	ip6 := p.netLayer().(*layers.IPv6)
	payload := data
	if p.Carrier.IsValid() {
		ip6.NextHeader = layers.IPProtocolIPv6Destination
		payload = append(carrier6(p.Carrier, p.Proto), data...)
	}
	must(t, gopacket.SerializeLayers(buf, opts, ip6, gopacket.Payload(payload)))
	return buf.Bytes()
}

// ipChecksum is the IPv4 header checksum of h (whose checksum field is 0).
func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// frame wraps an IP packet in Ethernet, without padding short frames to 60 bytes (gopacket
// would: the stripped packet would then differ from the expected one by the padding).
func frame(t testing.TB, ip []byte) []byte {
	t.Helper()
	et := layers.EthernetTypeIPv4
	if ip[0]>>4 == 6 {
		et = layers.EthernetTypeIPv6
	}
	b := append(append([]byte(nil), macB...), macA...)
	b = binary.BigEndian.AppendUint16(b, uint16(et))
	return append(b, ip...)
}

// bytes is the whole frame.
func (p pk) bytes(t testing.TB) []byte {
	t.Helper()
	return frame(t, p.ip(t, p.l4(t)))
}

// without returns p without its carrier.
func (p pk) without() pk {
	p.Carrier = netip.AddrPort{}
	return p
}

// ip6Frag is an IPv6 frame of p's datagram with a Fragment header (id 0x01020304) holding
// data at offset off (bytes), the carrier (if any) before it.
func (p pk) ip6Frag(t testing.TB, data []byte, off uint16, more bool) []byte {
	t.Helper()
	fh := make([]byte, 8)
	fh[0] = byte(p.Proto)
	v := off
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(fh[2:], v)
	binary.BigEndian.PutUint32(fh[4:], 0x01020304)
	ip6 := p.netLayer().(*layers.IPv6)
	ip6.NextHeader = layers.IPProtocolIPv6Fragment
	payload := append(fh, data...)
	if p.Carrier.IsValid() {
		ip6.NextHeader = layers.IPProtocolIPv6Destination
		payload = append(carrier6(p.Carrier, layers.IPProtocolIPv6Fragment), payload...)
	}
	buf := gopacket.NewSerializeBuffer()
	must(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ip6, gopacket.Payload(payload)))
	return frame(t, buf.Bytes())
}

// icmpError is an ICMP (v4: rest = the 4 bytes after the checksum) or ICMPv6 error from src to
// dst quoting quote (an IP packet, cut as the sender would).
func icmpError(t testing.TB, src, dst netip.Addr, typ, code uint8, rest uint32, quote []byte) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if src.Is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code), Id: uint16(rest >> 16), Seq: uint16(rest)}
		must(t, gopacket.SerializeLayers(buf, opts, ip, ic, gopacket.Payload(quote)))
	} else {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolICMPv6,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
		must(t, ic.SetNetworkLayerForChecksum(ip))
		r := make([]byte, 4)
		binary.BigEndian.PutUint32(r, rest)
		must(t, gopacket.SerializeLayers(buf, opts, ip, ic, gopacket.Payload(append(r, quote...))))
	}
	return frame(t, buf.Bytes())
}

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
