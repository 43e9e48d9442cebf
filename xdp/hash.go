package xdp

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The MurmurHash3 (x86_32) constants, as in bpf/hash.h.
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
// program loads them on x86 and arm64.
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

// FlowHash returns the hash the datapath computes for a new flow from client address src and
// ports to a VIP (proto is the IP protocol number). With addrOnly (ClientIP session affinity) only
// the address counts. The flow's Maglev slot is FlowHash % M.
func FlowHash(seed uint32, src netip.Addr, sport, dport uint16, proto uint8, addrOnly bool) uint32 {
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

// addrFilterMul is bpf/hash.h's ADDR_FILTER_MUL.
const addrFilterMul = 0x9e3779b1

// filterBit is the address filter's bit for a (bpf/hash.h filter_bit): the address's word
// times addrFilterMul (an IPv6 address's words chained: each product xored with the next
// word), the product's top addrFilterLog2 bits.
func filterBit(a netip.Addr) uint32 {
	a = a.Unmap()
	var x uint32
	if a.Is4() {
		b := a.As4()
		x = binary.LittleEndian.Uint32(b[:])
	} else {
		b := a.As16()
		x = binary.LittleEndian.Uint32(b[0:])
		for i := 4; i < 16; i += 4 {
			x = x*addrFilterMul ^ binary.LittleEndian.Uint32(b[i:])
		}
	}
	return (x * addrFilterMul) >> (32 - addrFilterLog2)
}
