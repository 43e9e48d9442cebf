// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"encoding/binary"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// ICMP for VIPs, as xdp/gateway/bpf/icmp.h does it (the decision is forward.Balancer's Echo and Relay):
// an echo request to a VIP address is answered in place; an error about a VIP flow this gateway
// knows is relayed, its outer and quoted headers rewritten and all four checksums fixed
// byte-for-byte as the BPF program fixes them; every other ICMP steer.c hands the engine is
// dropped (it steers only what is to a VIP address or quotes a backend endpoint).

// echoReplyTTL is the TTL of an echo reply (datapath.h's ECHO_REPLY_TTL).
const echoReplyTTL = 64

// processICMP handles an ICMP (ICMPv6) frame p that parse found (parsedICMP).
func (e *Engine) processICMP(frame []byte, p *packet, ingress int, now time.Duration) Verdict {
	typ := frame[p.l4]
	if !p.v6 {
		switch typ {
		case icmpEcho:
			return e.echo(frame, p, ingress)
		case icmpDestUnreach, icmpTimeExceeded:
			return e.relay(frame, p, ingress, now)
		}
	} else {
		switch typ {
		case icmp6EchoRequest:
			return e.echo(frame, p, ingress)
		case icmp6DestUnreach, icmp6PktTooBig, icmp6TimeExceeded:
			return e.relay(frame, p, ingress, now)
		}
	}
	return e.drop(forward.ReasonDropNotOurs)
}

// echo answers an echo request to a VIP address in place (icmp_echo_reply): addresses and
// MACs swapped, the TTL echoReplyTTL, the type a reply, the checksums updated (swapping the
// addresses changes no sum). The reply leaves by the interface the request came in on.
func (e *Engine) echo(frame []byte, p *packet, ingress int) Verdict {
	fp := forward.Packet{V6: p.v6, Proto: datapath.Protocol(p.proto), TTL: p.ttl, Src: p.src, Dst: p.dst}
	d := e.bal.Echo(&fp)
	switch d.Action {
	case forward.Drop:
		return e.drop(d.Reason)
	case forward.Answer:
	default:
		return e.drop(forward.ReasonDropNotOurs)
	}
	ip := frame[ethLen:]
	ic := frame[p.l4:]
	oldt := ne.Uint16(ic[0:])
	if !p.v6 {
		oldTTL := ne.Uint16(ip[8:])
		var a [4]byte
		copy(a[:], ip[12:16])
		copy(ip[12:16], ip[16:20])
		copy(ip[16:20], a[:])
		ip[8] = echoReplyTTL
		ne.PutUint16(ip[10:], csumApply(ne.Uint16(ip[10:]), diff16(0, oldTTL, ne.Uint16(ip[8:]))))
		ic[0] = icmpEchoReply
	} else {
		var a [16]byte
		copy(a[:], ip[8:24])
		copy(ip[8:24], ip[24:40])
		copy(ip[24:40], a[:])
		ip[7] = echoReplyTTL
		ic[0] = icmp6EchoReply
	}
	ne.PutUint16(ic[2:], csumApply(ne.Uint16(ic[2:]), diff16(0, oldt, ne.Uint16(ic[0:]))))
	var mac [6]byte
	copy(mac[:], frame[0:6])
	copy(frame[0:6], frame[6:12])
	copy(frame[6:12], mac[:])
	e.reasons[d.Reason]++
	return Verdict{Send: true, Ifindex: ingress, Frame: frame}
}

// relay decides an ICMP error and sends it on, rewritten (icmp_relay).
func (e *Engine) relay(frame []byte, p *packet, ingress int, now time.Duration) Verdict {
	var in packet
	l3, _, quoted := parseQuote(frame, p, &in)
	ie := forward.ICMPError{
		Outer:  forward.Packet{V6: p.v6, Proto: datapath.Protocol(p.proto), TTL: p.ttl, Src: p.src, Dst: p.dst, Role: e.roles[ingress]},
		Quoted: quoted,
		Inner: forward.Packet{V6: in.v6, Proto: datapath.Protocol(in.proto), Src: in.src, Dst: in.dst,
			SrcPort: in.sport, DstPort: in.dport},
	}
	typ, code := frame[p.l4], frame[p.l4+1]
	if (!p.v6 && typ == icmpDestUnreach && code == icmpFragNeeded) || (p.v6 && typ == icmp6PktTooBig) {
		ie.PTB, ie.MTU = true, binary.BigEndian.Uint32(frame[p.l4+4:])
	}
	d := e.bal.Relay(&ie, now)
	switch d.Action {
	case forward.Drop:
		return e.drop(d.Reason)
	case forward.ToBackend:
		icmpRewrite(frame, p, &in, l3, true, d.Addr, d.Port)
		e.reasons[d.Reason]++
		return e.send(frame, p, ingress)
	case forward.ToClient:
		// An error about this host's own connection (e.g. a health probe) is not ours.
		hop, kind := e.hops.Lookup(p.dstAddr())
		if kind == HopLocal {
			return e.drop(forward.ReasonDropLocal)
		}
		icmpRewrite(frame, p, &in, l3, false, d.Addr, d.Port)
		e.reasons[d.Reason]++
		return e.sendHop(frame, p, ingress, hop, kind)
	}
	return e.drop(forward.ReasonDropNotOurs)
}

