// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"encoding/binary"
	"net/netip"
)

// Address families as datapath.h stores them in keys (FAMILY_V4, FAMILY_V6).
const (
	FamilyV4 = 4
	FamilyV6 = 6
)

// WireAddr returns a as datapath.h's struct addr holds it (IPv4 in the first word, the rest
// zero; the bytes in network order, so each word is the little-endian load of four wire bytes
// on the hosts xlb builds for) and its family. An IPv4-mapped address is IPv4.
func WireAddr(a netip.Addr) (w [4]uint32, family uint8) {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		w[0] = binary.NativeEndian.Uint32(b[:])
		return w, FamilyV4
	}
	b := a.As16()
	for i := range 4 {
		w[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
	return w, FamilyV6
}

// AddrFromWire is the inverse of WireAddr.
func AddrFromWire(w [4]uint32, family uint8) netip.Addr {
	var b [16]byte
	for i := range 4 {
		binary.NativeEndian.PutUint32(b[i*4:], w[i])
	}
	if family == FamilyV4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// WirePort converts a port between host order and the network order keys hold (it is its own
// inverse).
func WirePort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}
