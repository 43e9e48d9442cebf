// SPDX-License-Identifier: Apache-2.0
package announce

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Frame layout constants (Ethernet II, no VLAN tag: the kernel strips it before AF_PACKET).
const (
	ethLen        = 14
	ethTypeARP    = 0x0806
	ethTypeIPv4   = 0x0800
	ethTypeIPv6   = 0x86dd
	arpLen        = 28
	arpRequest    = 1
	arpReply      = 2
	ip6Len        = 40
	protoICMPv6   = 58
	ndpHopLimit   = 255 // RFC 4861: neighbour discovery from anywhere but the link is refused
	icmpNS        = 135
	icmpNA        = 136
	nsLen         = 24 // type, code, checksum, reserved, target
	naFlagSolicit = 0x40
	naFlagOverr   = 0x20
	optTargetLL   = 2
	optSourceLL   = 1
	naLen         = nsLen + 8 // with the target link-layer address option
)

var (
	broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodesMAC  = [6]byte{0x33, 0x33, 0, 0, 0, 1}
	allNodes     = netip.MustParseAddr("ff02::1")
)

// filter is the socket's classic BPF program: ARP frames, and ICMPv6 neighbour solicitations
// and advertisements (next header 58 right after the IPv6 header), nothing else.
func filter() []unix.SockFilter {
	const (
		ldh = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldb = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	return []unix.SockFilter{
		{Code: ldh, K: 12},
		{Code: jeq, Jt: 6, Jf: 0, K: ethTypeARP},
		{Code: jeq, Jt: 0, Jf: 6, K: ethTypeIPv6},
		{Code: ldb, K: ethLen + 6},
		{Code: jeq, Jt: 0, Jf: 4, K: protoICMPv6},
		{Code: ldb, K: ethLen + ip6Len},
		{Code: jeq, Jt: 1, Jf: 0, K: icmpNS},
		{Code: jeq, Jt: 0, Jf: 1, K: icmpNA},
		{Code: ret, K: 0x40000},
		{Code: ret, K: 0},
	}
}

// query is a parsed ARP or neighbour discovery frame.
type query struct {
	v6     bool
	answer bool // a reply or advertisement (someone claims target), not a question
	srcMAC [6]byte
	// srcIP is the asker's address (0.0.0.0 or :: for a probe).
	srcIP netip.Addr
	// target is the address asked for, or claimed.
	target netip.Addr
}

// parse reads an ARP request or reply, or an ICMPv6 neighbour solicitation or advertisement,
// checking every length and field; ok is false for anything else or anything malformed.
func parse(f []byte) (q query, ok bool) {
	if len(f) < ethLen {
		return q, false
	}
	copy(q.srcMAC[:], f[6:12])
	switch binary.BigEndian.Uint16(f[12:14]) {
	case ethTypeARP:
		a := f[ethLen:]
		if len(a) < arpLen || binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != ethTypeIPv4 ||
			a[4] != 6 || a[5] != 4 {
			return q, false
		}
		spa, _ := netip.AddrFromSlice(a[14:18])
		tpa, _ := netip.AddrFromSlice(a[24:28])
		q.srcIP = spa
		switch binary.BigEndian.Uint16(a[6:8]) {
		case arpRequest:
			// A gratuitous request (sender and target the same) is a claim, not a question.
			q.target, q.answer = tpa, spa == tpa
		case arpReply:
			q.target, q.answer = spa, true
		default:
			return q, false
		}
		return q, q.target.IsValid() && !q.target.IsUnspecified()
	case ethTypeIPv6:
		ip := f[ethLen:]
		if len(ip) < ip6Len+nsLen || ip[0]>>4 != 6 || ip[6] != protoICMPv6 || ip[7] != ndpHopLimit {
			return q, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:6]))
		if plen < nsLen || ip6Len+plen > len(ip) {
			return q, false
		}
		src, _ := netip.AddrFromSlice(ip[8:24])
		dst, _ := netip.AddrFromSlice(ip[24:40])
		ic := ip[ip6Len : ip6Len+plen]
		if ic[1] != 0 || checksum6(src, dst, ic) != 0 {
			return q, false
		}
		q.v6, q.srcIP = true, src
		q.target, _ = netip.AddrFromSlice(ic[8:24])
		switch ic[0] {
		case icmpNS:
		case icmpNA:
			q.answer = true
		default:
			return q, false
		}
		return q, !q.target.IsMulticast() && !q.target.IsUnspecified()
	}
	return q, false
}

