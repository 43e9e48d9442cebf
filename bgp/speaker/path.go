package speaker

import (
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xlb-dev/xlb/bgp"
)

// family returns the GoBGP address family of the route (and of a session to addr).
func family(addr netip.Addr) *api.Family {
	if addr.Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// apiPath builds the GoBGP path for r. The next hop is the unspecified address, which GoBGP
// replaces with the session's local address for every peer (next hop self).
func apiPath(r bgp.Route) (*api.Path, error) {
	fam := family(r.Prefix.Addr())
	nlri, err := anypb.New(&api.IPAddressPrefix{
		Prefix: r.Prefix.Addr().String(), PrefixLen: uint32(r.Prefix.Bits()),
	})
	if err != nil {
		return nil, err
	}
	attrs := []proto.Message{&api.OriginAttribute{Origin: 0}} // IGP
	if r.Prefix.Addr().Is4() {
		attrs = append(attrs, &api.NextHopAttribute{NextHop: "0.0.0.0"})
	} else {
		attrs = append(attrs, &api.MpReachNLRIAttribute{
			Family: fam, NextHops: []string{"::"}, Nlris: []*anypb.Any{nlri},
		})
	}
	if len(r.Communities) > 0 {
		attrs = append(attrs, &api.CommunitiesAttribute{Communities: slices.Clone(r.Communities)})
	}
	if len(r.LargeCommunities) > 0 {
		lc := &api.LargeCommunitiesAttribute{}
		for _, c := range r.LargeCommunities {
			lc.Communities = append(lc.Communities, &api.LargeCommunity{
				GlobalAdmin: c.Global, LocalData1: c.Local1, LocalData2: c.Local2,
			})
		}
		attrs = append(attrs, lc)
	}
	if r.LocalPref != nil {
		attrs = append(attrs, &api.LocalPrefAttribute{LocalPref: *r.LocalPref})
	}
	if r.MED != nil {
		attrs = append(attrs, &api.MultiExitDiscAttribute{Med: *r.MED})
	}
	p := &api.Path{Family: fam, Nlri: nlri}
	for _, a := range attrs {
		x, err := anypb.New(a)
		if err != nil {
			return nil, err
		}
		p.Pattrs = append(p.Pattrs, x)
	}
	return p, nil
}
