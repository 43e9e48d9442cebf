// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// murmur32 is MurmurHash3 x86_32 of b (len(b) a multiple of 4) built from the same mix and
// finaliser as FlowHash, so the published test vectors check them.
func murmur32(seed uint32, b []byte) uint32 {
	h := seed
	for i := 0; i+4 <= len(b); i += 4 {
		h = murmurMix(h, binary.LittleEndian.Uint32(b[i:]))
	}
	return murmurFinal(h, uint32(len(b)))
}

func TestMurmurVectors(t *testing.T) {
	for _, v := range []struct {
		seed uint32
		in   string
		want uint32
	}{
		{0, "", 0},
		{1, "", 0x514e28b7},
		{0, "test", 0xba6bd213},
		{0x9747b28c, "aaaa", 0x5a97808a},
		{0x9747b28c, "abcd", 0xf0478627},
	} {
		if got := murmur32(v.seed, []byte(v.in)); got != v.want {
			t.Errorf("murmur3(%q, %#x) = %#x, want %#x", v.in, v.seed, got, v.want)
		}
	}
}

// TestFlowHashLayout pins down what FlowHash covers: the address bytes, then the ports as on the
// wire, then the protocol as a little-endian word. (xdp's TestGoldenHashMatchesGo holds the BPF
// program to it.)
func TestFlowHashLayout(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.10")
	b := append(a.AsSlice(), 0x9c, 0x40, 0x00, 0x50, 6, 0, 0, 0) // sport 40000, dport 80, TCP
	if got, want := FlowHash(7, a, 40000, 80, TCP, false), murmur32(7, b); got != want {
		t.Errorf("FlowHash v4 = %#x, want murmur3 of the wire bytes %#x", got, want)
	}
	if got, want := FlowHash(7, a, 40000, 80, TCP, true), murmur32(7, a.AsSlice()); got != want {
		t.Errorf("FlowHash ClientIP = %#x, want %#x", got, want)
	}
	v6 := netip.MustParseAddr("2001:db8::10")
	b6 := append(v6.AsSlice(), 0x9c, 0x40, 0x00, 0x50, 17, 0, 0, 0)
	if got, want := FlowHash(7, v6, 40000, 80, UDP, false), murmur32(7, b6); got != want {
		t.Errorf("FlowHash v6 = %#x, want %#x", got, want)
	}
	if FlowHash(1, a, 40000, 80, TCP, false) == FlowHash(2, a, 40000, 80, TCP, false) {
		t.Error("the seed does not change the hash")
	}
	if FlowHash(7, netip.AddrFrom16(a.As16()), 40000, 80, TCP, false) != FlowHash(7, a, 40000, 80, TCP, false) {
		t.Error("an IPv4-mapped client hashes unlike its IPv4 form")
	}
}
