// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestVIPRoutes: a VIP is announced when one of its frontends has minHealthyBackends serving
// backends, with the configured attributes on every route.
func TestVIPRoutes(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("2001:db8:100::1")
	d := &lb.Desired{Frontends: map[datapath.Frontend]*lb.FrontendPlan{
		{Addr: a, Port: 80, Proto: datapath.TCP}:  {Serving: 1},
		{Addr: a, Port: 443, Proto: datapath.TCP}: {Serving: 2}, // one frontend of a is enough
		{Addr: b, Port: 80, Proto: datapath.TCP}:  {Serving: 1},
		{Addr: c, Port: 53, Proto: datapath.UDP}:  {Serving: 3},
	}}
	med := uint32(7)
	cfg := &config.BGP{MinHealthyBackends: 2, Communities: []uint32{65000<<16 | 100}, MED: &med,
		LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}}}
	rs := vipRoutes(d, cfg)
	if len(rs) != 2 || rs[0].Prefix != netip.PrefixFrom(a, 32) || rs[1].Prefix != netip.PrefixFrom(c, 128) {
		t.Fatalf("routes %v, want %v/32 and %v/128", rs, a, c)
	}
	for _, r := range rs {
		if len(r.Communities) != 1 || len(r.LargeCommunities) != 1 || r.LargeCommunities[0].Local2 != 2 ||
			r.MED == nil || *r.MED != 7 || r.LocalPref != nil {
			t.Errorf("route %v: attributes %+v", r.Prefix, r)
		}
	}
	cfg.MinHealthyBackends = 4
	if rs := vipRoutes(d, cfg); len(rs) != 0 {
		t.Errorf("minHealthyBackends 4: routes %v, want none", rs)
	}
}

// TestVIPRoutesMerge: a VIP's route carries the bgp section's attributes plus those of every
// service with a frontend on it (serving or not): communities and large communities merged,
// sorted and de-duplicated; a service's LOCAL_PREF and MED replace the section's, the highest
// LOCAL_PREF and the lowest MED winning among services that disagree; the result does not
// depend on the order of the frontends.
func TestVIPRoutesMerge(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("198.18.100.3")
	u := func(v uint32) *uint32 { return &v }
	web := lb.RouteAttributes{Communities: []uint32{65000<<16 | 300, 65000<<16 | 100}, LocalPref: u(150), MED: u(20),
		LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 9, Local2: 9}}}
	api := lb.RouteAttributes{Communities: []uint32{65000<<16 | 200, 65000<<16 | 300}, LocalPref: u(300), MED: u(5),
		LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}, {Global: 65000, Local1: 3, Local2: 4}}}
	d := &lb.Desired{Frontends: map[datapath.Frontend]*lb.FrontendPlan{
		{Addr: a, Port: 80, Proto: datapath.TCP}:  {Service: "web", Serving: 1, Route: web},
		{Addr: a, Port: 443, Proto: datapath.TCP}: {Service: "api", Serving: 0, Route: api}, // down: attributes still count
		{Addr: b, Port: 80, Proto: datapath.TCP}:  {Service: "plain", Serving: 1},
		{Addr: c, Port: 80, Proto: datapath.TCP}:  {Service: "medonly", Serving: 1, Route: lb.RouteAttributes{MED: u(50)}},
	}}
	cfg := &config.BGP{MinHealthyBackends: 1, Communities: []uint32{65000<<16 | 100}, LocalPref: u(100), MED: u(7),
		LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}}}
	for run := range 20 { // map order varies: the result must not
		rs := vipRoutes(d, cfg)
		if len(rs) != 3 {
			t.Fatalf("routes %v, want 3", rs)
		}
		ra, rb, rc := rs[0], rs[1], rs[2]
		wantC := []uint32{65000<<16 | 100, 65000<<16 | 200, 65000<<16 | 300}
		wantLC := []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}, {Global: 65000, Local1: 3, Local2: 4}, {Global: 65000, Local1: 9, Local2: 9}}
		if !slices.Equal(ra.Communities, wantC) || !slices.Equal(ra.LargeCommunities, wantLC) ||
			ra.LocalPref == nil || *ra.LocalPref != 300 || ra.MED == nil || *ra.MED != 5 {
			t.Fatalf("run %d: shared VIP %v: %s, want communities %v, large %v, localPref 300, med 5", run, a, fmtRoute(ra), wantC, wantLC)
		}
		if !slices.Equal(rb.Communities, cfg.Communities) || len(rb.LargeCommunities) != 1 ||
			*rb.LocalPref != 100 || *rb.MED != 7 {
			t.Fatalf("run %d: VIP %v without service attributes: %s, want the section's", run, b, fmtRoute(rb))
		}
		if *rc.MED != 50 || *rc.LocalPref != 100 {
			t.Fatalf("run %d: VIP %v: %s, want med 50 (the service's) and localPref 100 (the section's)", run, c, fmtRoute(rc))
		}
		if run == 0 {
			t.Logf("%s\n%s\n%s", fmtRoute(ra), fmtRoute(rb), fmtRoute(rc))
		}
	}
	// The merge never writes into the config or the plan.
	if len(cfg.Communities) != 1 || *cfg.MED != 7 || len(web.Communities) != 2 || web.Communities[0] != 65000<<16|300 {
		t.Errorf("inputs modified: cfg %v med %d, web %v", cfg.Communities, *cfg.MED, web.Communities)
	}
}

func fmtRoute(r bgp.Route) string {
	opt := func(p *uint32) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("%v communities %v large %v localPref %s med %s", r.Prefix, r.Communities, r.LargeCommunities, opt(r.LocalPref), opt(r.MED))
}
