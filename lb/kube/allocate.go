package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlb-dev/xlb/lb/ipam"
)

// allocate gives svc its addresses (keeping those it has when they are still right for it),
// writes them into its status with the Allocated condition, and returns the addresses to serve.
// When allocation fails the Service keeps serving the addresses it had that nobody else holds
// (a serving VIP is never pulled for a configuration mistake), and its condition and a Warning
// Event say why the rest failed.
func (c *Controller) allocate(ctx context.Context, svc *corev1.Service, req AddressRequest) ([]netip.Addr, error) {
	key := svc.Namespace + "/" + svc.Name
	current := statusAddrs(svc)
	c.mu.Lock()
	alloc := c.alloc
	if alloc == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("service %s: %w", key, errNotLeading)
	}
	// What the allocator already gave it counts as held: the informer's copy of the Service may
	// not show the status written a moment ago yet, and the Service must not move meanwhile.
	held := alloc.Addrs(key)
	for _, a := range current {
		if !slices.Contains(held, a) {
			held = append(held, a)
		}
	}
	var addrs, keep, orphaned []netip.Addr
	aerr := req.Err
	if aerr == nil {
		addrs, aerr = alloc.Assign(ipamRequest(req), held)
	}
	if aerr != nil {
		// What the allocator holds for it: its previous allocation, or the addresses of its
		// status nobody else holds.
		keep = alloc.Addrs(key)
	} else {
		orphaned = alloc.Orphaned(key)
	}
	if aerr != nil {
		c.pending[key] = true
	} else {
		delete(c.pending, key)
	}
	c.mu.Unlock()

	if aerr == nil && len(orphaned) > 0 {
		aerr = &ipam.Error{Service: key, Reason: "AddressOrphaned", Detail: fmt.Sprintf(
			"%s is no longer in an address pool that admits this Service (the pool was removed, shrunk or "+
				"restricted); it keeps being served and is given to nobody else until the Service asks for "+
				"another address (annotation %s or %s) or is deleted", joinAddrs(orphaned), AnnotationLoadBalancerIPs, AnnotationAddressPool)}
		keep = addrs
	}

	if aerr != nil {
		reason := "AllocationFailed"
		var ie *ipam.Error
		if errors.As(aerr, &ie) {
			reason = string(ie.Reason)
		}
		msg := aerr.Error()
		if len(keep) > 0 {
			msg += fmt.Sprintf("; still serving %s meanwhile", joinAddrs(keep))
		}
		cond := metav1.Condition{Type: ConditionAllocated, Status: metav1.ConditionFalse, Reason: conditionReason(reason), Message: msg}
		c.reportOnce(svc, "alloc", msg, func() { c.event(svc, corev1.EventTypeWarning, ReasonAllocationFailed, "%s", msg) })
		if err := c.writeStatus(ctx, svc, keep, cond); err != nil {
			return keep, err
		}
		return keep, nil
	}
	c.reportOnce(svc, "alloc", "", nil)
	cond := metav1.Condition{Type: ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Allocated",
		Message: "allocated " + c.describe(addrs)}
	if err := c.writeStatus(ctx, svc, addrs, cond); err != nil {
		return addrs, err
	}
	return addrs, nil
}

// conditionReason makes s a valid condition reason (CamelCase letters, digits and _,.:).
func conditionReason(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == ',' || r == ':' || r == '.' {
			out = append(out, r)
		}
	}
	if len(out) == 0 || !(out[0] >= 'a' && out[0] <= 'z' || out[0] >= 'A' && out[0] <= 'Z') {
		return "AllocationFailed"
	}
	return string(out)
}

// reportOnce runs emit when the message stored under svc's topic changes to msg (and msg is not
// empty), so a failure is reported once per distinct cause, not at every retry.
func (c *Controller) reportOnce(svc *corev1.Service, topic, msg string, emit func()) {
	key := svc.Namespace + "/" + svc.Name + "\x00" + topic
	c.mu.Lock()
	same := c.reported[key] == msg
	if msg == "" {
		delete(c.reported, key)
	} else {
		c.reported[key] = msg
	}
	c.mu.Unlock()
	if !same && msg != "" && emit != nil {
		emit()
	}
}

// prime returns an allocator rebuilt from the Services' status: every Service of ours, oldest
// first, gets back the addresses it holds. This is the allocator's only state; nothing else is
// stored.
func (c *Controller) prime() (*ipam.Allocator, error) {
	alloc, err := newAllocator(c.opts.Pools)
	if err != nil {
		return nil, err
	}
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("kube: listing services: %w", err)
	}
	var ours []*corev1.Service
	for _, s := range svcs {
		if Ours(s, c.opts.Class, c.opts.DefaultClass) && s.DeletionTimestamp == nil && len(statusAddrs(s)) > 0 {
			ours = append(ours, s)
		}
	}
	sort.Slice(ours, func(i, j int) bool {
		a, b := ours[i], ours[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	for _, s := range ours {
		key := s.Namespace + "/" + s.Name
		req, _ := IPRequest(s)
		if req.Err != nil {
			req = AddressRequest{Service: key, Namespace: s.Namespace, Labels: s.Labels}
		}
		// Only what the status holds: a Service missing an address gets it at its own sync,
		// after every older Service has its own back.
		cur := statusAddrs(s)
		r := ipamRequest(req)
		r.Families = familiesOf(cur)
		r.RequireAll = false
		if _, err := alloc.Assign(r, cur); err != nil {
			c.log.Warn("service holds addresses it cannot keep", "service", key, "addresses", joinAddrs(cur), "err", err)
		}
	}
	return alloc, nil
}

// ipamRequest converts the Service's address request to the allocator's.
func ipamRequest(r AddressRequest) ipam.Request {
	out := ipam.Request{Service: r.Service, Namespace: r.Namespace, Labels: r.Labels, RequireAll: r.RequireAll,
		Addresses: r.Addresses, Pool: r.Pool, SharingKey: r.SharingKey}
	for _, f := range r.Families {
		switch f {
		case corev1.IPv4Protocol:
			out.Families = append(out.Families, ipam.IPv4)
		case corev1.IPv6Protocol:
			out.Families = append(out.Families, ipam.IPv6)
		}
	}
	for _, p := range r.Ports {
		out.Ports = append(out.Ports, ipam.Port{Protocol: p.Protocol, Port: p.Port})
	}
	return out
}

// familiesOf returns the families of addrs, in order, each once.
func familiesOf(addrs []netip.Addr) []ipam.Family {
	var out []ipam.Family
	for _, a := range addrs {
		f := ipam.IPv4
		if a.Is6() {
			f = ipam.IPv6
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}