// icmpRewrite sets the quoted packet's source (innerSrc) or destination endpoint to a and port
// and the mirrored outer address (the outer destination for the quoted source, the outer
// source for the quoted destination) to a as well, when it held the old address or innerSrc is
// set; it decrements the outer TTL and fixes the outer IPv4, ICMP, quoted IPv4 and quoted L4
// checksums (the last only when the quote reaches it), exactly as icmp_rewrite does.
func icmpRewrite(frame []byte, p, in *packet, l3 int, innerSrc bool, a [16]byte, port uint16) {
	end := ethLen + p.ipLen
	ih := frame[l3:]
	var adiff, idiff, odiff uint32
	var old [16]byte
	if !p.v6 {
		off := 16
		if innerSrc {
			off = 12
		}
		copy(old[:4], ih[off:off+4])
		adiff = diff32(0, ne.Uint32(ih[off:]), ne.Uint32(a[:4]))
		copy(ih[off:off+4], a[:4])
		oldc := ne.Uint16(ih[10:])
		ne.PutUint16(ih[10:], csumApply(oldc, adiff))
		idiff = diff16(adiff, oldc, ne.Uint16(ih[10:]))
	} else {
		off := 24
		if innerSrc {
			off = 8
		}
		copy(old[:], ih[off:off+16])
		for i := 0; i < 16; i += 4 {
			adiff = diff32(adiff, ne.Uint32(ih[off+i:]), ne.Uint32(a[i:]))
		}
		copy(ih[off:off+16], a[:])
		idiff = adiff
	}

	// The quoted port, and the quoted L4 checksum when the quote reaches it (the quote ends
	// with the error's IP datagram, whatever trailer the frame has).
	pf := in.l4 + 2
	if innerSrc {
		pf = in.l4
	}
	oldp := ne.Uint16(frame[pf:])
	var wire [2]byte
	binary.BigEndian.PutUint16(wire[:], port)
	newp := ne.Uint16(wire[:])
	ne.PutUint16(frame[pf:], newp)
	idiff = diff16(idiff, oldp, newp)
	c := in.l4 + 6
	if in.proto == protoTCP {
		c = in.l4 + 16
	}
	if c+2 <= len(frame) && c+2 <= end {
		oldc := ne.Uint16(frame[c:])
		if in.proto == protoTCP {
			ne.PutUint16(frame[c:], csumApply(oldc, diff16(adiff, oldp, newp)))
		} else {
			ne.PutUint16(frame[c:], csumApplyUDP(oldc, diff16(adiff, oldp, newp)))
		}
		idiff = diff16(idiff, oldc, ne.Uint16(frame[c:]))
	}

	// The outer IP header and the ICMP checksum.
	ip := frame[ethLen:]
	ic := frame[p.l4:]
	if !p.v6 {
		off := 12
		if innerSrc {
			off = 16
		}
		oldTTL := ne.Uint16(ip[8:])
		if innerSrc || [4]byte(ip[off:off+4]) == [4]byte(old[:4]) {
			odiff = diff32(0, ne.Uint32(ip[off:]), ne.Uint32(a[:4]))
			copy(ip[off:off+4], a[:4])
			if innerSrc {
				p.dst = a
			} else {
				p.src = a
			}
		}
		ip[8]--
		ne.PutUint16(ip[10:], csumApply(ne.Uint16(ip[10:]), diff16(odiff, oldTTL, ne.Uint16(ip[8:]))))
		ne.PutUint16(ic[2:], csumApply(ne.Uint16(ic[2:]), idiff))
	} else {
		off := 8
		if innerSrc {
			off = 24
		}
		if innerSrc || [16]byte(ip[off:off+16]) == old {
			for i := 0; i < 16; i += 4 {
				odiff = diff32(odiff, ne.Uint32(ip[off+i:]), ne.Uint32(a[i:]))
			}
			copy(ip[off:off+16], a[:])
			if innerSrc {
				p.dst = a
			} else {
				p.src = a
			}
		}
		ip[7]--
		// The ICMPv6 checksum covers the pseudo-header: the outer address change too.
		ne.PutUint16(ic[2:], csumApply(ne.Uint16(ic[2:]), csumAdd(idiff, odiff)))
	}
}
