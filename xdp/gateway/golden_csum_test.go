// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"testing"

	"github.com/google/gopacket/layers"
)

// ipv4HeaderValid reports whether the untagged frame f's IPv4 header checksum is right.
func ipv4HeaderValid(f []byte) bool {
	ihl := int(f[14]&0x0f) * 4
	var s uint32
	for i := 0; i < ihl; i += 2 {
		s += uint32(binary.BigEndian.Uint16(f[14+i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s) == 0xffff
}

// corruptIPv4Check returns a copy of untagged frame f with its IPv4 header checksum wrong.
func corruptIPv4Check(f []byte) []byte {
	f = append([]byte(nil), f...)
	f[14+11] ^= 0x5a
	return f
}

// TestGoldenNoLaunderedChecksum: a packet whose IPv4 header checksum is wrong never leaves the
// gateway with a right one, on any rewrite path: the DNAT of a new and of an established flow,
// the carrier (which rebuilt the header, and with it the checksum, before: the node then
// delivered a corrupted packet as a sound one), and the reverse NAT of a reply. Every update is
// incremental: the error stays, and the receiver drops the packet as it would have dropped it
// as sent (RFC 1812).
func TestGoldenNoLaunderedChecksum(t *testing.T) {
	g := newGW(t, Options{})
	dsrServices(t, g)
	syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40000), Dst: ap(vip4, 80),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7}
	plain := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40001), Dst: ap(vip4b, 22),
		Proto: layers.IPProtocolTCP, Flags: "S", Seq: 7}
	ack := plain
	ack.Flags, ack.Seq = "A", 8
	reply := pk{SrcMAC: macBE3, DstMAC: macInt, Src: ap(be3v4, 22), Dst: ap(client4, 40001),
		Proto: layers.IPProtocolTCP, Flags: "SA", Seq: 100}
	for _, c := range []struct {
		what    string
		pkt     []byte
		ifindex int
	}{
		{"carried SYN", syn.bytes(t), g.ext},
		{"plain SYN", plain.bytes(t), g.ext},
		{"plain ACK", ack.bytes(t), g.ext},
		{"plain ACK, established", ack.bytes(t), g.ext},
		{"reply", reply.bytes(t), g.int},
	} {
		r := g.run(t, corruptIPv4Check(c.pkt), c.ifindex)
		if r.Verdict == xdpDrop || r.Verdict == xdpPass && string(r.Data) == string(corruptIPv4Check(c.pkt)) {
			continue // dropped, or handed on untouched: nothing laundered
		}
		if ipv4HeaderValid(r.Data) {
			t.Errorf("%s (verdict %d): a header with a wrong checksum left with a right one", c.what, r.Verdict)
		}
		// The same packet with a right checksum comes out with a right one.
		if r := g.run(t, c.pkt, c.ifindex); r.Verdict != xdpDrop && !ipv4HeaderValid(r.Data) {
			t.Errorf("%s: a sound header left with a wrong checksum", c.what)
		}
	}
}