// reply is the answer to question q, from mac for q.target.
func reply(mac [6]byte, q query) []byte {
	if !q.v6 {
		f := ethernet(q.srcMAC, mac, ethTypeARP, arpLen)
		a := f[ethLen:]
		arpHeader(a, arpReply, mac, q.target)
		copy(a[18:24], q.srcMAC[:])
		tpa := q.srcIP.As4()
		copy(a[24:28], tpa[:])
		return f
	}
	dstMAC, dst, flags := q.srcMAC, q.srcIP, byte(naFlagSolicit|naFlagOverr)
	if q.srcIP.IsUnspecified() {
		// A duplicate address probe: the answer goes to all nodes, unsolicited (RFC 4861 7.2.4).
		dstMAC, dst, flags = allNodesMAC, allNodes, naFlagOverr
	}
	return advertisement(mac, dstMAC, q.target, dst, flags)
}

// announcement is the unsolicited announcement of vip at mac: a gratuitous ARP request to the
// broadcast address, or an unsolicited neighbour advertisement (Override set) to all nodes.
func announcement(mac [6]byte, vip netip.Addr) []byte {
	if vip.Is4() {
		f := ethernet(broadcastMAC, mac, ethTypeARP, arpLen)
		a := f[ethLen:]
		arpHeader(a, arpRequest, mac, vip)
		t := vip.As4()
		copy(a[24:28], t[:])
		return f
	}
	return advertisement(mac, allNodesMAC, vip, allNodes, naFlagOverr)
}

func ethernet(dst, src [6]byte, typ uint16, payload int) []byte {
	f := make([]byte, ethLen+payload)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], typ)
	return f
}

// arpHeader fills a's fixed fields, the sender (mac, spa) and the operation; the target's are
// the caller's.
func arpHeader(a []byte, op uint16, mac [6]byte, spa netip.Addr) {
	binary.BigEndian.PutUint16(a[0:2], 1)
	binary.BigEndian.PutUint16(a[2:4], ethTypeIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], op)
	copy(a[8:14], mac[:])
	s := spa.As4()
	copy(a[14:18], s[:])
}

// advertisement is a neighbour advertisement of target at mac, from target to dst.
func advertisement(mac, dstMAC [6]byte, target, dst netip.Addr, flags byte) []byte {
	f := ethernet(dstMAC, mac, ethTypeIPv6, ip6Len+naLen)
	ip := f[ethLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], naLen)
	ip[6], ip[7] = protoICMPv6, ndpHopLimit
	s, d, t := target.As16(), dst.As16(), target.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	ic := ip[ip6Len:]
	ic[0] = icmpNA
	ic[4] = flags
	copy(ic[8:24], t[:])
	ic[24], ic[25] = optTargetLL, 1
	copy(ic[26:32], mac[:])
	binary.BigEndian.PutUint16(ic[2:4], checksum6(target, dst, ic))
	return f
}

// checksum6 is the ICMPv6 checksum of msg (its checksum field included: 0 when it is right).
func checksum6(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	sum += uint32(len(msg)) + protoICMPv6
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// probe is a duplicate address probe for v from mac: an ARP request from 0.0.0.0 (RFC 5227),
// or a neighbour solicitation from :: to v's solicited-node group (RFC 4862).
func probe(mac [6]byte, v netip.Addr) []byte {
	if v.Is4() {
		f := ethernet(broadcastMAC, mac, ethTypeARP, arpLen)
		a := f[ethLen:]
		arpHeader(a, arpRequest, mac, netip.IPv4Unspecified())
		t := v.As4()
		copy(a[24:28], t[:])
		return f
	}
	t := v.As16()
	group := netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
	f := ethernet([6]byte{0x33, 0x33, 0xff, t[13], t[14], t[15]}, mac, ethTypeIPv6, ip6Len+nsLen)
	ip := f[ethLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], nsLen)
	ip[6], ip[7] = protoICMPv6, ndpHopLimit
	g := group.As16()
	copy(ip[24:40], g[:])
	ic := ip[ip6Len:]
	ic[0] = icmpNS
	copy(ic[8:24], t[:])
	binary.BigEndian.PutUint16(ic[2:4], checksum6(netip.IPv6Unspecified(), group, ic))
	return f
}
