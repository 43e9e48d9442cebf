// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/xlb-dev/xlb/bgp"
)

// family returns the GoBGP address family of the route (and of a session to addr).
func family(addr netip.Addr) gbgp.Family {
	if addr.Is4() {
		return gbgp.RF_IPv4_UC
	}
	return gbgp.RF_IPv6_UC
}

// path builds the GoBGP path for r. The next hop is the unspecified address, which GoBGP
// replaces with the session's local address for every peer (next hop self).
func path(r bgp.Route) (*apiutil.Path, error) {
	nlri, err := gbgp.NewIPAddrPrefix(r.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %v: %w", r.Prefix, err)
	}
	fam := family(r.Prefix.Addr())
	attrs := []gbgp.PathAttributeInterface{gbgp.NewPathAttributeOrigin(0)} // IGP
	if r.Prefix.Addr().Is4() {
		nh, err := gbgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		mp, err := gbgp.NewPathAttributeMpReachNLRI(fam, []gbgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	if len(r.Communities) > 0 {
		attrs = append(attrs, gbgp.NewPathAttributeCommunities(slices.Clone(r.Communities)))
	}
	if len(r.LargeCommunities) > 0 {
		var lc []*gbgp.LargeCommunity
		for _, c := range r.LargeCommunities {
			lc = append(lc, gbgp.NewLargeCommunity(c.Global, c.Local1, c.Local2))
		}
		attrs = append(attrs, gbgp.NewPathAttributeLargeCommunities(lc))
	}
	if r.LocalPref != nil {
		attrs = append(attrs, gbgp.NewPathAttributeLocalPref(*r.LocalPref))
	}
	if r.MED != nil {
		attrs = append(attrs, gbgp.NewPathAttributeMultiExitDisc(*r.MED))
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs}, nil
}
