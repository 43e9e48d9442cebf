package main

import (
	"net/netip"
	"testing"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
)

// TestVIPRoutes: a VIP is announced when one of its frontends has minHealthyBackends serving
// backends, with the configured attributes on every route.
func TestVIPRoutes(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("2001:db8:100::1")
	d := &lb.Desired{Frontends: map[lb.Frontend]*lb.FrontendPlan{
		{Addr: a, Port: 80, Proto: lb.TCP}:  {Serving: 1},
		{Addr: a, Port: 443, Proto: lb.TCP}: {Serving: 2}, // one frontend of a is enough
		{Addr: b, Port: 80, Proto: lb.TCP}:  {Serving: 1},
		{Addr: c, Port: 53, Proto: lb.UDP}:  {Serving: 3},
	}}
	med := uint32(7)
	cfg := &config.BGP{MinHealthyBackends: 2, Communities: []uint32{65000<<16 | 100}, MED: &med,
		LargeCommunities: []config.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}}}
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
