// SPDX-License-Identifier: Apache-2.0
package gen

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Protocol is the L4 protocol of generated frames.
type Protocol uint8

// The protocols the generator writes.
const (
	TCP Protocol = 6
	UDP Protocol = 17
)

func (p Protocol) String() string {
	if p == UDP {
		return "UDP"
	}
	return "TCP"
}

// TCP flags the generator may set (Spec.TCPFlags).
const (
	FlagFIN = 0x01
	FlagSYN = 0x02
	FlagRST = 0x04
	FlagPSH = 0x08
	FlagACK = 0x10
)

// MinSize is the smallest frame the generator writes: the template it copies into every frame
// is this long (TCP headers rounded up to 8 bytes).
const MinSize = 56

// MaxSize is the largest frame: one page of live-frames mode holds it with room to spare, and a
// veth with a native XDP program takes no larger MTU.
const MaxSize = 1500

// Spec says what the generator sends. Frames are Ethernet + IPv4 + TCP or UDP with a zero
// payload; only the source address and port change from one frame to the next.
type Spec struct {
	// SrcMAC and DstMAC are the Ethernet addresses (the generator's veth and the gateway's).
	SrcMAC, DstMAC net.HardwareAddr
	// Src is the first source address; flows use Src, Src+1, ... as needed (IPv4 only).
	Src netip.Addr
	// SrcPort is the first source port (0 means 1024).
	SrcPort uint16
	// PortsPerAddr is how many source ports each source address uses before the next address
	// is taken; 0 means min(Flows, 1000). SrcPort+PortsPerAddr must stay within 65536.
	PortsPerAddr int
	// Dst is the destination (the VIP and its port).
	Dst netip.AddrPort
	// Proto is TCP or UDP.
	Proto Protocol
	// TCPFlags are the TCP flags of every frame (e.g. FlagSYN for new flows, FlagACK for
	// established ones); ignored for UDP.
	TCPFlags uint8
	// Size is the frame length as the kernel sees it (no FCS), MinSize..MaxSize.
	Size int
	// Flows is the number of distinct flows, cycled through frame by frame; at least 1.
	Flows int
}

// normalized checks s and fills its defaults.
func (s Spec) normalized() (Spec, error) {
	if !s.Src.Is4() || !s.Dst.Addr().Is4() {
		return s, fmt.Errorf("generator spec: source %s and destination %s must be IPv4", s.Src, s.Dst)
	}
	if len(s.SrcMAC) != 6 || len(s.DstMAC) != 6 {
		return s, fmt.Errorf("generator spec: MACs %q and %q must be 6 bytes", s.SrcMAC, s.DstMAC)
	}
	if s.Size < MinSize || s.Size > MaxSize {
		return s, fmt.Errorf("generator spec: frame size %d outside %d..%d", s.Size, MinSize, MaxSize)
	}
	if s.Proto != TCP && s.Proto != UDP {
		return s, fmt.Errorf("generator spec: protocol %d is neither TCP nor UDP", s.Proto)
	}
	if s.Flows < 1 {
		return s, fmt.Errorf("generator spec: %d flows, want at least 1", s.Flows)
	}
	if s.SrcPort == 0 {
		s.SrcPort = 1024
	}
	if s.PortsPerAddr == 0 {
		s.PortsPerAddr = min(s.Flows, 1000)
	}
	if s.PortsPerAddr < 1 || int(s.SrcPort)+s.PortsPerAddr > 65536 {
		return s, fmt.Errorf("generator spec: %d ports per address from port %d exceed 65535", s.PortsPerAddr, s.SrcPort)
	}
	addrs := (s.Flows + s.PortsPerAddr - 1) / s.PortsPerAddr
	first := binary.BigEndian.Uint32(s.Src.AsSlice())
	if uint64(first)+uint64(addrs) > 1<<32 {
		return s, fmt.Errorf("generator spec: %d source addresses from %s overflow IPv4", addrs, s.Src)
	}
	return s, nil
}

// LastSrc is the highest source address the spec's flows use.
func (s Spec) LastSrc() (netip.Addr, error) {
	n, err := s.normalized()
	if err != nil {
		return netip.Addr{}, err
	}
	first := binary.BigEndian.Uint32(n.Src.AsSlice())
	last := first + uint32((n.Flows-1)/n.PortsPerAddr)
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, last))), nil
}

// Header lengths of generated frames.
const (
	ethLen  = 14
	ipv4Len = 20
	tcpLen  = 20
	udpLen  = 8
)

// config builds the program's configuration: the header template with source address, source
// port and checksums zero, and the partial checksums the program completes per frame.
func (s Spec) config() genGenCfg {
	var c genGenCfg
	h := c.Hdr[:]
	copy(h[0:6], s.DstMAC)
	copy(h[6:12], s.SrcMAC)
	binary.BigEndian.PutUint16(h[12:14], 0x0800)
	ip := h[ethLen:]
	l4len := s.Size - ethLen - ipv4Len
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipv4Len+l4len))
	ip[6] = 0x40 // don't fragment
	ip[8] = 64   // TTL
	ip[9] = byte(s.Proto)
	dst := s.Dst.Addr().As4()
	copy(ip[16:20], dst[:])
	l4 := h[ethLen+ipv4Len:]
	binary.BigEndian.PutUint16(l4[2:4], s.Dst.Port())
	hdrLen := udpLen
	if s.Proto == UDP {
		binary.BigEndian.PutUint16(l4[4:6], uint16(l4len))
		c.Udp = 1
	} else {
		hdrLen = tcpLen
		binary.BigEndian.PutUint32(l4[4:8], 1) // sequence number
		if s.TCPFlags&FlagACK != 0 {
			binary.BigEndian.PutUint32(l4[8:12], 1) // acknowledgment number
		}
		l4[12] = tcpLen / 4 << 4
		l4[13] = s.TCPFlags
		binary.BigEndian.PutUint16(l4[14:16], 65535) // window
	}
	c.IpSum = sum16(ip[:ipv4Len])
	pseudo := make([]byte, 12)
	copy(pseudo[4:8], dst[:])
	pseudo[9] = byte(s.Proto)
	binary.BigEndian.PutUint16(pseudo[10:12], uint16(l4len))
	c.L4Sum = sum16(pseudo) + sum16(l4[:hdrLen])
	c.SaddrBase = binary.BigEndian.Uint32(s.Src.AsSlice())
	c.Nflows = uint32(s.Flows)
	c.PortsPerAddr = uint32(s.PortsPerAddr)
	c.SportBase = s.SrcPort
	return c
}

// sum16 is the ones' complement sum (not folded) of b's 16-bit words loaded little-endian, as
// the program loads them; the checksum's byte-order independence makes that equivalent.
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.LittleEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1])
	}
	return s
}
