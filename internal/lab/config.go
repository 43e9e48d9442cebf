// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/xlb-dev/xlb/internal/proxyhealth"
)

// ConfigYAML returns the xlb config the lab gives gateway g: its datapath (Options.Datapaths;
// XDP by default, native) on "up0" and "cl0",
// the gateway's own pin path, the site's seed (the same on every gateway), the metrics server
// on the namespace's 127.0.0.1, and in File mode one service "demo" on the site's VIPs whose
// backends are pods (both of each pod's addresses), health-checked with GET /healthz on
// TargetHTTP; in Kubernetes mode the kubernetes section instead (kubeYAML).
func (s *Site) ConfigYAML(g *Gateway, pods []*Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# xlb lab site %s, gateway %s (generated: %s)\n", s.Prefix, g.Name, time.Now().Format(time.RFC3339))
	fmt.Fprintf(&b, `interfaces:
  - {name: up0, mode: native, role: client}    # the router: clients
  - {name: cl0, mode: native, role: cluster}   # the cluster L2: nodes and pods
datapath:
  kind: %s
  pinPath: %s
  conntrackSize: 65536
  maglevSlots: 1048576   # 64 tables of 16381 slots: every frontend's and those being replaced (old slots are reused after 1 s)
  seed: %d
  forwarding: %s
  clusterPrefixes: [%s]
`, s.datapathKind(g), g.PinPath, s.Opts.Seed, s.Forwarding(), strings.Join(s.clusterPrefixes(), ", "))
	if s.Opts.NewFlowRate != 0 {
		fmt.Fprintf(&b, "  newFlowRate: %d\n", s.Opts.NewFlowRate)
	}
	fmt.Fprintf(&b, `listen: %s
log: {format: text, level: info}
`, g.Listen)
	if s.Opts.Mode == Kubernetes {
		b.WriteString(s.kubeYAML(g))
	} else {
		s.servicesYAML(&b, pods)
	}
	if s.Opts.Routing.BGP() {
		b.WriteString(s.bgpYAML(g))
	}
	return b.String()
}

// datapathKind is gateway g's datapath.kind (Options.Datapaths).
func (s *Site) datapathKind(g *Gateway) string {
	if i := g.Index - 1; i < len(s.Opts.Datapaths) && s.Opts.Datapaths[i] != "" {
		return s.Opts.Datapaths[i]
	}
	return "xdp"
}

// servicesYAML writes File mode's services section.
func (s *Site) servicesYAML(b *strings.Builder, pods []*Pod) {
	hi := s.Opts.HealthInterval
	fmt.Fprintf(b, `services:
  - name: %s
    vips: [%s, "%s"]
    ports:
      - {name: http, port: %d, protocol: TCP, targetPort: %d}
      - {name: who, port: %d, protocol: UDP, targetPort: %d}
      - {name: echo, port: %d, protocol: TCP, targetPort: %d}
      - {name: echo-udp, port: %d, protocol: UDP, targetPort: %d}
    healthCheck: {type: http, path: /healthz, interval: %s, timeout: %s, rise: 1, fall: 2}
`, ServiceName, VIP4, VIP6,
		PortHTTP, TargetHTTP, PortWho, TargetHTTP, PortEcho, TargetEcho, PortEcho, TargetEcho,
		hi, hi/2)
	if len(pods) == 0 {
		b.WriteString("    backends: []\n")
	} else {
		b.WriteString("    backends:\n")
	}
	backends := func() {
		for _, p := range pods {
			fmt.Fprintf(b, "      - {address: %s, node: %s}   # %s\n", p.Addr4, p.Node.Name, p.Name)
			fmt.Fprintf(b, "      - {address: \"%s\", node: %s}\n", p.Addr6, p.Node.Name)
		}
	}
	backends()
	if !s.Opts.SharedServices {
		return
	}
	// Two more services over the same pods' HTTP port: one on the same service port, one on
	// another.
	for _, x := range []struct {
		name       string
		vip4, vip6 netip.Addr
		port       int
	}{{ServiceSame, VIPSame4, VIPSame6, PortHTTP}, {ServiceOther, VIPOther4, VIPOther6, PortOther}} {
		fmt.Fprintf(b, `  - name: %s
    vips: [%s, "%s"]
    ports: [{name: http, port: %d, protocol: TCP, targetPort: %d}]
    healthCheck: {type: http, path: /healthz, interval: %s, timeout: %s, rise: 1, fall: 2}
`, x.name, x.vip4, x.vip6, x.port, TargetHTTP, hi, hi/2)
		if len(pods) == 0 {
			b.WriteString("    backends: []\n")
		} else {
			b.WriteString("    backends:\n")
		}
		backends()
	}
}

// kubeYAML is Kubernetes mode's kubernetes section (the pool is an AddressPool object,
// deploy/examples/addresspools.yaml): the gateway's kubeconfig (the xlb ServiceAccount, the apiserver at ControlAddr4), its own gatewayName,
// short leader election timings and 1 s node probes.
func (s *Site) kubeYAML(g *Gateway) string {
	ipMode := ""
	if s.Opts.ProxyIPMode {
		ipMode = "  ipMode: Proxy\n"
	}
	return fmt.Sprintf(`kubernetes:
  kubeconfig: %s
  gatewayName: %s
  nodeHealthPort: %d
  healthCheckInterval: 1s
  healthCheckTimeout: 500ms
  leaderElection: {leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms}
%s`, g.kubeconfigPath(), g.GatewayName(), proxyhealth.DefaultNodePort, ipMode)
}

// clusterPrefixes are the site's own prefixes, as the gateways' config lists them: the cluster
// L2, every node's Pod CIDRs and the cluster IP ranges. Never a client's source on up0; on cl0,
// the in-cluster clients a gateway balances.
func (s *Site) clusterPrefixes() []string {
	out := []string{ClusterPrefix4.String(), ClusterPrefix6.String(), serviceClusterIPRange4, serviceIPv6Range}
	for n := 1; n <= s.Opts.Nodes; n++ {
		c4, c6 := podCIDRs(n)
		out = append(out, c4.String(), c6.String())
	}
	return out
}
