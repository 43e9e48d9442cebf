// SPDX-License-Identifier: Apache-2.0
package bgp

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRoutes(t *testing.T) {
	c, err := ParseCommunity("65000:100")
	if err != nil || c != 65000<<16|100 {
		t.Fatalf("ParseCommunity = %#x, %v", c, err)
	}
	if _, err := ParseCommunity("70000:1"); err == nil {
		t.Fatal("ParseCommunity(70000:1) accepted")
	}
	lc, err := ParseLargeCommunity("4200000000:1:2")
	if err != nil || lc != (LargeCommunity{4200000000, 1, 2}) || lc.String() != "4200000000:1:2" {
		t.Fatalf("ParseLargeCommunity = %v, %v", lc, err)
	}
	for _, bad := range []string{"198.18.100.0/24", "2001:db8::/64", "0.0.0.0/32"} {
		r := Route{Prefix: netip.MustParsePrefix(bad)}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Validate(%s) = %v, want an error naming it", bad, err)
		}
	}
	med := uint32(5)
	r := Route{Prefix: netip.MustParsePrefix("2001:db8:100::1/128"), Communities: []uint32{c},
		LargeCommunities: []LargeCommunity{lc}, MED: &med}
	cp := r.Clone()
	if !r.Equal(cp) || r.Equal(Route{Prefix: r.Prefix}) {
		t.Fatal("Route.Equal")
	}
	*cp.MED, cp.Communities[0], cp.LargeCommunities[0].Global = 6, 1, 1
	if *r.MED != 5 || r.Communities[0] != c || r.LargeCommunities[0] != lc {
		t.Fatal("Clone shares memory with the original")
	}
}
