// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/health"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// wakeAt makes the loop reconcile at t (loop goroutine only).
func (g *Gateway) wakeAt(t time.Time) {
	if g.warmTimer != nil {
		g.warmTimer.Stop()
	}
	g.warmTimer = time.AfterFunc(time.Until(t)+time.Millisecond, g.trigger)
}

// trigger asks the loop to reconcile.
func (g *Gateway) trigger() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// loop reconciles whenever woken, and retries failures with backoff.
func (g *Gateway) loop(ctx context.Context) {
	backoff := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
		case <-retry:
		}
		if err := g.Reconcile(); err != nil {
			backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
			g.log.Error("reconcile failed; will retry", "error", err, "retry_in", backoff)
			retry = time.After(backoff)
			continue
		}
		backoff, retry = 0, nil
	}
}

// Reconcile runs one reconcile pass, as the loop does whenever it is woken: the configured
// services with their health verdicts, and the Kubernetes Services, through the backend
// warm-up, planned and applied to the datapath; then the routes that follow are announced.
func (g *Gateway) Reconcile() error {
	start := time.Now()
	if g.kube != nil && !g.kube.ctrl.Synced() {
		// Until every Service is modelled, applying would tear down the forwarding of those
		// not modelled yet (a restart keeps it in the pinned maps): wait.
		return nil
	}
	g.mu.Lock()
	cfg := g.cfg
	services, pending := g.withHealth(cfg)
	known := g.known // replaced, never changed in place
	g.mu.Unlock()
	if g.kube != nil {
		services = append(services, g.kube.ctrl.Services()...)
		g.syncKubeRoutes(g.log)
	}
	services, due := g.warm.apply(services, known, warmupOf(cfg.Datapath), time.Now())
	if !due.IsZero() {
		g.wakeAt(due)
	}
	desired, errs := lb.Plan(services, planOptions(g.planOpts, cfg))
	cluster := cfg.Datapath.ClusterPrefixes
	if g.kube != nil {
		cluster = append(slices.Clip(cluster), g.kube.ctrl.ClusterPrefixes()...)
	}
	own := g.ownAddrs()
	desired.SetSite(cluster, own)
	g.warnLocalVIPs(desired, own)
	g.servicesInvalid.Set(float64(len(errs)))
	for _, err := range errs {
		g.log.Error("service not served", "error", err)
	}
	res, err := g.rec.Apply(desired)
	g.reconcileTime.Observe(time.Since(start).Seconds())
	names := map[datapath.Frontend]string{}
	down := map[datapath.Frontend]bool{}
	g.serving.Reset()
	for f, p := range desired.Frontends {
		names[datapath.Frontend{Addr: f.Addr, Port: f.Port, Proto: datapath.Protocol(f.Proto)}] = p.Service
		g.serving.WithLabelValues(p.Service, f.String()).Set(float64(p.Serving))
		if p.Serving == 0 {
			down[f] = true
			if !g.down[f] {
				g.log.Warn("frontend has no backend taking new flows", "frontend", f.String(), "service", p.Service)
			}
		} else if g.down[f] {
			g.log.Info("frontend has backends again", "frontend", f.String(), "service", p.Service, "backends", p.Serving)
		}
	}
	g.down = down
	g.coll.setServices(names)
	g.mu.Lock()
	var mh *minHealthy
	if g.speaker != nil && g.bgpCfg != nil {
		mh = &minHealthy{g.bgpCfg.MinHealthyBackends}
	}
	g.report.at, g.report.services, g.report.err = time.Now(), len(services), err
	g.report.announced, g.report.withdrawn = vipReport(desired, mh)
	g.mu.Unlock()
	if g.reporter != nil {
		g.reporter.Changed()
	}
	if err != nil {
		g.reconciles.WithLabelValues("error").Inc()
		return err
	}
	g.reconciles.WithLabelValues("ok").Inc()
	// Only the backends that take new flows are known: one held out (unhealthy, or new and not
	// probed yet) must not count as served when its verdict is Unknown again.
	known = map[netip.AddrPort]bool{}
	for _, p := range desired.Frontends {
		for _, b := range p.Backends {
			if b.Weight > 0 {
				known[b.Key] = true
			}
		}
	}
	g.mu.Lock()
	g.known = known
	bgpCfg := g.bgpCfg
	g.mu.Unlock()
	if g.l2 != nil {
		g.l2.setCandidates(l2Candidates(desired, cfg.L2), own)
	}
	if g.speaker != nil {
		routes := vipRoutes(desired, bgpCfg)
		if cfg.L2 != nil {
			// A mixed site: the VIPs L2 mode announces are not BGP's.
			routes = slices.DeleteFunc(routes, func(r bgp.Route) bool { return cfg.L2.Announces(r.Prefix.Addr()) })
		}
		if err := g.announce(routes); err != nil {
			return err
		}
	}
	if res.Changes() > 0 {
		g.log.Info("reconciled", "changes", res.Changes(), "vips", res.VIPsWritten, "tables", res.TablesWritten,
			"backends", res.BackendsWritten, "deleted_vips", res.VIPsDeleted, "site_sources", res.SiteWritten,
			"deleted_site_sources", res.SiteDeleted, "took", time.Since(start))
	}
	// Ready once the datapath holds the config with a verdict for every backend: a new backend
	// is held out until its first probe, and a daemon that said ready before then would serve
	// its VIPs with no backend at all.
	if pending == 0 && !g.ready.Load() {
		g.ready.Store(true)
		g.log.Info("ready")
	}
	return nil
}

