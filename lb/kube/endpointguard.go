// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlb-dev/xlb/lb"
)

// The controller checks every endpoint against an lb.EndpointGuard built from what the
// cluster's objects say (every Node's addresses and podCIDRs, every Service's cluster IPs,
// external IPs and load-balancer addresses, the pools' ranges) and the site's scope
// (Options.PodCIDRs, Options.Reserved). The guard is rebuilt, at most once per sync, after one
// of them changed; a Service whose endpoints a change may concern is synced again.

// guardChanged marks the guard for a rebuild at the next sync.
func (c *Controller) guardChanged() {
	c.mu.Lock()
	c.guardDirty = true
	c.mu.Unlock()
}

// sameServiceAddrs reports whether the Services a and b (an informer's old and new objects)
// have the same addresses the guard reads.
func sameServiceAddrs(a, b any) bool {
	x, ok1 := a.(*corev1.Service)
	y, ok2 := b.(*corev1.Service)
	return ok1 && ok2 && slices.Equal(x.Spec.ClusterIPs, y.Spec.ClusterIPs) && x.Spec.ClusterIP == y.Spec.ClusterIP &&
		slices.Equal(x.Spec.ExternalIPs, y.Spec.ExternalIPs) && reflect.DeepEqual(x.Status.LoadBalancer.Ingress, y.Status.LoadBalancer.Ingress)
}

// SetEndpointScope replaces the site's Pod networks and reserved prefixes (a reload of
// kubernetes.podCIDRs and reservedAddresses); every Service is synced again when they changed.
func (c *Controller) SetEndpointScope(podCIDRs, reserved []netip.Prefix) {
	c.mu.Lock()
	same := slices.Equal(c.opts.PodCIDRs, podCIDRs) && slices.Equal(c.opts.Reserved, reserved)
	c.opts.PodCIDRs, c.opts.Reserved = slices.Clone(podCIDRs), slices.Clone(reserved)
	c.guardDirty = c.guardDirty || !same
	c.mu.Unlock()
	if !same {
		c.enqueueAll()
	}
}

// endpointGuard returns the guard, rebuilt first if something it reads changed. After a
// rebuild that changed it, the Services a change may concern are queued: those with an
// endpoint at a newly reserved address, and those with refused endpoints (one may be allowed
// now).
func (c *Controller) endpointGuard() *lb.EndpointGuard {
	c.mu.Lock()
	if c.guard != nil && !c.guardDirty {
		g := c.guard
		c.mu.Unlock()
		return g
	}
	c.guardDirty = false
	pools := c.opts.Pools
	g := &lb.EndpointGuard{PodCIDRs: slices.Clone(c.opts.PodCIDRs)}
	for _, p := range c.opts.Reserved {
		g.Ranges = append(g.Ranges, lb.PrefixRange(p, lb.KindReserved))
	}
	c.mu.Unlock()

	for _, p := range pools {
		for _, r := range p.Ranges {
			g.Ranges = append(g.Ranges, lb.AddrRange{First: r.First.Unmap(), Last: r.Last.Unmap(), Kind: lb.KindFrontend})
		}
	}
	if nodes, err := c.nodes.List(labels.Everything()); err == nil {
		for _, n := range nodes {
			for _, a := range n.Status.Addresses {
				if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
					continue
				}
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					g.Reserve(ip, lb.KindNode)
				}
			}
			for _, s := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(s); err == nil && !slices.Contains(g.PodCIDRs, p.Masked()) {
					g.PodCIDRs = append(g.PodCIDRs, p.Masked())
				}
			}
		}
	}
	if svcs, err := c.services.List(labels.Everything()); err == nil {
		for _, s := range svcs {
			for _, ip := range append(slices.Clone(s.Spec.ClusterIPs), s.Spec.ClusterIP) {
				if a, err := netip.ParseAddr(ip); err == nil {
					g.Reserve(a, lb.KindClusterIP)
				}
			}
			for _, ip := range s.Spec.ExternalIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					g.Reserve(a, lb.KindFrontend)
				}
			}
			for _, a := range statusAddrs(s) {
				g.Reserve(a, lb.KindFrontend)
			}
		}
	}

	c.mu.Lock()
	old := c.guard
	c.guard = g
	var requeue []string
	if old != nil && !reflect.DeepEqual(old, g) {
		for key, m := range c.models {
			if slices.ContainsFunc(m.Backends, func(b lb.Backend) bool {
				kind, ok := g.Addrs[b.Addr.Unmap()]
				return ok && old.Addrs[b.Addr.Unmap()] != kind
			}) {
				requeue = append(requeue, key)
			}
		}
		requeue = slices.AppendSeq(requeue, maps.Keys(c.refused))
	}
	c.mu.Unlock()
	for _, k := range requeue {
		c.queue.Add(k)
	}
	return g
}

// setRefused records the endpoints of Service key the guard refused (from its problems); with
// ok false (no address: no model) it has none.
func (c *Controller) setRefused(key string, problems []Problem, ok bool) {
	var r map[lb.EndpointRefusal]int
	if ok {
		for _, p := range problems {
			if p.Reason == ReasonEndpointRefused {
				r = p.Refused
			}
		}
	}
	c.mu.Lock()
	if len(r) == 0 {
		delete(c.refused, key)
	} else {
		c.refused[key] = maps.Clone(r)
	}
	c.mu.Unlock()
}

// RefusedEndpoints returns how many endpoints of the modelled Services the guard refuses, by
// refusal (the metric xlb_kube_endpoints_refused).
func (c *Controller) RefusedEndpoints() map[lb.EndpointRefusal]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[lb.EndpointRefusal]int{}
	for _, m := range c.refused {
		for r, n := range m {
			out[r] += n
		}
	}
	return out
}
