// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestFilterBitSpread: the address filter hash (and the next-hop cache slot, its top
// nhCacheLog2 bits: bpf/fib.h) spreads the address sets a site has (a /24, an IPv6 /120, IPv6
// sites × hosts) about as a random function would: 256 addresses into 65,536 bits collide
// about once, into 1,024 slots about 30 times.
func TestFilterBitSpread(t *testing.T) {
	sets := map[string][]netip.Addr{}
	for i := range 256 {
		sets["198.18.7.0/24"] = append(sets["198.18.7.0/24"], netip.AddrFrom4([4]byte{198, 18, 7, byte(i)}))
		b := netip.MustParseAddr("2001:db8:100::").As16()
		b[15] = byte(i)
		sets["2001:db8:100::/120"] = append(sets["2001:db8:100::/120"], netip.AddrFrom16(b))
		sets["2001:db8:S::H"] = append(sets["2001:db8:S::H"],
			netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::%x", i/16+1, i%16+1)))
	}
	for name, addrs := range sets {
		bitsSeen, slots := map[uint32]bool{}, map[uint32]bool{}
		for _, a := range addrs {
			bitsSeen[filterBit(a)] = true
			slots[filterBit(a)>>(addrFilterLog2-nhCacheLog2)] = true
		}
		t.Logf("%s: 256 addresses on %d filter bits, %d next-hop slots", name, len(bitsSeen), len(slots))
		if len(bitsSeen) < 250 || len(slots) < 200 {
			t.Errorf("%s: 256 addresses on %d filter bits and %d next-hop slots, want ≥ 250 and ≥ 200",
				name, len(bitsSeen), len(slots))
		}
	}
}
