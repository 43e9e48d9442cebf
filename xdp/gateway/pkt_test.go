// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// pk describes a test packet. Everything is computed by gopacket (lengths, every checksum), so
// expected outputs are built independently of the datapath's incremental updates.
type pk struct {
	SrcMAC, DstMAC string
	VLAN           uint16 // 0: untagged
	Src, Dst       netip.AddrPort
	Proto          layers.IPProtocol
	Flags          string // TCP flags: S A F R P
	TTL            uint8  // 0 means 64
	Payload        []byte
	IPv4Options    []layers.IPv4Option
	IPID           uint16
	Ext6           []byte // raw IPv6 extension headers; first byte of each is patched as next header
	Ext6Types      []layers.IPProtocol
	UDPZeroCsum    bool
	Seq            uint32
	DF             bool // IPv4: don't fragment
}

func (p pk) ttl() uint8 {
	if p.TTL == 0 {
		return 64
	}
	return p.TTL
}

func (p pk) is4() bool { return p.Src.Addr().Is4() }

// netLayer is the IP header without payload, used for pseudo-header checksums.
func (p pk) netLayer() gopacket.NetworkLayer {
	if p.is4() {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: p.ttl(), Protocol: p.Proto, Id: p.IPID,
			SrcIP: p.Src.Addr().AsSlice(), DstIP: p.Dst.Addr().AsSlice(), Options: p.IPv4Options}
		if p.DF {
			ip.Flags = layers.IPv4DontFragment
		}
		return ip
	}
	return &layers.IPv6{Version: 6, HopLimit: p.ttl(), NextHeader: p.Proto,
		SrcIP: p.Src.Addr().AsSlice(), DstIP: p.Dst.Addr().AsSlice()}
}

// l4 returns the transport header and payload bytes with a correct checksum.
func (p pk) l4(t testing.TB) []byte {
	t.Helper()
	nl := p.netLayer()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	var ls []gopacket.SerializableLayer
	switch p.Proto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.Src.Port()), DstPort: layers.TCPPort(p.Dst.Port()),
			Seq: p.Seq, Window: 65535, DataOffset: 5}
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
	ls = append(ls, gopacket.Payload(p.Payload))
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if p.Proto == layers.IPProtocolUDP && p.UDPZeroCsum {
		b[6], b[7] = 0, 0
	}
	return b
}

// ip returns the IP packet (no Ethernet) carrying l4 bytes, with extension headers if any.
func (p pk) ip(t testing.TB, l4 []byte) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	nl := p.netLayer()
	payload := l4
	if !p.is4() && len(p.Ext6) > 0 {
		ip6 := nl.(*layers.IPv6)
		ip6.NextHeader = p.Ext6Types[0]
		payload = append(append([]byte{}, p.Ext6...), l4...)
	}
	if err := gopacket.SerializeLayers(buf, opts, nl.(gopacket.SerializableLayer), gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// frame wraps an IP packet in Ethernet (and a VLAN tag).
func (p pk) frame(t testing.TB, ip []byte) []byte {
	t.Helper()
	src, _ := net.ParseMAC(p.SrcMAC)
	dst, _ := net.ParseMAC(p.DstMAC)
	et := layers.EthernetTypeIPv4
	if !p.is4() {
		et = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{}
	if p.VLAN != 0 {
		ls = append(ls, &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: p.VLAN, Type: et})
	} else {
		ls = append(ls, &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: et})
	}
	ls = append(ls, gopacket.Payload(ip))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bytes is the whole frame.
func (p pk) bytes(t testing.TB) []byte {
	t.Helper()
	return p.frame(t, p.ip(t, p.l4(t)))
}

// fragments4 splits the IPv4 datagram of p after first bytes of L4 (a multiple of 8) into two
// frames: the first fragment (MF) and the rest.
func (p pk) fragments4(t testing.TB, first int) (a, b []byte) {
	t.Helper()
	l4 := p.l4(t)
	mk := func(data []byte, off uint16, mf bool) []byte {
		ip := p.netLayer().(*layers.IPv4)
		ip.FragOffset = off / 8
		if mf {
			ip.Flags = layers.IPv4MoreFragments
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			ip, gopacket.Payload(data)); err != nil {
			t.Fatal(err)
		}
		return p.frame(t, buf.Bytes())
	}
	return mk(l4[:first], 0, true), mk(l4[first:], uint16(first), false)
}

// fragments6 is fragments4 for IPv6 (a Fragment extension header with id 0x01020304).
func (p pk) fragments6(t testing.TB, first int) (a, b []byte) {
	t.Helper()
	l4 := p.l4(t)
	mk := func(data []byte, off uint16, mf bool) []byte {
		fh := make([]byte, 8)
		fh[0] = byte(p.Proto)
		v := off
		if mf {
			v |= 1
		}
		binary.BigEndian.PutUint16(fh[2:], v)
		binary.BigEndian.PutUint32(fh[4:], 0x01020304)
		q := p
		q.Ext6, q.Ext6Types = nil, nil
		ip6 := q.netLayer().(*layers.IPv6)
		ip6.NextHeader = layers.IPProtocolIPv6Fragment
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
			ip6, gopacket.Payload(append(fh, data...))); err != nil {
			t.Fatal(err)
		}
		return p.frame(t, buf.Bytes())
	}
	return mk(l4[:first], 0, true), mk(l4[first:], uint16(first), false)
}

// icmpError builds an ICMP (v4: type/code, rest = 4 bytes after the checksum) or ICMPv6 error
// from outer src to dst quoting quote (an IP packet, already truncated as the sender would).
func icmpError(t testing.TB, outer pk, typ, code uint8, rest uint32, quote []byte) []byte {
	t.Helper()
	nl := outer.netLayer()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	var err error
	if outer.is4() {
		ip := nl.(*layers.IPv4)
		ip.Protocol = layers.IPProtocolICMPv4
		ic := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code),
			Id: uint16(rest >> 16), Seq: uint16(rest)}
		err = gopacket.SerializeLayers(buf, opts, ip, ic, gopacket.Payload(quote))
	} else {
		ip := nl.(*layers.IPv6)
		ip.NextHeader = layers.IPProtocolICMPv6
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
		must(t, ic.SetNetworkLayerForChecksum(ip))
		r := make([]byte, 4)
		binary.BigEndian.PutUint32(r, rest)
		err = gopacket.SerializeLayers(buf, opts, ip, ic, gopacket.Payload(append(r, quote...)))
	}
	if err != nil {
		t.Fatal(err)
	}
	return outer.frame(t, buf.Bytes())
}

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
