// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// ConditionDSR is the type of the status condition xlb keeps on its Services while the site
// forwards with direct server return (datapath.forwarding: dsr): True when every endpoint's
// node serves it, False with the fallback its other endpoints get. It is absent in the
// return-path mode.
const ConditionDSR = "xlb.dev/DirectServerReturn"

// The reasons of ConditionDSR.
const (
	// DSRAllDirect: every endpoint's node serves direct server return.
	DSRAllDirect = "AllEndpointsDirect"
	// DSREndpointsExcluded: some endpoints' nodes do not, and get no new flows
	// (dsrFallback: exclude).
	DSREndpointsExcluded = "EndpointsExcluded"
	// DSRReturnPathFallback: some endpoints' nodes do not, and are served in the return-path
	// mode, their replies translated by the gateways (dsrFallback: returnPath).
	DSRReturnPathFallback = "ReturnPathFallback"
)

// ReasonDSRFallback: a Warning Event saying which nodes' endpoints of the Service have no
// DSR-capable agent and what becomes of them (the message of ConditionDSR); reported again when
// that set of nodes changes.
const ReasonDSRFallback = "DSRFallback"

// DSRStatus returns what a Service whose model is m shows under forwarding f: its ConditionDSR
// (ok false in the return-path mode: it has none), and, when some of its endpoints' nodes
// cannot serve direct server return, the Problem (ReasonDSRFallback) to record as a Warning.
// The messages name nodes, not endpoints or counts (at most a few, then how many more), so
// that they change only when the set of nodes does: a condition is written, and an Event
// recorded, on a change only. ObservedGeneration is left to the writer.
func DSRStatus(f lb.Forwarding, m lb.Service) (cond metav1.Condition, problem *Problem, ok bool) {
	if f.Mode != datapath.DSR {
		return metav1.Condition{}, nil, false
	}
	u := f.Use(m)
	fallback, reason, what := u.Excluded, DSREndpointsExcluded, "excluded (no new flows)"
	if len(u.ReturnPath) > 0 {
		fallback, reason, what = u.ReturnPath, DSRReturnPathFallback, "served through the gateways (their replies must return through a gateway)"
	}
	if len(fallback) == 0 {
		return metav1.Condition{Type: ConditionDSR, Status: metav1.ConditionTrue, Reason: DSRAllDirect,
			Message: "every endpoint's node serves direct server return: replies leave from the Pods' nodes"}, nil, true
	}
	msg := fmt.Sprintf("endpoints on %s have no DSR-capable xlb agent: %s", nodeList(fallback), what)
	cond = metav1.Condition{Type: ConditionDSR, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	return cond, &Problem{Type: corev1.EventTypeWarning, Reason: ReasonDSRFallback,
		Message: msg + "; run xlb agent with --dsr-interface on those nodes (docs/agent.md)"}, true
}

// nodeList names the nodes of bs, sorted, each once: "nodes n3, n4", at most maxExamples of
// them and then how many more; an endpoint without a nodeName counts as "(no nodeName)".
func nodeList(bs []lb.Backend) string {
	var nodes []string
	for _, b := range bs {
		n := b.Node
		if n == "" {
			n = "(no nodeName)"
		}
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	word := "nodes"
	if len(nodes) == 1 {
		word = "node"
	}
	if len(nodes) > maxExamples {
		return fmt.Sprintf("%s %s and %d more", word, strings.Join(nodes[:maxExamples], ", "), len(nodes)-maxExamples)
	}
	return word + " " + strings.Join(nodes, ", ")
}

// writeDSRCondition brings svc's ConditionDSR to cond (nil: removes it), writing through the
// status subresource only when the Service does not already show it (no write amplification:
// the messages change with the set of nodes only). Leader only.
func (c *Controller) writeDSRCondition(ctx context.Context, svc *corev1.Service, cond *metav1.Condition) error {
	if cond == nil {
		if apimeta.FindStatusCondition(svc.Status.Conditions, ConditionDSR) == nil {
			return nil
		}
		_, err := c.mutate(ctx, svc, "removing condition "+ConditionDSR, func(s *corev1.Service) bool {
			return apimeta.RemoveStatusCondition(&s.Status.Conditions, ConditionDSR)
		}, c.updateStatus)
		return err
	}
	if conditionHolds(svc.Status.Conditions, *cond) {
		return nil
	}
	_, err := c.mutate(ctx, svc, "writing condition "+ConditionDSR, func(s *corev1.Service) bool {
		if conditionHolds(s.Status.Conditions, *cond) {
			return false
		}
		want := *cond
		want.ObservedGeneration = s.Generation
		apimeta.SetStatusCondition(&s.Status.Conditions, want)
		return true
	}, c.updateStatus)
	return err
}
