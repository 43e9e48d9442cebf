// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"encoding/binary"
	"net/netip"
)

// Frame layout constants.
const (
	ethLen     = 14 // Ethernet header (untagged: tagged frames are never steered)
	ipv4MinLen = 20
	ipv6Len    = 40
	tcpMinLen  = 20
	udpLen     = 8

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd

	protoTCP    = 6
	protoUDP    = 17
	protoICMP   = 1
	protoICMPv6 = 58

	// icmpHdrLen is an ICMP header (type, code, checksum, 4 bytes of "rest"); icmpL4Quote the
	// bytes of the quoted TCP/UDP header every error carries (RFC 792).
	icmpHdrLen  = 8
	icmpL4Quote = 8

	// ICMP and ICMPv6 types the datapath reads.
	icmpEchoReply     = 0
	icmpDestUnreach   = 3
	icmpEcho          = 8
	icmpTimeExceeded  = 11
	icmpFragNeeded    = 4 // destination unreachable's code
	icmp6DestUnreach  = 1
	icmp6PktTooBig    = 2
	icmp6TimeExceeded = 3
	icmp6EchoRequest  = 128
	icmp6EchoReply    = 129

	// ipv4OffsetMask selects the fragment offset of an IPv4 header's flags word.
	ipv4OffsetMask = 0x1fff

	// ipv4FragMask selects the MF bit and the fragment offset of an IPv4 header's flags word.
	ipv4FragMask = 0x3fff

	// TCP flags.
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// packet is a parsed frame: offsets into it and the fields the engine needs. Ports are in host
// order.
type packet struct {
	v6       bool
	l4       int // offset of the TCP/UDP header
	ipLen    int // the IP length (header included), as the header says
	proto    uint8
	ttl      uint8
	src, dst [16]byte
	sport    uint16
	dport    uint16
	tcpFlags uint8
	seq      uint32
}

// parseResult says what parse made of a frame.
type parseResult uint8

const (
	parsedOK        parseResult = iota
	parsedNotOurs               // not untagged IPv4/IPv6 TCP/UDP/ICMP, or an IPv4 fragment
	parsedMalformed             // truncated or inconsistent headers
	parsedICMP                  // ICMP (ICMPv6) with its 8-byte header: p.l4 is the header
)

// parse reads frame's headers into p. Nothing is written.
func parse(frame []byte, p *packet) parseResult {
	if len(frame) < ethLen {
		return parsedMalformed
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		ip := frame[ethLen:]
		if len(ip) < ipv4MinLen || ip[0]>>4 != 4 {
			return parsedMalformed
		}
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if ihl < ipv4MinLen || total < ihl || total > len(ip) {
			return parsedMalformed
		}
		if binary.BigEndian.Uint16(ip[6:])&ipv4FragMask != 0 {
			return parsedNotOurs
		}
		*p = packet{l4: ethLen + ihl, ipLen: total, proto: ip[9], ttl: ip[8]}
		copy(p.src[:4], ip[12:16])
		copy(p.dst[:4], ip[16:20])
	case etherTypeIPv6:
		ip := frame[ethLen:]
		if len(ip) < ipv6Len || ip[0]>>4 != 6 {
			return parsedMalformed
		}
		total := ipv6Len + int(binary.BigEndian.Uint16(ip[4:]))
		if total > len(ip) {
			return parsedMalformed
		}
		*p = packet{v6: true, l4: ethLen + ipv6Len, ipLen: total, proto: ip[6], ttl: ip[7]}
		copy(p.src[:], ip[8:24])
		copy(p.dst[:], ip[24:40])
	default:
		return parsedNotOurs
	}
	end := ethLen + p.ipLen
	switch p.proto {
	case protoTCP:
		if p.l4+tcpMinLen > end {
			return parsedMalformed
		}
		if doff := int(frame[p.l4+12]>>4) * 4; doff < tcpMinLen || p.l4+doff > end {
			return parsedMalformed // the header's length lies (parse_ports)
		}
		p.tcpFlags = frame[p.l4+13]
		p.seq = binary.BigEndian.Uint32(frame[p.l4+4:])
	case protoUDP:
		if p.l4+udpLen > end {
			return parsedMalformed
		}
		if n := int(binary.BigEndian.Uint16(frame[p.l4+4:])); n < udpLen || p.l4+n > end {
			return parsedMalformed // the datagram's length lies (parse_ports)
		}
	case protoICMP, protoICMPv6:
		if (p.proto == protoICMP) == p.v6 || p.l4+icmpHdrLen > end {
			return parsedNotOurs // the XDP datapath passes a short one to the kernel
		}
		return parsedICMP
	default:
		return parsedNotOurs
	}
	p.sport = binary.BigEndian.Uint16(frame[p.l4:])
	p.dport = binary.BigEndian.Uint16(frame[p.l4+2:])
	return parsedOK
}

// parseQuote reads the packet quoted in the ICMP error in frame (p from parse: parsedICMP) into
// in, as xdp/gateway/bpf/icmp.h's parse_inner does: an IPv4 header (not a non-first fragment) or an
// IPv6 fixed header, then the first icmpL4Quote bytes of TCP or UDP, all within the frame and
// the error's IP datagram. It returns the quoted L3 and L4 offsets, ok false when the quote
// names no flow.
func parseQuote(frame []byte, p *packet, in *packet) (l3, l4 int, ok bool) {
	l3 = p.l4 + icmpHdrLen
	*in = packet{v6: p.v6}
	if !p.v6 {
		if l3+ipv4MinLen > len(frame) {
			return 0, 0, false
		}
		ih := frame[l3:]
		if ih[0]>>4 != 4 || ih[0]&0x0f < 5 || binary.BigEndian.Uint16(ih[6:])&ipv4OffsetMask != 0 {
			return 0, 0, false
		}
		in.proto = ih[9]
		copy(in.src[:4], ih[12:16])
		copy(in.dst[:4], ih[16:20])
		l4 = l3 + int(ih[0]&0x0f)*4
	} else {
		if l3+ipv6Len > len(frame) {
			return 0, 0, false
		}
		ih := frame[l3:]
		in.proto = ih[6]
		copy(in.src[:], ih[8:24])
		copy(in.dst[:], ih[24:40])
		l4 = l3 + ipv6Len
	}
	if in.proto != protoTCP && in.proto != protoUDP {
		return 0, 0, false
	}
	if l4+icmpL4Quote > len(frame) || l4+icmpL4Quote > ethLen+p.ipLen {
		return 0, 0, false
	}
	in.l4 = l4
	in.sport = binary.BigEndian.Uint16(frame[l4:])
	in.dport = binary.BigEndian.Uint16(frame[l4+2:])
	return l3, l4, true
}

func (p *packet) srcAddr() netip.Addr { return addrOf(p.src, p.v6) }
func (p *packet) dstAddr() netip.Addr { return addrOf(p.dst, p.v6) }

// addrOf is the address in a key's 16 bytes.
func addrOf(b [16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}

// The incremental checksum arithmetic of RFC 1624, exactly as xdp/gateway/bpf/csum.h does it: a diff
// accumulates ~old + new of every changed word, loaded in memory order (native byte order, as
// the BPF program loads them), and is folded into the field at the end. Byte-for-byte the same
// result as the XDP datapath, including which of 0x0000/0xffff a sum ends as.

func csumAdd(csum, addend uint32) uint32 {
	csum += addend
	if csum < addend {
		csum++
	}
	return csum
}

func csumFold(csum uint32) uint16 {
	csum = csum&0xffff + csum>>16
	csum = csum&0xffff + csum>>16
	return uint16(csum)
}

func diff32(diff, from, to uint32) uint32 { return csumAdd(csumAdd(diff, ^from), to) }

func diff16(diff uint32, from, to uint16) uint32 {
	return csumAdd(diff, uint32(^from)+uint32(to))
}

func csumApply(sum uint16, diff uint32) uint16 { return ^csumFold(csumAdd(uint32(^sum), diff)) }

// csumApplyUDP keeps an IPv4 UDP checksum of 0 ("none") and sends a computed 0 as 0xffff.
func csumApplyUDP(sum uint16, diff uint32) uint16 {
	if sum == 0 {
		return 0
	}
	if r := csumApply(sum, diff); r != 0 {
		return r
	}
	return 0xffff
}

var ne = binary.NativeEndian

// rewrite sets the source (src) or destination address and port of p's frame to a and port
// (port 0 keeps the port), decrements the TTL or hop limit and fixes every checksum.
func rewrite(frame []byte, p *packet, src bool, a [16]byte, port uint16) {
	ip := frame[ethLen:]
	var diff uint32
	if !p.v6 {
		off := 16
		if src {
			off = 12
		}
		diff = diff32(0, ne.Uint32(ip[off:]), ne.Uint32(a[:4]))
		copy(ip[off:off+4], a[:4])
		oldTTL := ne.Uint16(ip[8:])
		ip[8]--
		ne.PutUint16(ip[10:], csumApply(ne.Uint16(ip[10:]), diff16(diff, oldTTL, ne.Uint16(ip[8:]))))
	} else {
		off := 24
		if src {
			off = 8
		}
		for i := 0; i < 16; i += 4 {
			diff = diff32(diff, ne.Uint32(ip[off+i:]), ne.Uint32(a[i:]))
		}
		copy(ip[off:off+16], a[:])
		ip[7]--
	}
	if src {
		p.src = a
	} else {
		p.dst = a
	}
	l4 := frame[p.l4:]
	pf := 2
	if src {
		pf = 0
	}
	if port == 0 {
		port = binary.BigEndian.Uint16(l4[pf:])
	}
	var wire [2]byte
	binary.BigEndian.PutUint16(wire[:], port)
	diff = diff16(diff, ne.Uint16(l4[pf:]), ne.Uint16(wire[:]))
	copy(l4[pf:pf+2], wire[:])
	if p.proto == protoTCP {
		ne.PutUint16(l4[16:], csumApply(ne.Uint16(l4[16:]), diff))
	} else {
		ne.PutUint16(l4[6:], csumApplyUDP(ne.Uint16(l4[6:]), diff))
	}
	if src {
		p.sport = port
	} else {
		p.dport = port
	}
}
