// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// report is what the gateway's last reconcile did, for its GatewayStatus object.
type report struct {
	// at is when the reconcile ended; zero before the first.
	at time.Time
	// services is how many services it balanced.
	services int
	// err is its error, if any.
	err error
	// announced and withdrawn are the VIPs announced over BGP and those balanced but not
	// announced, with the reason (withdrawn is empty without BGP).
	announced, withdrawn []v1alpha1.VIPStatus
}

// vipReport sorts desired's VIP addresses into announced and withdrawn ones, as vipRoutes
// decides (c nil: no BGP, nothing announced or withdrawn).
func vipReport(desired *lb.Desired, c *minHealthy) (announced, withdrawn []v1alpha1.VIPStatus) {
	if c == nil {
		return nil, nil
	}
	best := map[netip.Addr]int{}
	services := map[netip.Addr][]string{}
	for f, p := range desired.Frontends {
		a := f.Addr.Unmap()
		best[a] = max(best[a], p.Serving)
		if !slices.Contains(services[a], p.Service) {
			services[a] = append(services[a], p.Service)
		}
	}
	for a, n := range best {
		slices.Sort(services[a])
		v := v1alpha1.VIPStatus{Address: a.String(), Services: services[a]}
		if n >= c.n {
			announced = append(announced, v)
			continue
		}
		v.Reason = fmt.Sprintf("%d backends take new flows on its best frontend, fewer than bgp.minHealthyBackends (%d)", n, c.n)
		withdrawn = append(withdrawn, v)
	}
	byAddr := func(x, y v1alpha1.VIPStatus) int {
		return netip.MustParseAddr(x.Address).Compare(netip.MustParseAddr(y.Address))
	}
	slices.SortFunc(announced, byAddr)
	slices.SortFunc(withdrawn, byAddr)
	return announced, withdrawn
}

// minHealthy is bgp.minHealthyBackends, when the gateway speaks BGP.
type minHealthy struct{ n int }

// statusSnapshot is the gateway's report for its GatewayStatus object (kube.StatusReporter).
func (g *Gateway) statusSnapshot() v1alpha1.GatewayStatusStatus {
	g.mu.Lock()
	cfg, rep, problems := g.cfg, g.report, slices.Clone(g.peerProblems)
	g.mu.Unlock()
	st := v1alpha1.GatewayStatusStatus{
		Version:   g.opts.Version,
		Announced: rep.announced,
		Withdrawn: rep.withdrawn,
		Problems:  problems,
		Site:      g.siteStatus(),
		Datapath: v1alpha1.DatapathStatus{
			Kind:       string(cfg.Datapath.Kind),
			Forwarding: string(cfg.Datapath.Forwarding.Mode),
			Healthy:    !rep.at.IsZero() && rep.err == nil,
		},
	}
	if st.Datapath.Forwarding == "" {
		st.Datapath.Forwarding = string(datapath.ReturnPath)
	}
	if st.Datapath.Kind == "" {
		st.Datapath.Kind = string(config.DatapathXDP)
	}
	for _, i := range cfg.Interfaces {
		st.Datapath.Interfaces = append(st.Datapath.Interfaces, i.Name)
	}
	switch {
	case rep.at.IsZero():
		st.Datapath.Message = "no reconcile yet"
	case rep.err != nil:
		st.Datapath.Message = rep.err.Error()
	}
	if !rep.at.IsZero() {
		st.LastReconcile = &v1alpha1.ReconcileStatus{Time: metav1.NewTime(rep.at), Services: int32(rep.services)}
		if rep.err != nil {
			st.LastReconcile.Error = rep.err.Error()
		}
	}
	if g.kube != nil {
		st.Leader = g.kube.ctrl.Leading()
	}
	if g.speaker != nil {
		up := 0
		for _, p := range bgpStatusOf(g.speaker).Peers {
			s := v1alpha1.BGPSessionStatus{Peer: p.Address, ASN: int64(p.ASN), State: p.State, BFD: p.BFD,
				Advertised: int32(min(p.PrefixesSent, 1<<31-1)), LastError: p.LastError}
			if p.Since != "" {
				if t, err := time.Parse(time.RFC3339, p.Since); err == nil {
					s.Since = &metav1.Time{Time: t}
				}
			}
			if p.State == "established" {
				up++
			}
			st.Sessions = append(st.Sessions, s)
		}
		st.SessionsUp = fmt.Sprintf("%d/%d", up, len(st.Sessions))
	}
	return st
}
