// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// Event reasons xlb records on Services.
const (
	// ReasonAllocated: the Service got its addresses.
	ReasonAllocated = "IPAllocated"
	// ReasonReleased: addresses the Service no longer has went back to their pool.
	ReasonReleased = "IPReleased"
	// ReasonAllocationFailed: an address the Service needs could not be allocated; the message
	// says why (the same text as the Allocated condition's).
	ReasonAllocationFailed = "AllocationFailed"
	// ReasonSharedEndpoints: the Service sends to Pod ports other Services send to, whose
	// replies only the gateway that saw the connection's first packet can always translate.
	ReasonSharedEndpoints = "SharedEndpoints"
)

// mutate re-reads Service svc from the apiserver, applies change to it and writes it back with
// write, retrying on conflicts; only while leading. change returns false when there is nothing
// to write; wrote says whether something was written.
func (c *Controller) mutate(ctx context.Context, svc *corev1.Service, what string,
	change func(*corev1.Service) bool, write func(context.Context, *corev1.Service) error) (wrote bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wrote = false
		if !c.Leading() {
			return errNotLeading // the lease was lost: the new leader writes
		}
		cur, err := c.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != svc.UID {
			return nil // deleted and recreated: the new one gets its own sync
		}
		cur = cur.DeepCopy()
		if !change(cur) {
			return nil
		}
		if err := write(ctx, cur); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("service %s/%s: %s: %w", svc.Namespace, svc.Name, what, err)
	}
	return wrote, nil
}

func (c *Controller) update(ctx context.Context, s *corev1.Service) error {
	_, err := c.client.CoreV1().Services(s.Namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: "xlb"})
	return err
}

func (c *Controller) updateStatus(ctx context.Context, s *corev1.Service) error {
	_, err := c.client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{FieldManager: "xlb"})
	return err
}

// addFinalizer puts Finalizer on svc, so that its deletion waits for xlb to let its address go.
func (c *Controller) addFinalizer(ctx context.Context, svc *corev1.Service) error {
	if slices.Contains(svc.Finalizers, Finalizer) {
		return nil
	}
	_, err := c.mutate(ctx, svc, "adding finalizer", func(s *corev1.Service) bool {
		if slices.Contains(s.Finalizers, Finalizer) || s.DeletionTimestamp != nil {
			return false
		}
		s.Finalizers = append(s.Finalizers, Finalizer)
		return true
	}, c.update)
	return err
}

// removeFinalizer takes Finalizer off svc (being deleted, or no longer ours), after its model
// and allocation are gone.
func (c *Controller) removeFinalizer(ctx context.Context, svc *corev1.Service) error {
	if !slices.Contains(svc.Finalizers, Finalizer) {
		return nil
	}
	var addrs []netip.Addr
	wrote, err := c.mutate(ctx, svc, "removing finalizer", func(s *corev1.Service) bool {
		addrs = statusAddrs(s)
		i := slices.Index(s.Finalizers, Finalizer)
		if i < 0 {
			return false
		}
		s.Finalizers = slices.Delete(s.Finalizers, i, i+1)
		return true
	}, c.update)
	if wrote && len(addrs) > 0 {
		c.event(svc, corev1.EventTypeNormal, ReasonReleased, "released %s", joinAddrs(addrs))
	}
	return err
}

// letGo clears what xlb wrote on a Service that is no longer ours (its type changed away from
// LoadBalancer): the ingress entries of our pools, our conditions, then the finalizer.
func (c *Controller) letGo(ctx context.Context, svc *corev1.Service) error {
	_, err := c.mutate(ctx, svc, "clearing status", func(s *corev1.Service) bool {
		changed := false
		in := s.Status.LoadBalancer.Ingress[:0:0]
		for _, e := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(e.IP); err == nil {
				if _, ours := c.poolOf(a.Unmap()); ours {
					changed = true
					continue
				}
			}
			in = append(in, e)
		}
		s.Status.LoadBalancer.Ingress = in
		for _, t := range []string{ConditionAllocated, ConditionDSR} {
			if apierrors.RemoveStatusCondition(&s.Status.Conditions, t) {
				changed = true
			}
		}
		return changed
	}, c.updateStatus)
	if err != nil {
		return err
	}
	return c.removeFinalizer(ctx, svc)
}