// withHealth returns the config's services with health-check verdicts applied: unhealthy
// backends (and new ones not yet probed) take no new flows. pending counts the backends held
// out only because their first probe has not finished. g.mu must be held.
func (g *Gateway) withHealth(cfg *config.Config) (services []lb.Service, pending int) {
	out := make([]lb.Service, len(cfg.Services))
	for i, s := range cfg.Services {
		out[i] = s
		if _, checked := cfg.HealthChecks[s.Name]; !checked {
			continue
		}
		out[i].Backends = append([]lb.Backend(nil), s.Backends...)
		for j, b := range out[i].Backends {
			st, ok := g.checker.Status(healthKey(s.Name, b.Addr))
			if !ok || b.State != lb.Active {
				continue
			}
			switch st.Health {
			case health.Unhealthy:
				out[i].Backends[j].State = lb.Unhealthy
			case health.Unknown:
				if !g.knownBackend(s, b) {
					out[i].Backends[j].State = lb.Unhealthy
					pending++
				}
			}
		}
	}
	return out, pending
}

// knownBackend reports whether the datapath already serves backend b of service s.
func (g *Gateway) knownBackend(s lb.Service, b lb.Backend) bool {
	for _, e := range s.Endpoints(b) {
		if g.known[e] {
			return true
		}
	}
	return false
}

// planOptions are the plan settings of a pass: those the datapath was loaded with, and the
// config's forwarding mode.
func planOptions(loaded lb.PlanOptions, cfg *config.Config) lb.PlanOptions {
	loaded.Forwarding = cfg.Datapath.Forwarding
	return loaded
}

// ownAddrs returns the gateway's own addresses (every interface's, in its network namespace):
// no packet to a VIP arrives with one as its source. A failure to list them is logged, and
// gives none.
func (g *Gateway) ownAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		g.log.Warn("list the gateway's own addresses for the side checks", "error", err)
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// warnLocalVIPs warns, once per address, about VIPs that are also the gateway's own addresses:
// the datapath balances their services' ports, but the gateway's own listening sockets (sshd,
// BGP, metrics) then answer on an internet-announced address on every other port the datapath
// passes (docs/datapath.md, "Security model": blackhole routes, not addresses on lo).
func (g *Gateway) warnLocalVIPs(d *lb.Desired, own []netip.Addr) {
	local := map[netip.Addr]bool{}
	for _, a := range own {
		local[a] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.localVIPs == nil {
		g.localVIPs = map[netip.Addr]bool{}
	}
	for f := range d.Frontends {
		a := f.Addr.Unmap()
		if local[a] && !g.localVIPs[a] {
			g.log.Warn("a VIP is an address of this gateway: its own services answer on it; use a blackhole route for the VIP prefixes instead (docs/datapath.md, Security model)", "vip", a)
			g.localVIPs[a] = true
		}
	}
}
