// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"net/netip"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Predictor says which pod a new flow goes to, computed in Go from the config the gateways get
// (lb.Plan's Maglev tables and xdp.FlowHash, as every gateway computes them), with every
// backend healthy. Tests compare it with what the datapath does.
type Predictor struct {
	site *Site
	seed uint32
	plan *lb.Desired
}

// Predictor returns a Predictor for the config with pods as the backends.
func (s *Site) Predictor(pods []*Pod) (*Predictor, error) {
	cfg, err := config.Parse("lab.yaml", []byte(s.ConfigYAML(s.Gateways[0], pods)))
	if err != nil {
		return nil, err
	}
	plan, errs := lb.Plan(cfg.Services, cfg.PlanOptions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("plan: %v", errs)
	}
	return &Predictor{site: s, seed: cfg.Datapath.Seed, plan: plan}, nil
}

// Pod returns the pod that a new flow from client to vip:port over proto ("tcp" or "udp")
// goes to.
func (p *Predictor) Pod(client netip.AddrPort, vip netip.Addr, port uint16, proto string) (*Pod, error) {
	fp := datapath.Frontend{Addr: vip, Port: port, Proto: datapath.TCP}
	num := uint8(6)
	if proto == "udp" {
		fp.Proto, num = datapath.UDP, 17
	}
	plan, ok := p.plan.Frontends[fp]
	if !ok {
		return nil, fmt.Errorf("no frontend %s", fp)
	}
	h := datapath.FlowHash(p.seed, client.Addr(), client.Port(), port, datapath.Protocol(num), plan.Affinity == datapath.AffinityClientIP)
	i := plan.Table[h%uint32(len(plan.Table))]
	if i < 0 {
		return nil, fmt.Errorf("frontend %s: empty slot", fp)
	}
	addr := plan.Backends[i].Key.Addr()
	for _, pod := range p.site.Pods {
		if pod.Addr4 == addr || pod.Addr6 == addr {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("no pod has address %s", addr)
}
