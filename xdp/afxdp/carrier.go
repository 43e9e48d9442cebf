// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"encoding/binary"
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// Direct server return's carrier, as xdp/gateway/bpf/dsr.h puts it on a packet: the frontend of a
// packet that opens its flow here, to a backend of direct server return, in an IPv4 option or
// an IPv6 Destination Options header after the IP header (datapath.Carrier*), when it fits the
// next hop's MTU; else a UDP datagram that cannot be fragmented is answered with an ICMP "too
// big", and anything else goes without.

// minMTU is the MTU assumed when the next hop is not known yet (a frame held for its
// neighbour): the least IPv6 allows, as the XDP datapath assumes for what it hands the kernel.
const minMTU = 1280

// ipv4DF is the don't-fragment bit of an IPv4 header's flags word.
const ipv4DF = 0x4000

// carry sends frame, DNATed by Process, with its frontend in the carrier.
func (e *Engine) carry(frame []byte, p *packet, ingress int, d *forward.Decision) Verdict {
	hop, kind := e.hops.Lookup(p.dstAddr())
	if kind == HopUnreachable {
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	if kind == HopSend && hop.MTU > 0 && p.ipLen > hop.MTU { // too big even without the carrier
		if tooBigEligible(frame, p) {
			return e.tooBig(frame, p, ingress, d.Frontend.Addr, d.Frontend.Addr, d.CarryPort, true, hop.MTU,
				forward.ReasonICMPTooBigClient)
		}
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	clen := datapath.CarrierOpt4Len
	if p.v6 {
		clen = datapath.CarrierOpt6HdrLen
	} else if frame[ethLen]&0x0f != 5 { // options already there: the carrier must be the only one
		e.reasons[forward.ReasonDSRNoRoom]++
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	limit := minMTU
	if kind == HopSend && hop.MTU > 0 {
		limit = hop.MTU
	}
	if p.ipLen+clen > limit {
		dontFrag := p.v6 || binary.BigEndian.Uint16(frame[ethLen+6:])&ipv4DF != 0
		if kind == HopSend && p.proto == protoUDP && dontFrag && hop.MTU > clen {
			return e.tooBig(frame, p, ingress, d.Frontend.Addr, d.Frontend.Addr, d.CarryPort, true, hop.MTU-clen,
				forward.ReasonDSRTooBig)
		}
		e.reasons[forward.ReasonDSRNoRoom]++
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	if cap(frame)-len(frame) < clen {
		e.reasons[forward.ReasonDSRNoRoom]++
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	frame = insertCarrier(frame, p, d)
	e.reasons[forward.ReasonDSRCarried]++
	return e.sendHop(frame, p, ingress, hop, kind)
}

// insertCarrier grows frame (within its capacity) by the carrier after the IP header and
// returns it; p's offsets and length follow.
func insertCarrier(frame []byte, p *packet, d *forward.Decision) []byte {
	var c []byte
	if p.v6 {
		c = make([]byte, datapath.CarrierOpt6HdrLen)
		ip := frame[ethLen:]
		c[0] = ip[6] // the next header
		c[1] = datapath.CarrierOpt6HdrLen/8 - 1
		c[2], c[3] = datapath.CarrierOpt6Type, datapath.CarrierOpt6Data
		binary.BigEndian.PutUint16(c[4:], d.CarryPort)
		copy(c[6:22], d.Frontend.Addr.AsSlice())
		c[22], c[23] = 1, 0 // PadN
		ip[6] = 60
		binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(len(c)))
	} else {
		c = make([]byte, datapath.CarrierOpt4Len)
		c[0], c[1] = datapath.CarrierOpt4Type, datapath.CarrierOpt4Len
		binary.BigEndian.PutUint16(c[2:], d.CarryPort)
		copy(c[4:], d.Frontend.Addr.Unmap().AsSlice())
	}
	at := ethLen + ipv4MinLen
	if p.v6 {
		at = ethLen + ipv6Len
	}
	n := len(frame)
	frame = frame[:n+len(c)]
	copy(frame[at+len(c):], frame[at:n])
	copy(frame[at:], c)
	if !p.v6 {
		// The header checksum is updated, not recomputed: a header whose checksum was wrong
		// stays wrong (a gateway must not launder a corrupted header, RFC 1812), as
		// dsr_insert4 does.
		ip := frame[ethLen:]
		w0, tot := ne.Uint16(ip[0:]), ne.Uint16(ip[2:])
		ip[0] = 0x40 | byte((ipv4MinLen+len(c))/4)
		binary.BigEndian.PutUint16(ip[2:], binary.BigEndian.Uint16(ip[2:])+uint16(len(c)))
		diff := diff16(0, w0, ne.Uint16(ip[0:]))
		diff = diff16(diff, tot, ne.Uint16(ip[2:]))
		for i := 0; i+1 < len(c); i += 2 {
			diff = diff16(diff, 0, ne.Uint16(c[i:]))
		}
		ne.PutUint16(ip[10:], csumApply(ne.Uint16(ip[10:]), diff))
	}
	p.l4 += len(c)
	p.ipLen += len(c)
	return frame
}

// tooBigEligible reports whether frame p, too long for its next hop, may be answered with an
// ICMP "too big" (too_big_call): it may not be fragmented (IPv4 with DF, or IPv6) and has the
// shape the answer quotes (an IPv4 header without options; IPv6 extension headers and
// fragments are never steered here). The engine drops the rest (drop_mtu): the XDP datapath
// hands them to the kernel, which fragments them, and a frame in an AF_XDP socket can no
// longer reach it.
func tooBigEligible(frame []byte, p *packet) bool {
	if p.v6 {
		return true
	}
	return frame[ethLen]&0x0f == 5 && binary.BigEndian.Uint16(frame[ethLen+6:])&ipv4DF != 0
}

// tooBig turns frame into the ICMP "too big" (advertising mtu) its sender gets, from address
// from, quoting the frame's first IP header and 8 bytes of L4, sent back out of the interface
// it came in on (pmtu.h's too_big4/too_big6), counted as reason. With restore set (a DNATed
// packet) the quote is the packet as the client sent it: its destination vip:vport again (the
// UDP checksum too; TCP's is not quoted), its TTL given back.
func (e *Engine) tooBig(frame []byte, p *packet, ingress int, from, vip netip.Addr, vport uint16, restore bool,
	mtu int, reason forward.Reason) Verdict {
	from, vip = from.Unmap(), vip.Unmap()
	var out []byte
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], vport)
	if !p.v6 {
		const quoteLen = ipv4MinLen + udpLen
		q := append([]byte(nil), frame[ethLen:ethLen+quoteLen]...)
		if restore {
			diff := diff32(0, ne.Uint32(q[16:]), ne.Uint32(vip.AsSlice()))
			diff = diff16(diff, ne.Uint16(q[ipv4MinLen+2:]), ne.Uint16(port[:]))
			if q[9] == protoUDP {
				ne.PutUint16(q[ipv4MinLen+6:], csumApplyUDP(ne.Uint16(q[ipv4MinLen+6:]), diff))
			}
			copy(q[ipv4MinLen+2:], port[:])
			copy(q[16:20], vip.AsSlice())
			q[8]++ // the TTL the client sent
			binary.BigEndian.PutUint16(q[10:], 0)
			ne.PutUint16(q[10:], ipChecksum(q[:ipv4MinLen]))
		}
		sender := append([]byte(nil), frame[ethLen+12:ethLen+16]...)
		out = frame[:ethLen+ipv4MinLen+8+quoteLen]
		ip := out[ethLen:]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], ipv4MinLen+8+quoteLen)
		binary.BigEndian.PutUint32(ip[4:], 0) // id, flags, fragment offset
		ip[8], ip[9] = icmpReplyTTL, protoICMP
		copy(ip[12:16], from.AsSlice())
		copy(ip[16:20], sender)
		binary.BigEndian.PutUint16(ip[10:], 0)
		ne.PutUint16(ip[10:], ipChecksum(ip[:ipv4MinLen]))
		ic := ip[ipv4MinLen:]
		ic[0], ic[1] = icmpDestUnreach, icmpFragNeeded
		binary.BigEndian.PutUint32(ic[4:], uint32(uint16(mtu)))
		copy(ic[8:], q)
		binary.BigEndian.PutUint16(ic[2:], 0)
		ne.PutUint16(ic[2:], ^csumFold(sum16(0, ic[:8+quoteLen])))
	} else {
		const quoteLen = ipv6Len + udpLen
		q := append([]byte(nil), frame[ethLen:ethLen+quoteLen]...)
		if restore {
			var diff uint32
			for i := 0; i < 16; i += 4 {
				diff = diff32(diff, ne.Uint32(q[24+i:]), ne.Uint32(vip.AsSlice()[i:]))
			}
			diff = diff16(diff, ne.Uint16(q[ipv6Len+2:]), ne.Uint16(port[:]))
			if q[6] == protoUDP {
				ne.PutUint16(q[ipv6Len+6:], csumApply(ne.Uint16(q[ipv6Len+6:]), diff))
			}
			copy(q[ipv6Len+2:], port[:])
			copy(q[24:40], vip.AsSlice())
			q[7]++ // the hop limit the client sent
		}
		sender := append([]byte(nil), frame[ethLen+8:ethLen+24]...)
		out = frame[:ethLen+ipv6Len+8+quoteLen]
		ip := out[ethLen:]
		binary.BigEndian.PutUint32(ip[0:], 0x60000000)
		binary.BigEndian.PutUint16(ip[4:], 8+quoteLen)
		ip[6], ip[7] = protoICMPv6, icmpReplyTTL
		copy(ip[8:24], from.AsSlice())
		copy(ip[24:40], sender)
		ic := ip[ipv6Len:]
		ic[0], ic[1] = icmp6PktTooBig, 0
		binary.BigEndian.PutUint32(ic[4:], uint32(mtu))
		copy(ic[8:], q)
		binary.BigEndian.PutUint16(ic[2:], 0)
		var pseudo [40]byte
		copy(pseudo[0:32], ip[8:40])
		binary.BigEndian.PutUint32(pseudo[32:], 8+quoteLen)
		pseudo[39] = protoICMPv6
		ne.PutUint16(ic[2:], ^csumFold(sum16(sum16(0, pseudo[:]), ic[:8+quoteLen])))
	}
	var mac [6]byte
	copy(mac[:], out[0:6])
	copy(out[0:6], out[6:12])
	copy(out[6:12], mac[:])
	e.reasons[reason]++
	return Verdict{Send: true, Ifindex: ingress, Frame: out}
}

// icmpReplyTTL is the TTL of the ICMP answers the datapath sends (dsr.h's ICMP_REPLY_TTL).
const icmpReplyTTL = 64

// sum16 adds b's 16-bit words (in memory order, as the BPF program loads them) to sum.
func sum16(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(ne.Uint16(b[i:]))
	}
	return sum
}

// ipChecksum is the IPv4 header checksum of h (its checksum field zero).
func ipChecksum(h []byte) uint16 {
	return ^csumFold(sum16(0, h))
}
