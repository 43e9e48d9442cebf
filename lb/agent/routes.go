// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Routes finds the interfaces through which the node reaches its own Pods: where the replies
// of a Pod to another Pod on the node leave, and so where the reply rewriter must run for the
// in-cluster hairpin (a client Pod whose VIP connection was sent to a Pod on its own node).
type Routes interface {
	// Interfaces returns the names of the Ethernet interfaces the node's main routing table
	// sends packets for targets through, directly (no gateway). For a single address: the
	// interface of the longest route holding it. For a wider prefix (a Pod CIDR): the
	// interfaces of every route inside it (CNIs that route each Pod to its veth) and of the
	// prefix itself. A bridge stands for its ports (CNIs that put the Pods' veths on a
	// bridge: Pod-to-Pod packets are switched there, and leave by the port toward the Pod).
	Interfaces(targets []netip.Prefix) ([]string, error)
}

// NodeRoutes is Routes from the routing tables and links of the calling thread's network
// namespace (netlink).
type NodeRoutes struct{}

var _ Routes = NodeRoutes{}

// Interfaces implements Routes.
func (NodeRoutes) Interfaces(targets []netip.Prefix) ([]string, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	var routes []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("agent: list the main routing table: %w", err)
		}
		routes = append(routes, rs...)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("agent: list links: %w", err)
	}
	return podInterfaces(targets, directRoutes(routes), linkInfos(links)), nil
}

// directRoute is a route of the main table straight onto a link: no gateway, unicast.
type directRoute struct {
	dst     netip.Prefix
	ifindex int
}

// directRoutes keeps the unicast routes without a gateway (nor multipath) of routes.
func directRoutes(routes []netlink.Route) []directRoute {
	var out []directRoute
	for _, r := range routes {
		if r.Dst == nil || r.Gw != nil || len(r.MultiPath) > 0 || r.Type != unix.RTN_UNICAST || r.LinkIndex == 0 {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		out = append(out, directRoute{dst: netip.PrefixFrom(a.Unmap(), ones).Masked(), ifindex: r.LinkIndex})
	}
	return out
}

// linkInfo is what podInterfaces needs of a link.
type linkInfo struct {
	name     string
	ethernet bool // a 6-byte hardware address: the node side's programs read an Ethernet header
	bridge   bool
	master   int // the bridge it is a port of (0: none)
}

// linkInfos indexes links by ifindex.
func linkInfos(links []netlink.Link) map[int]linkInfo {
	out := make(map[int]linkInfo, len(links))
	for _, l := range links {
		a := l.Attrs()
		out[a.Index] = linkInfo{name: a.Name, ethernet: len(a.HardwareAddr) == 6 && a.Flags&net.FlagLoopback == 0,
			bridge: l.Type() == "bridge", master: a.MasterIndex}
	}
	return out
}

// podInterfaces is Routes.Interfaces over a snapshot of the routes and links, sorted.
func podInterfaces(targets []netip.Prefix, routes []directRoute, links map[int]linkInfo) []string {
	found := map[int]bool{}
	for _, t := range targets {
		t = netip.PrefixFrom(t.Addr().Unmap(), t.Bits()-unmappedBits(t)).Masked()
		if !t.IsValid() {
			continue
		}
		if t.IsSingleIP() {
			best := -1
			for i, r := range routes {
				if r.dst.Contains(t.Addr()) && (best < 0 || r.dst.Bits() > routes[best].dst.Bits()) {
					best = i
				}
			}
			if best >= 0 {
				found[routes[best].ifindex] = true
			}
			continue
		}
		for _, r := range routes {
			if r.dst.Bits() >= t.Bits() && t.Contains(r.dst.Addr()) {
				found[r.ifindex] = true
			}
		}
	}
	var out []string
	add := func(l linkInfo) {
		if l.ethernet && !l.bridge && !slices.Contains(out, l.name) {
			out = append(out, l.name)
		}
	}
	for idx := range found {
		l, ok := links[idx]
		if !ok {
			continue
		}
		if !l.bridge {
			add(l)
			continue
		}
		for _, port := range links {
			if port.master == idx {
				add(port)
			}
		}
	}
	slices.Sort(out)
	return out
}

// unmappedBits is how many bits an IPv4-mapped IPv6 prefix loses when unmapped.
func unmappedBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}
