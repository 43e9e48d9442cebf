// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"net/netip"
	"sort"

	"k8s.io/apimachinery/pkg/labels"
)

// PodRoute is a route to a node's Pod CIDR through the node: what the gateway needs to reach
// Pods when the cluster's CNI does not announce Pod routes to it.
type PodRoute struct {
	// Prefix is one of the Node's spec.podCIDRs.
	Prefix netip.Prefix
	// Via is the Node's InternalIP of the prefix's family.
	Via netip.Addr
	// Node names the Node.
	Node string
}

// PodRoutes returns a route per Pod CIDR of every Node that has an InternalIP of the CIDR's
// family, sorted by prefix. Malformed CIDRs, and CIDRs two nodes claim, are left out.
func (c *Controller) PodRoutes() []PodRoute {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	claims := map[netip.Prefix]int{}
	var out []PodRoute
	for _, n := range nodes {
		for _, s := range n.Spec.PodCIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				continue
			}
			p = p.Masked()
			var via netip.Addr
			for _, a := range n.Status.Addresses {
				if a.Type != "InternalIP" {
					continue
				}
				if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() == p.Addr().Is4() {
					via = ip.Unmap()
					break
				}
			}
			if !via.IsValid() {
				continue
			}
			claims[p]++
			out = append(out, PodRoute{Prefix: p, Via: via, Node: n.Name})
		}
	}
	kept := out[:0]
	for _, r := range out {
		if claims[r.Prefix] == 1 {
			kept = append(kept, r)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		if c := kept[i].Prefix.Addr().Compare(kept[j].Prefix.Addr()); c != 0 {
			return c < 0
		}
		return kept[i].Prefix.Bits() < kept[j].Prefix.Bits()
	})
	return kept
}

// ClusterPrefixes returns the site's own prefixes the Nodes show: every Node's spec.podCIDRs and
// the host prefix of each of its InternalIPs, sorted and without duplicates. Malformed ones are
// left out. They are sources a gateway never receives from the client side.
func (c *Controller) ClusterPrefixes() []netip.Prefix {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	seen := map[netip.Prefix]bool{}
	for _, n := range nodes {
		for _, s := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				seen[p.Masked()] = true
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type != "InternalIP" {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ip = ip.Unmap()
				seen[netip.PrefixFrom(ip, ip.BitLen())] = true
			}
		}
	}
	out := make([]netip.Prefix, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Addr().Compare(out[j].Addr()); c != 0 {
			return c < 0
		}
		return out[i].Bits() < out[j].Bits()
	})
	return out
}
