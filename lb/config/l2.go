// SPDX-License-Identifier: Apache-2.0
package config

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"gopkg.in/yaml.v3"
)

// L2 mode's defaults and bounds.
const (
	// DefaultL2Port is l2.port when absent: the UDP port of the heartbeats.
	DefaultL2Port = 7947
	// DefaultHeartbeatInterval is l2.heartbeatInterval when absent.
	DefaultHeartbeatInterval = 100 * time.Millisecond
	// DefaultL2Multiplier is l2.multiplier when absent: a peer silent for 3 intervals is dead.
	DefaultL2Multiplier  = 3
	minHeartbeatInterval = 10 * time.Millisecond
	maxHeartbeatInterval = 10 * time.Second
	maxL2Peers           = 63
)

var l2Fields = []string{"interface", "address", "peers", "port", "heartbeatInterval", "multiplier", "failback",
	"prefixes", "minHealthyBackends"}

// L2 configures L2 mode (key l2): the gateway answers ARP (IPv4) and neighbour solicitations
// (IPv6) for the VIPs it owns on its client-facing interface, for sites whose routers speak no
// BGP. The gateways of the segment tell each other, by heartbeats, that they are alive and which
// VIPs they can serve and answer for; each VIP is owned by one of them (rendezvous hashing).
// See docs/l2.md.
type L2 struct {
	// Interface (key interface; required) is the client-facing interface the VIPs are announced
	// on: one of the interfaces the datapath attaches to.
	Interface string
	// Address (key address; required) is this gateway's own unicast address on the segment: the
	// heartbeats' source and its identity in the VIP ranking. It must not change while the
	// site runs (the ranking, and so the owners, follow it).
	Address netip.Addr
	// Peers (key peers) are the other gateways' addresses on the segment, of Address's family,
	// each once (at most 63); empty: a single gateway, which owns every VIP it can serve.
	Peers []netip.Addr
	// Port (key port) is the heartbeats' UDP port, on every gateway the same; default 7947.
	Port uint16
	// HeartbeatInterval (key heartbeatInterval) is how often a heartbeat goes to each peer,
	// 10ms to 10s; default 100ms.
	HeartbeatInterval time.Duration
	// Multiplier (key multiplier) is how many intervals a silent peer stays alive, 2 to 255;
	// default 3 (a dead gateway's VIPs move after 300 ms).
	Multiplier int
	// Failback (key failback) moves a VIP back to its preferred gateway when that one returns;
	// default false: a VIP stays where it is while its owner lives (connections survive a move
	// either way: every gateway computes the same Maglev tables).
	Failback bool
	// Prefixes (key prefixes) are the VIPs announced by L2; default (absent): every VIP. With a
	// bgp section too, the VIPs inside these prefixes are announced by L2 only and the others
	// by BGP only (a mixed site).
	Prefixes []netip.Prefix
	// MinHealthyBackends (key minHealthyBackends) is how many backends taking new flows a VIP
	// needs, on one of its frontends, for this gateway to own it; default 1.
	MinHealthyBackends int
}

// DeadAfter is how long a silent peer stays alive.
func (c *L2) DeadAfter() time.Duration { return c.HeartbeatInterval * time.Duration(c.Multiplier) }

// Announces reports whether VIP a is announced by L2 (inside Prefixes, or Prefixes empty).
func (c *L2) Announces(a netip.Addr) bool {
	if c == nil {
		return false
	}
	if len(c.Prefixes) == 0 {
		return true
	}
	for _, p := range c.Prefixes {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

func (d *decoder) l2(n *yaml.Node, path string, ifaces []Interface) *L2 {
	o, ok := d.object(n, path, l2Fields)
	if !ok {
		return nil
	}
	c := &L2{Port: DefaultL2Port, HeartbeatInterval: DefaultHeartbeatInterval, Multiplier: DefaultL2Multiplier,
		MinHealthyBackends: DefaultMinHealthyBackends}
	if v := d.required(o, "interface", "the client-facing interface the VIPs are announced on"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("interface")); ok {
			found := false
			for _, i := range ifaces {
				found = found || i.Name == s
			}
			if !found && len(ifaces) > 0 {
				d.failf(v, o.at("interface"), "%q is not among the interfaces the datapath attaches to", s)
			}
			c.Interface = s
		}
	}
	if v := d.required(o, "address", "this gateway's address on the segment, the heartbeats' source"); v != nil {
		c.Address, _ = d.addr(v, o.at("address"))
	}
	if v := o.get("peers"); v != nil {
		if items, ok := d.list(v, o.at("peers")); ok {
			if len(items) > maxL2Peers {
				d.failf(v, o.at("peers"), "%d peers, at most %d", len(items), maxL2Peers)
			}
			seen := map[netip.Addr]bool{c.Address: true}
			for i, it := range items {
				p := fmt.Sprintf("%s[%d]", o.at("peers"), i)
				a, ok := d.addr(it, p)
				switch {
				case !ok:
				case c.Address.IsValid() && a.Is4() != c.Address.Is4():
					d.failf(it, p, "%s is not of the family of address %s", a, c.Address)
				case seen[a]:
					d.failf(it, p, "%s is listed twice (or is this gateway's own address)", a)
				default:
					seen[a] = true
					c.Peers = append(c.Peers, a)
				}
			}
		}
	}
	if v := o.get("port"); v != nil {
		c.Port, _ = d.uint16Of(v, o.at("port"), 1)
	}
	if v := o.get("heartbeatInterval"); v != nil {
		if t, ok := d.positiveDuration(v, o.at("heartbeatInterval")); ok {
			if t < minHeartbeatInterval || t > maxHeartbeatInterval {
				d.failf(v, o.at("heartbeatInterval"), "%v, want %v to %v", t, minHeartbeatInterval, maxHeartbeatInterval)
			}
			c.HeartbeatInterval = t
		}
	}
	if v := o.get("multiplier"); v != nil {
		m, _ := d.integer(v, o.at("multiplier"), 2, 255)
		c.Multiplier = int(m)
	}
	if v := o.get("failback"); v != nil {
		c.Failback, _ = d.boolean(v, o.at("failback"))
	}
	if v := o.get("prefixes"); v != nil {
		if items, ok := d.list(v, o.at("prefixes")); ok {
			for i, it := range items {
				if p, ok := d.prefix(it, fmt.Sprintf("%s[%d]", o.at("prefixes"), i)); ok {
					c.Prefixes = append(c.Prefixes, p)
				}
			}
		}
	}
	if v := o.get("minHealthyBackends"); v != nil {
		m, _ := d.integer(v, o.at("minHealthyBackends"), 1, math.MaxInt32)
		c.MinHealthyBackends = int(m)
	}
	return c
}
