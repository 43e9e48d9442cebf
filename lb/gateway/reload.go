// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
)

// reload re-reads the config file, with the SiteSettings object's values over it; an invalid one
// is logged and the old one keeps serving.
func (g *Gateway) reload() {
	cfg, err := config.Load(g.opts.ConfigPath)
	if err != nil {
		g.configReloads.WithLabelValues("rejected").Inc()
		g.log.Error("config reload rejected; still serving the previous config", "config", g.opts.ConfigPath, "error", err)
		return
	}
	g.mu.Lock()
	site := g.site.site
	g.mu.Unlock()
	overlaySite(cfg, site, g.log)
	// Every service must plan: a reload must not take a VIP:port from a service that serves it
	// now (conflicts go to the service whose name sorts first) or silently drop a service.
	if _, errs := lb.Plan(cfg.Services, planOptions(g.planOpts, cfg)); len(errs) > 0 {
		g.configReloads.WithLabelValues("rejected").Inc()
		g.log.Error("config reload rejected: services; still serving the previous config", "config", g.opts.ConfigPath,
			"error", errors.Join(errs...))
		return
	}
	if cfg.BGP != nil && g.speaker != nil {
		if err := bgpConfig(cfg.BGP).Validate(); err != nil {
			g.configReloads.WithLabelValues("rejected").Inc()
			g.log.Error("config reload rejected: bgp; still serving the previous config", "config", g.opts.ConfigPath, "error", err)
			return
		}
	}
	// Check the health targets before Set: Set applies the valid ones even when it fails, and
	// a rejected reload must leave the checker with the previous config's targets.
	targets := healthTargets(cfg)
	var terrs []error
	keys := map[string]bool{}
	for _, t := range targets {
		if err := t.Validate(); err != nil {
			terrs = append(terrs, err)
		} else if keys[t.Key] {
			terrs = append(terrs, fmt.Errorf("target %q: listed twice", t.Key))
		}
		keys[t.Key] = true
	}
	if len(terrs) == 0 {
		err = g.checker.Set(targets)
	} else {
		err = errors.Join(terrs...)
	}
	if err != nil {
		g.configReloads.WithLabelValues("rejected").Inc()
		g.log.Error("config reload rejected: health checks; still serving the previous config", "config", g.opts.ConfigPath, "error", err)
		return
	}
	if err := g.reloadKube(cfg); err != nil {
		g.configReloads.WithLabelValues("rejected").Inc()
		g.log.Error("config reload rejected: pools; still serving the previous config", "config", g.opts.ConfigPath, "error", err)
		return
	}
	g.reloadL2(cfg)
	if cfg.Datapath.Kind != g.cfg.Datapath.Kind {
		g.log.Warn("datapath kind changed; it takes effect at the next restart", "kind", g.cfg.Datapath.Kind,
			"next", cfg.Datapath.Kind)
	} else if a, b := cfg.Datapath, g.cfg.Datapath; func() bool {
		a.BackendWarmup, b.BackendWarmup, a.Forwarding, b.Forwarding = 0, 0, lb.Forwarding{}, lb.Forwarding{}
		a.ClusterPrefixes, b.ClusterPrefixes = nil, nil // a reload applies them
		return !reflect.DeepEqual(a, b)
	}() {
		g.log.Warn("datapath settings (sizes, timeouts, seed, table size) changed; they take effect at the next restart")
	}
	if cfg.Listen != g.cfg.Listen {
		g.log.Warn("listen address changed; it takes effect at the next restart", "listen", g.cfg.Listen)
	}
	if err := attach(g.dp, cfg, g.log); err != nil {
		g.log.Error("config reload: interfaces", "error", err)
	}
	merged, problems := g.withObjectPeers(cfg.BGP)
	bgpCfg := g.reloadBGP(merged)
	g.mu.Lock()
	g.cfg = cfg
	g.bgpCfg = bgpCfg
	g.peerProblems = problems
	g.mu.Unlock()
	g.configReloads.WithLabelValues("applied").Inc()
	g.log.Info("config reloaded", "services", len(cfg.Services))
	if cfg.Datapath.Forwarding != g.cfg.Datapath.Forwarding {
		g.log.Info("forwarding changed", "forwarding", cfg.Datapath.Forwarding.Mode, "dsrFallback", cfg.Datapath.Forwarding.Fallback.String())
	}
	warnSharedEndpoints(g.log, cfg.Services, cfg.Datapath.Forwarding)
	g.trigger()
}

// reloadL2 keeps the running L2 announcer's section in a reloaded cfg: its prefixes and
// minHealthyBackends apply at once, the rest (interface, address, peers, port, timers,
// failback) at the next restart, as do adding or removing the section.
func (g *Gateway) reloadL2(cfg *config.Config) {
	switch {
	case g.l2 == nil && cfg.L2 != nil:
		g.log.Warn("l2 section added; L2 mode starts at the next restart")
		cfg.L2 = nil
	case g.l2 != nil && cfg.L2 == nil:
		g.log.Warn("l2 section removed; L2 mode keeps its settings until the next restart")
		cfg.L2 = g.l2.cfg
	case g.l2 != nil:
		a, b := *cfg.L2, *g.l2.cfg
		a.Prefixes, b.Prefixes, a.MinHealthyBackends, b.MinHealthyBackends = nil, nil, 0, 0
		if !reflect.DeepEqual(a, b) {
			g.log.Warn("l2 interface, address, peers, port, heartbeat timers or failback changed; they take effect at the next restart")
		}
	}
}
