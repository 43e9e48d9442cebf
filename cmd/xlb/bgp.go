package main

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
)

// bgpConfig converts the file's bgp section to the speaker's configuration.
func bgpConfig(c *config.BGP) bgp.Config {
	port := int32(c.ListenPort)
	if port == 0 {
		port = -1 // dial out only
	}
	return bgp.Config{RouterID: c.RouterID, ASN: c.ASN, ListenPort: port, GracefulRestart: c.GracefulRestart,
		Peers: bgpPeers(c)}
}

// bgpPeers converts the file's peers to the speaker's.
func bgpPeers(c *config.BGP) []bgp.Peer {
	out := make([]bgp.Peer, 0, len(c.Peers))
	for _, p := range c.Peers {
		out = append(out, bgp.Peer{Address: p.Address, ASN: p.ASN, Port: p.Port, PasswordFile: p.PasswordFile,
			MultihopTTL: p.MultihopTTL, HoldTime: p.HoldTime, KeepaliveTime: p.KeepaliveTime,
			ConnectRetry: p.ConnectRetry, Passive: p.Passive, LocalAddress: p.LocalAddress})
	}
	return out
}

// bgpRestartOnly reports whether a and b differ in settings the speaker takes only at start.
func bgpRestartOnly(a, b *config.BGP) bool {
	return a.RouterID != b.RouterID || a.ASN != b.ASN || a.ListenPort != b.ListenPort ||
		a.GracefulRestart != b.GracefulRestart
}

// vipRoutes returns the host routes to announce for desired: one per VIP address with at least
// c.MinHealthyBackends backends taking new flows on at least one of its frontends, with the
// configured attributes. Sorted by prefix.
func vipRoutes(desired *lb.Desired, c *config.BGP) []bgp.Route {
	up := map[netip.Addr]bool{}
	for f, p := range desired.Frontends {
		if p.Serving >= c.MinHealthyBackends {
			up[f.Addr.Unmap()] = true
		}
	}
	out := make([]bgp.Route, 0, len(up))
	for a := range up {
		r := bgp.Route{Prefix: netip.PrefixFrom(a, a.BitLen()), Communities: slices.Clone(c.Communities)}
		for _, lc := range c.LargeCommunities {
			r.LargeCommunities = append(r.LargeCommunities, bgp.LargeCommunity{Global: lc.Global, Local1: lc.Local1, Local2: lc.Local2})
		}
		if c.LocalPref != nil {
			v := *c.LocalPref
			r.LocalPref = &v
		}
		if c.MED != nil {
			v := *c.MED
			r.MED = &v
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b bgp.Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return out
}

// watchSessions logs every change of a BGP session's state (the speaker has no callback, so
// it polls Peers every second) until ctx ends.
func watchSessions(ctx context.Context, s *bgp.Speaker, log *slog.Logger) {
	last := map[netip.Addr]string{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		seen := map[netip.Addr]bool{}
		for _, p := range s.Peers() {
			seen[p.Address] = true
			prev, known := last[p.Address]
			if known && prev == p.State {
				continue
			}
			last[p.Address] = p.State
			if !known && p.State == "idle" {
				continue // just added: nothing happened yet
			}
			attrs := []any{"peer", p.Address.String(), "asn", p.ASN, "state", p.State}
			if known {
				attrs = append(attrs, "was", prev)
			}
			switch {
			case p.Up:
				log.Info("bgp session up", attrs...)
			case prev == "established":
				log.Warn("bgp session down", append(attrs, "last_error", p.LastError)...)
			default:
				log.Info("bgp session state changed", append(attrs, "last_error", p.LastError)...)
			}
		}
		for a := range last {
			if !seen[a] {
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
