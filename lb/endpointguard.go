// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"net/netip"
	"slices"
)

// An EndpointSlice is written by whoever may write one in the Service's namespace: with a
// Service without a selector, any tenant can list any address as an endpoint and have the
// gateways forward the Internet's traffic there, with the client's address, from inside the
// cluster (the CVE-2021-25740 class: a node's kubelet, another tenant's VIP or Pod, the
// gateways themselves). EndpointGuard decides which endpoint addresses a Service may use.

// EndpointRefusal says why an endpoint address is not used: the Event's reason and the
// metric's label. The zero value is no refusal.
type EndpointRefusal string

// Why an endpoint is refused.
const (
	// RefusedNotUnicast: unspecified, loopback, link-local, multicast or broadcast, an
	// IPv4-mapped IPv6 address or one with a zone: nothing a gateway forwards to.
	RefusedNotUnicast EndpointRefusal = "NotUnicast"
	// RefusedNode: a Node's address (the gateways are Nodes too), unless the pool's
	// externalEndpoints lists it (hostNetwork backends).
	RefusedNode EndpointRefusal = "NodeAddress"
	// RefusedFrontend: a load-balancer address (an address of a pool, one a Service holds) or a
	// Service's external IP: the gateways' own frontends, never a backend.
	RefusedFrontend EndpointRefusal = "LoadBalancerAddress"
	// RefusedClusterIP: a Service's cluster IP or inside a service CIDR: it would reach
	// another Service's endpoints through kube-proxy.
	RefusedClusterIP EndpointRefusal = "ClusterIP"
	// RefusedReserved: an address the site reserves (kubernetes.reservedAddresses: the
	// gateways', the routers', anything no Service may reach).
	RefusedReserved EndpointRefusal = "ReservedAddress"
	// RefusedOtherNamespace: the endpoint's targetRef names a Pod of another namespace.
	RefusedOtherNamespace EndpointRefusal = "OtherNamespacePod"
	// RefusedOutsidePods: outside the cluster's Pod networks and the pool's externalEndpoints
	// (or, the Pod networks unknown, not a Pod of the Service's namespace either).
	RefusedOutsidePods EndpointRefusal = "OutsidePodNetwork"
)

// Explain says in words why an endpoint was refused, naming nothing but the address's
// category: the Event goes to the Service's namespace, and must not tell its tenant whose node,
// VIP or Service the address is.
func (r EndpointRefusal) Explain() string {
	switch r {
	case RefusedNotUnicast:
		return "not a unicast address a gateway forwards to"
	case RefusedNode:
		return "a node's address (allowed only where the address pool's externalEndpoints lists it)"
	case RefusedFrontend:
		return "a load-balancer address or external IP: a frontend, never a backend"
	case RefusedClusterIP:
		return "a cluster IP"
	case RefusedReserved:
		return "an address the site reserves"
	case RefusedOtherNamespace:
		return "its targetRef names a Pod of another namespace"
	case RefusedOutsidePods:
		return "outside the cluster's Pod networks (allowed only where the address pool's externalEndpoints lists it)"
	}
	return string(r)
}

// AddrKind is what a reserved address is.
type AddrKind uint8

// The kinds of reserved addresses, in the order a lookup reports them when an address is
// several.
const (
	// KindNode: a Node's address.
	KindNode AddrKind = iota + 1
	// KindFrontend: a load-balancer address or an external IP.
	KindFrontend
	// KindClusterIP: a cluster IP or a service CIDR.
	KindClusterIP
	// KindReserved: reserved by the site.
	KindReserved
)

// refusal is the refusal of an address of kind k.
func (k AddrKind) refusal() EndpointRefusal {
	switch k {
	case KindNode:
		return RefusedNode
	case KindFrontend:
		return RefusedFrontend
	case KindClusterIP:
		return RefusedClusterIP
	}
	return RefusedReserved
}

// AddrRange is a range of reserved addresses, First to Last inclusive, of one family.
type AddrRange struct {
	First, Last netip.Addr
	Kind        AddrKind
}

