package main

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/bgp/speaker"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
)

// bgpConfig converts the file's bgp section to the speaker's configuration. The sessions wait
// for the first reconcile's routes (WaitForRoutes): a restarted daemon whose first reconcile
// waits (for the Kubernetes model, say) would otherwise hand the routers an empty table and an
// End-of-RIB, and they would drop the routes graceful restart kept for it.
func bgpConfig(c *config.BGP) bgp.Config {
	port := int32(c.ListenPort)
	if port == 0 {
		port = -1 // dial out only
	}
	return bgp.Config{RouterID: c.RouterID, ASN: c.ASN, ListenPort: port, GracefulRestart: c.GracefulRestart,
		Peers: c.Peers, WaitForRoutes: true}
}

// bgpRestartOnly reports whether a and b differ in settings the speaker takes only at start.
func bgpRestartOnly(a, b *config.BGP) bool {
	return a.RouterID != b.RouterID || a.ASN != b.ASN || a.ListenPort != b.ListenPort ||
		a.GracefulRestart != b.GracefulRestart
}

// vipRoutes returns the host routes to announce for desired: one per VIP address with at least
// c.MinHealthyBackends backends taking new flows on at least one of its frontends. Sorted by
// prefix. Each route carries the attributes of routeAttributes.
func vipRoutes(desired *lb.Desired, c *config.BGP) []bgp.Route {
	up := map[netip.Addr]bool{}
	// attrs maps a VIP address → the route attributes of the services with a frontend on it
	// (serving or not, so that a backend's health never changes a route's attributes).
	attrs := map[netip.Addr][]lb.RouteAttributes{}
	for f, p := range desired.Frontends {
		a := f.Addr.Unmap()
		if p.Serving >= c.MinHealthyBackends {
			up[a] = true
		}
		attrs[a] = append(attrs[a], p.Route)
	}
	out := make([]bgp.Route, 0, len(up))
	for a := range up {
		r := routeAttributes(c, attrs[a])
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b bgp.Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return out
}

// routeAttributes merges the bgp section's route attributes with those of the services using
// one VIP (svcs, one entry per frontend, in any order):
//   - communities and large communities: the union of the section's and every service's,
//     sorted and without duplicates;
//   - LOCAL_PREF and MED: a value set by a service replaces the section's; when the services
//     sharing the VIP set different values, the highest LOCAL_PREF and the lowest MED win (the
//     most attractive: a VIP is announced once, for all of them, and no service's traffic should
//     be made less preferred by another's setting). Unset everywhere: the section's, or none.
//
// The result depends only on the set of values, never on the order of svcs.
func routeAttributes(c *config.BGP, svcs []lb.RouteAttributes) bgp.Route {
	var r bgp.Route
	r.Communities = slices.Clone(c.Communities)
	r.LargeCommunities = slices.Clone(c.LargeCommunities)
	var localPref, med *uint32
	for _, s := range svcs {
		r.Communities = append(r.Communities, s.Communities...)
		r.LargeCommunities = append(r.LargeCommunities, s.LargeCommunities...)
		if s.LocalPref != nil && (localPref == nil || *s.LocalPref > *localPref) {
			localPref = s.LocalPref
		}
		if s.MED != nil && (med == nil || *s.MED < *med) {
			med = s.MED
		}
	}
	if localPref == nil {
		localPref = c.LocalPref
	}
	if med == nil {
		med = c.MED
	}
	if localPref != nil {
		v := *localPref
		r.LocalPref = &v
	}
	if med != nil {
		v := *med
		r.MED = &v
	}
	slices.Sort(r.Communities)
	r.Communities = slices.Compact(r.Communities)
	slices.SortFunc(r.LargeCommunities, func(a, b bgp.LargeCommunity) int {
		return cmp.Or(cmp.Compare(a.Global, b.Global), cmp.Compare(a.Local1, b.Local1), cmp.Compare(a.Local2, b.Local2))
	})
	r.LargeCommunities = slices.Compact(r.LargeCommunities)
	if len(r.Communities) == 0 {
		r.Communities = nil
	}
	if len(r.LargeCommunities) == 0 {
		r.LargeCommunities = nil
	}
	return r
}

// watchSessions logs every change of a BGP session's state, and every new last error of a
// session that is not up (a wrong MD5 password shows only as connection attempts timing out,
// with no change of state), until ctx ends. The speaker has no callback, so it polls Peers
// every second.
func watchSessions(ctx context.Context, s *speaker.Speaker, log *slog.Logger) {
	type seen struct{ state, lastError string }
	last := map[netip.Addr]seen{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		present := map[netip.Addr]bool{}
		for _, p := range s.Peers() {
			present[p.Address] = true
			prev, known := last[p.Address]
			last[p.Address] = seen{p.State, p.LastError}
			attrs := []any{"peer", p.Address.String(), "asn", p.ASN, "state", p.State}
			switch {
			case known && prev.state == p.State:
				if !p.Up && p.LastError != "" && p.LastError != prev.lastError {
					log.Warn("bgp session error", append(attrs, "last_error", p.LastError)...)
				}
				continue
			case !known && p.State == "idle":
				continue // just added: nothing happened yet
			}
			if known {
				attrs = append(attrs, "was", prev.state)
			}
			switch {
			case p.Up:
				log.Info("bgp session up", attrs...)
			case prev.state == "established":
				log.Warn("bgp session down", append(attrs, "last_error", p.LastError)...)
			default:
				log.Info("bgp session state changed", append(attrs, "last_error", p.LastError)...)
			}
		}
		for a := range last {
			if !present[a] {
				delete(last, a)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
