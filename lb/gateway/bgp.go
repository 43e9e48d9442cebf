// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"cmp"
	"context"
	"fmt"
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

// startBGP starts the speaker in the daemon's network namespace (the gateway's) with no route
// and no session: the first successful reconcile sets the VIPs that can be served, and only then
// are the sessions opened (bgp.Config.WaitForRoutes), so that their first UPDATE carries them.
func (g *Gateway) startBGP(ctx context.Context, c *config.BGP) error {
	sp, err := speaker.New(bgpConfig(c), g.log)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sp.Start(sctx); err != nil {
		_ = sp.Stop(context.Background(), speaker.Withdraw)
		return err
	}
	g.speaker, g.bgpCfg, g.announced = sp, c, map[netip.Prefix]bool{}
	return nil
}

// stopBGP stops the speaker: withdrawing the routes first if withdrawOnExit or cleanup (the
// datapath is about to go), else leaving them at the routers for graceful restart.
func (g *Gateway) stopBGP(cleanup bool) {
	g.mu.Lock()
	// A start that failed leaves the routers what an earlier run left them (graceful restart),
	// unless the datapath goes too: withdrawing before the first reconcile opens sessions. A
	// datapath that stops with the process (AF_XDP) forwards nothing the routers could keep
	// sending to: its routes always go.
	withdraw := cleanup || !g.dp.Persistent() || (g.bgpCfg.WithdrawOnExit && g.running)
	g.mu.Unlock()
	mode, what := speaker.KeepRoutes, "routes kept at the peers for graceful restart"
	if withdraw {
		mode, what = speaker.Withdraw, "routes withdrawn"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.speaker.Stop(ctx, mode); err != nil {
		g.log.Error("bgp stop", "error", err)
		return
	}
	g.log.Info("bgp stopped; "+what, "routes", len(g.announced))
}

// announce makes routes the speaker's routes and logs the VIPs announced and withdrawn.
func (g *Gateway) announce(routes []bgp.Route) error {
	if err := g.speaker.SetRoutes(routes); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	now := make(map[netip.Prefix]bool, len(routes))
	for _, r := range routes {
		now[r.Prefix] = true
		if !g.announced[r.Prefix] {
			g.log.Info("bgp: announcing VIP", "prefix", r.Prefix.String())
		}
	}
	for p := range g.announced {
		if !now[p] {
			g.log.Warn("bgp: withdrawing VIP (too few healthy backends)", "prefix", p.String())
		}
	}
	g.announced = now
	return nil
}

// reloadBGP applies a reloaded bgp section to the running speaker (its peers; the route
// attributes apply at the next reconcile) and returns the section to serve from now on.
func (g *Gateway) reloadBGP(c *config.BGP) *config.BGP {
	switch {
	case g.speaker == nil:
		if c != nil {
			g.log.Warn("bgp section added; the BGP speaker starts at the next restart")
		}
		return nil
	case c == nil:
		g.log.Warn("bgp section removed; the BGP speaker keeps its settings until the next restart")
		return g.bgpCfg
	}
	if bgpRestartOnly(g.bgpCfg, c) {
		g.log.Warn("bgp routerID, asn, listenPort or gracefulRestart changed; they take effect at the next restart")
	}
	if err := g.speaker.SetPeers(c.Peers); err != nil {
		g.log.Error("config reload: bgp peers unchanged", "error", err)
	}
	return c
}

// withObjectPeers returns the bgp section c with the peers of the BGPPeer objects that select
// this gateway added after the file's and the attributes of the BGPAdvertisements that select
// it, and what kept any of them out: an address the file has (the file wins), a peer the
// speaker's configuration refuses with the others (a passive peer without listenPort, say), a
// LOCAL_PREF or MED the file sets otherwise. Outside Kubernetes mode it is c.
func (g *Gateway) withObjectPeers(c *config.BGP) (*config.BGP, []string) {
	if g.peers == nil {
		return c, nil
	}
	objPeers, attrs, problems := g.peers.Peers()
	if len(objPeers) == 0 && attrs.IsZero() {
		return c, problems
	}
	if c == nil {
		return nil, append(problems, fmt.Sprintf("%d BGPPeer objects (and BGPAdvertisements: %v) select this gateway, but its config file has no bgp section (router ID, AS number): none is used", len(objPeers), !attrs.IsZero()))
	}
	out := *c
	out.Peers = slices.Clone(c.Peers)
	// The advertisements' attributes: communities added, LOCAL_PREF and MED unless the file
	// sets them.
	for _, x := range attrs.Communities {
		if !slices.Contains(out.Communities, x) {
			out.Communities = append(slices.Clip(out.Communities), x)
		}
	}
	for _, x := range attrs.LargeCommunities {
		if !slices.Contains(out.LargeCommunities, x) {
			out.LargeCommunities = append(slices.Clip(out.LargeCommunities), x)
		}
	}
	switch {
	case attrs.LocalPref == nil:
	case c.LocalPref == nil:
		out.LocalPref = attrs.LocalPref
	case *c.LocalPref != *attrs.LocalPref:
		problems = append(problems, fmt.Sprintf("BGPAdvertisement localPref %d ignored: the config file sets %d", *attrs.LocalPref, *c.LocalPref))
	}
	switch {
	case attrs.MED == nil:
	case c.MED == nil:
		out.MED = attrs.MED
	case *c.MED != *attrs.MED:
		problems = append(problems, fmt.Sprintf("BGPAdvertisement med %d ignored: the config file sets %d", *attrs.MED, *c.MED))
	}
	for _, p := range objPeers {
		if slices.ContainsFunc(c.Peers, func(f bgp.Peer) bool { return f.Address == p.Address }) {
			problems = append(problems, fmt.Sprintf("BGPPeer for %v: the config file has a peer of that address, which wins", p.Address))
			continue
		}
		try := out
		try.Peers = append(slices.Clone(out.Peers), p)
		if err := bgpConfig(&try).Validate(); err != nil {
			problems = append(problems, fmt.Sprintf("BGPPeer for %v: %v", p.Address, err))
			continue
		}
		out.Peers = try.Peers
	}
	return &out, problems
}

// applyPeers applies the BGPPeer objects' peers to the running speaker (PeerSource changed),
// next to the file's.
func (g *Gateway) applyPeers() {
	g.mu.Lock()
	file := g.cfg.BGP
	g.mu.Unlock()
	merged, problems := g.withObjectPeers(file)
	bgpCfg := g.reloadBGP(merged)
	g.mu.Lock()
	g.bgpCfg = bgpCfg
	g.peerProblems = problems
	g.mu.Unlock()
	g.log.Info("BGPPeer objects applied", "peers", peerAddrs(bgpCfg), "problems", len(problems))
	if g.reporter != nil {
		g.reporter.Changed()
	}
	g.trigger()
}

// peerAddrs lists c's peers' addresses (c nil: none).
func peerAddrs(c *config.BGP) []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.Peers))
	for _, p := range c.Peers {
		out = append(out, p.Address.String())
	}
	return out
}
