// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TCP flags the decision reads.
const (
	TCPFIN = 0x01
	TCPSYN = 0x02
	TCPRST = 0x04
	TCPACK = 0x10
)

// Packet is what the decision reads of a packet: its IP and TCP/UDP header fields, in host
// order. Addresses are 16-byte keys: IPv4 in the first 4 bytes, the rest zero.
type Packet struct {
	V6       bool
	Proto    datapath.Protocol
	TTL      uint8
	Src, Dst [16]byte
	SrcPort  uint16
	DstPort  uint16
	// TCPFlags and Seq are the TCP header's flags and sequence number (TCP only).
	TCPFlags uint8
	Seq      uint32
	// Len is the frame's length in bytes, as the traffic counters count it.
	Len int
	// UDPNoChecksum marks an IPv6 UDP datagram whose checksum is 0 (RFC 8200: discarded).
	UDPNoChecksum bool
	// Carrier marks a packet that arrived with what a node would take for a carrier of direct
	// server return (its first IPv4 option is datapath.CarrierOpt4Type, or an IPv6
	// Destination Options header right after the fixed header starts with
	// datapath.CarrierOpt6Type): Forward drops it when it is addressed to a VIP.
	Carrier bool
	// Role is the role of the interface the packet arrived on: what it may do from there
	// (datapath.Role; docs/datapath.md, "Security model").
	Role datapath.Role
}

// PacketOf returns the packet of a flow from src to dst (the same family): TTL 64, no TCP
// flags, no length.
func PacketOf(src, dst netip.AddrPort, proto datapath.Protocol) Packet {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	return Packet{V6: d.Is6(), Proto: proto, TTL: 64, Src: Key(s), Dst: Key(d), SrcPort: src.Port(), DstPort: dst.Port()}
}

// SrcAddr and DstAddr are the packet's addresses.
func (p *Packet) SrcAddr() netip.Addr { return AddrOf(p.Src, p.V6) }
func (p *Packet) DstAddr() netip.Addr { return AddrOf(p.Dst, p.V6) }

// key is the packet's flow key.
func (p *Packet) key() flowKey {
	return flowKey{src: p.Src, dst: p.Dst, sport: p.SrcPort, dport: p.DstPort, proto: uint8(p.Proto), v6: p.V6}
}

// syn reports whether p opens a TCP connection (SYN without ACK).
func (p *Packet) syn() bool { return p.Proto == datapath.TCP && p.TCPFlags&(TCPSYN|TCPACK) == TCPSYN }

// AddrOf is the address in a 16-byte key.
func AddrOf(b [16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}

// Key is a's 16-byte key form (IPv4, or IPv4-mapped, in the first 4 bytes).
func Key(a netip.Addr) (b [16]byte) {
	a = a.Unmap()
	if a.Is4() {
		copy(b[:4], a.AsSlice())
		return b
	}
	return a.As16()
}

// flowKey is a flow's 5-tuple as conntrack and the handshake table key it.
type flowKey struct {
	src, dst     [16]byte
	sport, dport uint16
	proto        uint8
	v6           bool
}

// feKey is a frontend or an endpoint as a map key.
type feKey struct {
	addr  [16]byte
	port  uint16
	proto uint8
	v6    bool
}

func frontendKey(a netip.Addr, port uint16, proto datapath.Protocol) feKey {
	a = a.Unmap()
	return feKey{addr: Key(a), port: port, proto: uint8(proto), v6: a.Is6()}
}
