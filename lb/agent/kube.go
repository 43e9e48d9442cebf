// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube"
)

// withdrawTimeout bounds how long a stopping agent tries to withdraw the Node's annotation.
const withdrawTimeout = 10 * time.Second

// applyLoadBalancers applies the direct server return pairs of this node's endpoints of the
// gateways' LoadBalancer Services (kube.AgentOptions.LoadBalancers, after apply in the same
// pass), with the interfaces toward the node's Pods, and once a pass applied them all,
// publishes the capability on the Node (kube.SetNodeDSR). Its error has the pass retried.
func (a *agent) applyLoadBalancers(models []lb.Service) error {
	if !a.nodeRead {
		// The Pod CIDRs: every Pod of the node, client of a hairpin or not, is behind them.
		if n, err := a.opts.Client.CoreV1().Nodes().Get(a.ctx, a.opts.Node, metav1.GetOptions{}); err != nil {
			if err.Error() != a.nodeErr {
				a.nodeErr = err.Error()
				a.log.Warn("reading this node's Pod CIDRs (the interfaces toward Pods are found from the endpoints alone meanwhile)", "err", err)
			}
		} else {
			a.nodeRead = true
			a.podCIDRs = podCIDRs(n.Spec.PodCIDRs)
		}
	}
	pairs := lb.DSRServices(models, a.isLocal)
	targets := sortPrefixes(slices.Concat(a.clusterLocal, localTargets(models, a.isLocal), a.podCIDRs))
	if err := a.dsr.apply(pairs, targets); err != nil {
		return err
	}
	if a.published {
		return nil
	}
	n, err := kube.SetNodeDSR(a.ctx, a.opts.Client, a.opts.Node, true)
	if err != nil {
		return err
	}
	a.published = true
	a.podCIDRs, a.nodeRead = podCIDRs(n.Spec.PodCIDRs), true
	a.log.Info("direct server return published on the node", "annotation", kube.AnnotationDSR+"="+kube.DSRCarrierVersion, "pairs", len(pairs))
	return nil
}

// withdrawDSR removes the Node's AnnotationDSR if it is there (the gateways stop carrying new
// flows to the node's endpoints), saying why; a failure is logged.
func (a *agent) withdrawDSR(ctx context.Context, why string) {
	n, err := a.opts.Client.CoreV1().Nodes().Get(ctx, a.opts.Node, metav1.GetOptions{})
	if err != nil {
		a.log.Warn("could not read the node to withdraw its direct server return annotation", "annotation", kube.AnnotationDSR, "err", err)
		return
	}
	if _, ok := n.Annotations[kube.AnnotationDSR]; !ok {
		return
	}
	if _, err := kube.SetNodeDSR(ctx, a.opts.Client, a.opts.Node, false); err != nil {
		a.log.Warn("could not withdraw the node's direct server return annotation", "annotation", kube.AnnotationDSR, "err", err)
		return
	}
	a.published = false
	a.log.Info(why+": withdrew the node's annotation", "annotation", kube.AnnotationDSR)
}

// podCIDRs parses a Node's spec.podCIDRs, skipping what does not parse.
func podCIDRs(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}