// contains reports whether a is in r.
func (r AddrRange) contains(a netip.Addr) bool {
	return r.First.Is4() == a.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// PrefixRange returns p as a range of kind k.
func PrefixRange(p netip.Prefix, k AddrKind) AddrRange {
	p = p.Masked()
	first := p.Addr()
	last := first.As16()
	bits := p.Bits()
	if first.Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		last[i/8] |= 1 << (7 - i%8)
	}
	l := netip.AddrFrom16(last)
	if first.Is4() {
		l = l.Unmap()
	}
	return AddrRange{First: first, Last: l, Kind: k}
}

// EndpointRef is one endpoint as an EndpointSlice writes it.
type EndpointRef struct {
	// Addr is its (first) address.
	Addr netip.Addr
	// Pod says its targetRef names a Pod; PodNamespace is that Pod's namespace ("": the
	// slice's own).
	Pod          bool
	PodNamespace string
}

// EndpointGuard holds what the cluster's objects say about its addresses. The zero value
// refuses only what is not unicast and, knowing no Pod network, every endpoint that is not a
// Pod of its Service's namespace. Not safe for concurrent writes; Check only reads.
type EndpointGuard struct {
	// PodCIDRs are the cluster's Pod networks (the Nodes' spec.podCIDRs, the site's
	// kubernetes.podCIDRs). When there are some, an endpoint must be inside one (or inside the
	// pool's externalEndpoints): a targetRef is written by the slice's author and proves
	// nothing. When there are none (a CNI that allocates its own addresses and sets no
	// podCIDRs, no configured ones) an endpoint must be a Pod of the Service's namespace.
	PodCIDRs []netip.Prefix
	// Addrs are reserved single addresses (the Nodes', the Services' cluster IPs, external IPs
	// and load-balancer addresses) by kind.
	Addrs map[netip.Addr]AddrKind
	// Ranges are reserved ranges (the pools' addresses, service CIDRs, the site's reserved
	// prefixes).
	Ranges []AddrRange
}

// Reserve records a as an address of kind k. An address that is a frontend, a cluster IP or
// reserved as well as a node's is refused as the former, which no pool's externalEndpoints
// can open; otherwise the first kind recorded stays.
func (g *EndpointGuard) Reserve(a netip.Addr, k AddrKind) {
	if !a.IsValid() {
		return
	}
	a = a.Unmap()
	if g.Addrs == nil {
		g.Addrs = map[netip.Addr]AddrKind{}
	}
	if old, ok := g.Addrs[a]; !ok || (old == KindNode && k != KindNode) {
		g.Addrs[a] = k
	}
}

// Check says whether a Service of namespace ns may use endpoint e, given allowed: the
// prefixes outside the Pod networks its address pool lets its Services forward to (the
// operator's opt-out, externalEndpoints). The rules, in order:
//   - not unicast (RefusedNotUnicast): never;
//   - a targetRef naming a Pod of another namespace: never;
//   - a load-balancer address, external IP, cluster IP, service CIDR or reserved address:
//     never, allowed or not;
//   - a Node's address: only inside allowed;
//   - inside the Pod networks, or inside allowed: used;
//   - the Pod networks unknown: used when a Pod of ns, else refused.
func (g *EndpointGuard) Check(ns string, e EndpointRef, allowed []netip.Prefix) EndpointRefusal {
	a := e.Addr
	if !a.IsValid() || a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return RefusedNotUnicast
	}
	if e.Pod && e.PodNamespace != "" && e.PodNamespace != ns {
		return RefusedOtherNamespace
	}
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	if k, ok := g.Addrs[a]; ok {
		if k != KindNode || !in(allowed) {
			return k.refusal()
		}
	}
	for _, r := range g.Ranges {
		if r.contains(a) {
			return r.Kind.refusal()
		}
	}
	switch {
	case in(allowed):
		return ""
	case len(g.PodCIDRs) > 0:
		if in(g.PodCIDRs) {
			return ""
		}
	case e.Pod:
		return ""
	}
	return RefusedOutsidePods
}