// writeStatus makes svc's ingress list addrs (in order, with the configured ipMode) and sets
// the Allocated condition to cond, writing only when something differs.
func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, addrs []netip.Addr, cond metav1.Condition) error {
	want := c.ingress(addrs)
	if ingressEqual(svc.Status.LoadBalancer.Ingress, want) && conditionHolds(svc.Status.Conditions, cond) {
		return nil
	}
	var before []netip.Addr
	wrote, err := c.mutate(ctx, svc, "writing status", func(s *corev1.Service) bool {
		before = statusAddrs(s)
		if ingressEqual(s.Status.LoadBalancer.Ingress, want) && conditionHolds(s.Status.Conditions, cond) {
			return false
		}
		s.Status.LoadBalancer.Ingress = want
		cond.ObservedGeneration = s.Generation
		apierrors.SetStatusCondition(&s.Status.Conditions, cond)
		return true
	}, c.updateStatus)
	if err != nil || !wrote {
		return err
	}
	var added, removed []netip.Addr
	for _, a := range addrs {
		if !slices.Contains(before, a) {
			added = append(added, a)
		}
	}
	for _, a := range before {
		if !slices.Contains(addrs, a) {
			removed = append(removed, a)
		}
	}
	if len(added) > 0 {
		c.event(svc, corev1.EventTypeNormal, ReasonAllocated, "assigned %s", c.describe(added))
	}
	if len(removed) > 0 {
		c.event(svc, corev1.EventTypeNormal, ReasonReleased, "released %s", joinAddrs(removed))
	}
	return nil
}

// ingress returns the ingress entries for addrs.
func (c *Controller) ingress(addrs []netip.Addr) []corev1.LoadBalancerIngress {
	out := make([]corev1.LoadBalancerIngress, 0, len(addrs))
	for _, a := range addrs {
		mode := c.opts.IPMode
		out = append(out, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &mode})
	}
	return out
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && (x.IPMode == nil) == (y.IPMode == nil) &&
			(x.IPMode == nil || *x.IPMode == *y.IPMode) && len(x.Ports) == 0 && len(y.Ports) == 0
	})
}

// conditionHolds reports whether conds has cond with the same status, reason and message.
func conditionHolds(conds []metav1.Condition, cond metav1.Condition) bool {
	have := apierrors.FindStatusCondition(conds, cond.Type)
	return have != nil && have.Status == cond.Status && have.Reason == cond.Reason && have.Message == cond.Message
}

// describe names addrs with their pools: "198.18.100.1 (pool edge)".
func (c *Controller) describe(addrs []netip.Addr) string {
	parts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := c.poolOf(a); ok {
			parts = append(parts, fmt.Sprintf("%s (pool %s)", a, p.Name))
		} else {
			parts = append(parts, a.String())
		}
	}
	return strings.Join(parts, ", ")
}

func joinAddrs(addrs []netip.Addr) string {
	parts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ", ")
}

// event records an Event on svc.
func (c *Controller) event(svc *corev1.Service, typ, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(svc, typ, reason, format, args...)
	}
}

// report records svc's problems as Events: each reason once, until its message changes (a
// count changing during a rollout re-reports that reason only).
func (c *Controller) report(svc *corev1.Service, problems []Problem) {
	key := svc.Namespace + "/" + svc.Name
	now := map[string]Problem{}
	for _, p := range problems {
		if q, ok := now[p.Reason]; ok {
			p.Message = q.Message + "; " + p.Message
		}
		now[p.Reason] = p
	}
	c.mu.Lock()
	var gone []string
	for topic := range c.reported[key] {
		if r, ok := strings.CutPrefix(topic, "problem:"); ok {
			if _, still := now[r]; !still {
				gone = append(gone, topic)
			}
		}
	}
	c.mu.Unlock()
	for _, topic := range gone {
		c.noteReported(key, topic, "")
	}
	for _, p := range problems {
		p = now[p.Reason]
		if !c.noteReported(key, "problem:"+p.Reason, p.Message) {
			continue
		}
		typ := corev1.EventTypeWarning
		if p.Type == corev1.EventTypeNormal {
			typ = corev1.EventTypeNormal
		}
		c.event(svc, typ, p.Reason, "%s", p.Message)
	}
}
