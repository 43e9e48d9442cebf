// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"net/netip"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/xlb-dev/xlb/lb"
)

// LabelExcludeFromLB marks a node whose endpoints get no traffic from external load balancers.
const LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"

// nodeView answers the model's questions about nodes from the Node cache and the prober.
type nodeView struct{ c *Controller }

func (c *Controller) nodeView() NodeView { return nodeView{c} }

// Excluded reports whether node carries LabelExcludeFromLB. An unknown node is not excluded:
// missing Node objects must not blackhole a Service.
func (v nodeView) Excluded(node string) bool {
	n, err := v.c.nodes.Get(node)
	if err != nil {
		return false
	}
	_, ok := n.Labels[LabelExcludeFromLB]
	return ok
}

// DSR reports whether node's agent serves direct server return (NodeDSR). An unknown node does
// not: carrying to a node that would drop the carrier black-holes the flow.
func (v nodeView) DSR(node string) bool {
	n, err := v.c.nodes.Get(node)
	return err == nil && NodeDSR(n)
}

// LocalHealthy reports whether node passes its kube-proxy health checks for service.
func (v nodeView) LocalHealthy(node string, service types.NamespacedName) bool {
	if node == "" || v.c.opts.NodeHealth == nil {
		return true // an endpoint without a nodeName cannot be checked
	}
	return v.c.opts.NodeHealth.LocalHealthy(node, service)
}

// updateTargets gives the node health prober the current nodes and eTP=Local Services.
func (c *Controller) updateTargets() {
	if c.opts.NodeHealth == nil {
		return
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	var nt []NodeTarget
	for _, n := range nodes {
		if a, ok := InternalIP(n); ok {
			nt = append(nt, NodeTarget{Name: n.Name, Addr: a})
		}
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	var st []ServiceTarget
	for _, s := range svcs {
		t, ok := c.localTarget(s)
		if !ok {
			continue
		}
		t.Nodes = []string{} // none (not nil, which would mean every node)
		sl, err := c.slices.EndpointSlices(s.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name}))
		if err != nil {
			continue
		}
		for _, x := range sl {
			for _, ep := range x.Endpoints {
				if ep.NodeName != nil && *ep.NodeName != "" && !slices.Contains(t.Nodes, *ep.NodeName) {
					t.Nodes = append(t.Nodes, *ep.NodeName)
				}
			}
		}
		slices.Sort(t.Nodes)
		st = append(st, t)
	}
	c.opts.NodeHealth.SetTargets(nt, st)
}

// requestTargets asks targetLoop to rebuild the prober's targets.
func (c *Controller) requestTargets() {
	if c.opts.NodeHealth == nil {
		return
	}
	select {
	case c.targets <- struct{}{}:
	default:
	}
}

// targetLoop rebuilds the prober's targets when asked, until ctx ends: one goroutine, so a burst
// of events costs one rebuild (at 1,000 Local Services on 100 nodes a rebuild takes 0.2 s).
func (c *Controller) targetLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.targets:
			c.updateTargets()
		}
	}
}

// localTarget returns the health check node port target of o when it is a Service of ours with
// externalTrafficPolicy: Local (and not being deleted).
func (c *Controller) localTarget(o any) (ServiceTarget, bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	s, ok := o.(*corev1.Service)
	if !ok || s.DeletionTimestamp != nil || !Ours(s, c.opts.Class, c.opts.DefaultClass) ||
		s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		s.Spec.HealthCheckNodePort <= 0 || s.Spec.HealthCheckNodePort > 65535 {
		return ServiceTarget{}, false
	}
	return ServiceTarget{Service: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, Port: uint16(s.Spec.HealthCheckNodePort)}, true
}

// InternalIP returns node's first InternalIP, IPv4 preferred.
func InternalIP(n *corev1.Node) (netip.Addr, bool) {
	var v6 netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip.Unmap().Is4() {
			return ip.Unmap(), true
		}
		if !v6.IsValid() {
			v6 = ip
		}
	}
	return v6, v6.IsValid()
}

// sameModel reports whether two models are equal.
func sameModel(a, b lb.Service) bool { return reflect.DeepEqual(a, b) }
