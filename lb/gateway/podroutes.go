// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/lb/kube"
)

// rtprotXLB is the route protocol number xlb marks the Pod CIDR routes it owns with (see
// /etc/iproute2/rt_protos: 120 is unassigned), so that it changes no route it did not make and
// finds its own after a restart.
const rtprotXLB = 120

// syncPodRoutes makes the main routing table's routes of protocol rtprotXLB exactly want: one
// route per Node Pod CIDR through the Node's InternalIP (kubernetes.podRoutes). It is diff-based:
// a route already right is not touched. Errors are joined; one bad route does not stop the rest.
func syncPodRoutes(want []kube.PodRoute) error {
	have, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Protocol: rtprotXLB, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing pod routes: %w", err)
	}
	wanted := map[netip.Prefix]netip.Addr{}
	for _, r := range want {
		wanted[r.Prefix] = r.Via
	}
	var errs []error
	present := map[netip.Prefix]bool{}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		p, ok := prefixOf(r.Dst)
		gw, _ := netip.AddrFromSlice(r.Gw)
		if ok && wanted[p].IsValid() && wanted[p] == gw.Unmap() {
			present[p] = true
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("removing pod route %v: %w", r.Dst, err))
		}
	}
	for _, r := range want {
		if present[r.Prefix] {
			continue
		}
		dst := &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), r.Prefix.Addr().BitLen())}
		// A route to the same prefix that is not ours (static, the CNI's) stays: replacing it
		// would take it over, and a later sync would delete it.
		family := netlink.FAMILY_V4
		if r.Prefix.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		other, err := netlink.RouteListFiltered(family, &netlink.Route{Dst: dst, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod route %v: listing routes: %w", r.Prefix, err))
			continue
		}
		if i := slices.IndexFunc(other, func(o netlink.Route) bool { return o.Protocol != rtprotXLB }); i >= 0 {
			errs = append(errs, fmt.Errorf("pod route %v via %v (node %s): the main table has a route to it already "+
				"(protocol %v) that xlb does not own; left alone", r.Prefix, r.Via, r.Node, other[i].Protocol))
			continue
		}
		route := &netlink.Route{Dst: dst, Gw: r.Via.AsSlice(), Protocol: rtprotXLB, Table: unix.RT_TABLE_MAIN}
		if err := netlink.RouteReplace(route); err != nil {
			errs = append(errs, fmt.Errorf("pod route %v via %v (node %s): %w", r.Prefix, r.Via, r.Node, err))
		}
	}
	return errors.Join(errs...)
}

// prefixOf converts n to a netip.Prefix.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}
