// SPDX-License-Identifier: Apache-2.0
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
		return current, fmt.Errorf("service %s: %w", key, errNotLeading)
	}
	// What the allocator already gave it counts as held: the informer's copy of the Service may
	// not show the status written a moment ago yet, and the Service must not move meanwhile.
	before := alloc.Addrs(key)
	held := slices.Clone(before)
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
		c.pending[key] = true
	} else {
		orphaned = alloc.Orphaned(key)
		delete(c.pending, key)
	}
	// An address it let go (it moved pool, asked for another, dropped a family) may be what a
	// pending Service waits for.
	var retry []string
	after := alloc.Addrs(key)
	for _, a := range before {
		if !slices.Contains(after, a) {
			retry = c.pendingKeys(key)
			break
		}
	}
	c.mu.Unlock()
	c.retry(retry)

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
		if len(keep) > 0 && len(orphaned) == 0 {
			msg += fmt.Sprintf("; still serving %s meanwhile", joinAddrs(keep))
		}
		cond := metav1.Condition{Type: ConditionAllocated, Status: metav1.ConditionFalse, Reason: conditionReason(reason), Message: msg}
		// Status first: whoever sees the Event finds the condition already there.
		err := c.writeStatus(ctx, svc, keep, cond)
		c.reportOnce(svc, "alloc", msg, func() { c.event(svc, corev1.EventTypeWarning, ReasonAllocationFailed, "%s", msg) })
		return keep, err
	}
	c.reportOnce(svc, "alloc", "", nil)
	cond := metav1.Condition{Type: ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Allocated",
		Message: "allocated " + c.describe(addrs)}
	return addrs, c.writeStatus(ctx, svc, addrs, cond)
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
	if c.noteReported(svc.Namespace+"/"+svc.Name, topic, msg) && msg != "" && emit != nil {
		emit()
	}
}

// noteReported records msg as Service key's last report on topic ("" forgets it) and says
// whether it differs from the one before.
func (c *Controller) noteReported(key, topic, msg string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.reported[key]
	if m[topic] == msg {
		return false
	}
	if msg == "" {
		delete(m, topic)
		return true
	}
	if m == nil {
		m = map[string]string{}
		c.reported[key] = m
	}
	m[topic] = msg
	return true
}

// prime returns an allocator rebuilt from the Services' status: every Service of ours, oldest
// first, gets back the addresses its status holds, and nothing else (no address it merely asks
// for: that is its own sync's business, after every older Service has its own back). This is
// the allocator's only state; nothing else is stored. The Services are listed from the
// apiserver, not the cache: a new leader's cache may not hold the old leader's last writes yet.
// gen is the pools' generation the allocator holds.
func (c *Controller) prime(ctx context.Context) (alloc *ipam.Allocator, gen uint64, err error) {
	c.mu.Lock()
	pools, gen := c.opts.Pools, c.poolsGen
	c.mu.Unlock()
	alloc, err = newAllocator(pools)
	if err != nil {
		return nil, 0, err
	}
	var svcs []*corev1.Service
	list, err := c.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for i := range list.Items {
			svcs = append(svcs, &list.Items[i])
		}
	} else {
		c.log.Warn("listing services from the apiserver failed; rebuilding allocations from the cache", "err", err)
		if svcs, err = c.services.List(labels.Everything()); err != nil {
			return nil, 0, fmt.Errorf("kube: listing services: %w", err)
		}
	}
	var ours []*corev1.Service
	for _, s := range svcs {
		// Services being deleted keep their addresses until they are gone.
		if Ours(s, c.opts.Class, c.opts.DefaultClass) && len(statusAddrs(s)) > 0 {
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
		cur := statusAddrs(s)
		r := ipamRequest(req)
		// Hold what the status holds: sharing key and ports (to share as before), no requested
		// address or pool (they could take a younger Service's address), the families held.
		r.Service, r.Namespace, r.Labels = key, s.Namespace, s.Labels
		r.Addresses, r.Pool = nil, ""
		r.Families = familiesOf(cur)
		r.RequireAll = false
		if _, err := alloc.Assign(r, cur); err != nil {
			c.log.Warn("service holds addresses it cannot keep", "service", key, "addresses", joinAddrs(cur), "err", err)
		}
	}
	return alloc, gen, nil
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
