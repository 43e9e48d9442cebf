// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Direct server return in the lab (docs/lab.md, docs/dsr.md): the router has a leg on the
// cluster L2 and is the nodes' default route, as on most sites; each node's agent runs the node
// side of DSR on its eth0. A pod's reply leaves its node with the VIP as source, straight to the
// router: no gateway sees it.

// DSR reports whether the site forwards with direct server return (Options.ReturnPath false).
func (s *Site) DSR() bool { return !s.Opts.ReturnPath }

// Forwarding names the site's forwarding mode as the gateways' config does.
func (s *Site) Forwarding() datapath.Forwarding {
	if s.DSR() {
		return datapath.DSR
	}
	return datapath.ReturnPath
}

// addRouterLeg links the router to the cluster L2 ("cl0" in the router, "r" on the bridge).
// Nothing filters by reverse path (addNS): the router takes the nodes' VIP-sourced replies,
// whose source it routes towards the gateways, as a site's routers must (docs/dsr.md).
func (s *Site) addRouterLeg() error {
	if err := veth(s.Router.NS, "cl0", s.L2, "r"); err != nil {
		return err
	}
	if err := ipc(s.L2, "link set r master br0"); err != nil {
		return err
	}
	r4, r6 := routerClusterAddrs()
	return ipc(s.Router.NS,
		fmt.Sprintf("addr add %s/%d dev cl0", r4, ClusterPrefix4.Bits()),
		fmt.Sprintf("addr add %s/%d dev cl0 nodad", r6, ClusterPrefix6.Bits()))
}

// agentConfigYAML is the config file File mode's agents read: the gateways' (the first one's),
// whose services and backends (with their nodes) say which pairs each node accepts.
func (s *Site) agentConfigYAML(pods []*Pod) string {
	return s.ConfigYAML(s.Gateways[0], pods)
}

// reloadAgents gives File mode's DSR agents the config with pods as backends and waits until
// each node's side of DSR holds exactly its pairs.
func (s *Site) reloadAgents(pods []*Pod) error {
	if !s.DSR() || s.Opts.Mode != File || len(s.Agents) == 0 {
		return nil
	}
	if err := os.WriteFile(s.agentConfigPath(), []byte(s.agentConfigYAML(pods)), 0o644); err != nil {
		return err
	}
	var errs []error
	for _, a := range s.Agents {
		if a.Running() {
			errs = append(errs, a.Reload())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.waitAgentPairs(pods)
}

// AgentPairs returns the {frontend, endpoint} pairs node's side of DSR must hold with the
// agents' config file as it is: those of its backends.
func (s *Site) AgentPairs(node *Node) (map[datapath.DSRService]bool, error) {
	cfg, err := config.Load(s.agentConfigPath())
	if err != nil {
		return nil, err
	}
	return lb.DSRServices(cfg.Services, func(b lb.Backend) bool { return b.Node == node.Name && b.DSR }), nil
}

// waitAgentPairs waits until every running agent's pinned pairs are exactly those of the
// agents' config file.
func (s *Site) waitAgentPairs(pods []*Pod) error {
	for _, a := range s.Agents {
		if !a.Running() {
			continue
		}
		want, err := s.AgentPairs(a.Node)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(reloadTimeout)
		var got map[datapath.DSRService]bool
		for {
			p, err := a.DSR()
			got = map[datapath.DSRService]bool{}
			for _, sv := range p.Services {
				got[sv] = true
			}
			if err == nil && maps.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("lab: node %s: the agent's DSR pairs are %v, want %v (%v; log %s)", a.Node.Name,
					slices.Collect(maps.Keys(got)), slices.Collect(maps.Keys(want)), err, a.LogPath)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	s.logf("node agents: DSR pairs of %d backends applied", len(pods))
	return nil
}
