// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"encoding/binary"
	"net/netip"
)

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
