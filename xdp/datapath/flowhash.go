// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The MurmurHash3 (x86_32) constants, as in flowhash.h.
const (
	murmurC1 = 0xcc9e2d51
	murmurC2 = 0x1b873593
)

func murmurMix(h, k uint32) uint32 {
	k *= murmurC1
	k = bits.RotateLeft32(k, 15)
	k *= murmurC2
	h ^= k
	h = bits.RotateLeft32(h, 13)
	return h*5 + 0xe6546b64
}

func murmurFinal(h, n uint32) uint32 {
	h ^= n
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// hashAddr folds an address's words, loaded little-endian from its wire bytes as the BPF
// programs load them on x86 and arm64.
func hashAddr(h uint32, a netip.Addr) (uint32, uint32) {
	if a.Is4() {
		b := a.As4()
		return murmurMix(h, binary.LittleEndian.Uint32(b[:])), 4
	}
	b := a.As16()
	for i := 0; i < 16; i += 4 {
		h = murmurMix(h, binary.LittleEndian.Uint32(b[i:]))
	}
	return h, 16
}

// FlowHash returns the hash every gateway datapath computes for a new flow from client address
// src and ports to a frontend (flow_hash in flowhash.h, bit for bit): MurmurHash3 x86_32 of
// the address bytes, then, unless addrOnly (ClientIP session affinity), the ports as on the wire
// and the protocol as a little-endian word. The flow's Maglev slot is FlowHash % M.
func FlowHash(seed uint32, src netip.Addr, sport, dport uint16, proto Protocol, addrOnly bool) uint32 {
	h, n := hashAddr(seed, src.Unmap())
	if !addrOnly {
		// The port word is {sport, dport} as on the wire, read as one little-endian u32.
		var w [4]byte
		binary.BigEndian.PutUint16(w[0:], sport)
		binary.BigEndian.PutUint16(w[2:], dport)
		h = murmurMix(h, binary.LittleEndian.Uint32(w[:]))
		h = murmurMix(h, uint32(proto))
		n += 8
	}
	return murmurFinal(h, n)
}
