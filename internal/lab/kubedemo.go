// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/internal/kubetest"
)

// demoKube is Demo's Kubernetes part: the control plane and leader, the Services with their
// addresses from status (as kubectl get services shows them), the Nodes and EndpointSlices,
// the BGP sessions and the router's routes to every Service address, and requests from the
// first client to each Service's addresses and ports.
func (s *Site) demoKube(ctx context.Context, w io.Writer, fail func(string, ...any)) {
	k := s.Kube
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+objectsWait)
	defer cancel()
	fmt.Fprintf(w, "\n== The control plane ==\n")
	fmt.Fprintf(w, "  kube-apiserver %s + etcd %s in namespace %s, at %s (ready in %v)\n", kubetest.KubeVersion,
		kubetest.EtcdVersion, k.NS.Name, k.CP.URL(), k.CP.StartupTime().Round(time.Millisecond))
	if l, err := k.Client.CoordinationV1().Leases("xlb-system").Get(ctx, "xlb-controller", metav1.GetOptions{}); err != nil {
		fail("the leader Lease xlb-system/xlb-controller: %v", err)
	} else if h := l.Spec.HolderIdentity; h != nil {
		fmt.Fprintf(w, "  leader (Lease xlb-system/xlb-controller): %s; every gateway balances and announces\n", *h)
	}

	svcs, err := k.ExampleServices(ctx)
	if err != nil {
		fail("list services: %v", err)
		return
	}
	fmt.Fprintf(w, "\n== Services of class xlb.dev/xdp (as kubectl get services -o wide) ==\n")
	WriteServices(w, svcs)
	s.demoNodes(ctx, w, fail)

	var vips []netip.Addr
	for _, svc := range svcs {
		a := ingressAddrs(&svc)
		if len(a) == 0 {
			fail("service %s/%s has no address in its status", svc.Namespace, svc.Name)
		}
		vips = append(vips, a...)
	}
	s.demoRouting(w, fail, vips)
	s.demoObjects(ctx, w, fail, vips)

	c := s.Clients[0]
	fmt.Fprintf(w, "\n== Requests from client %s to every Service (a new connection or socket each) ==\n", c.Name)
	for _, svc := range svcs {
		for _, vip := range ingressAddrs(&svc) {
			for _, p := range svc.Spec.Ports {
				s.demoRequest(ctx, w, fail, c, &svc, vip, p)
			}
		}
	}
	s.demoClusterIPs(w, fail, svcs)
}

// demoClusterIPs shows pods reaching the Services' cluster IPs through their nodes' agents:
// the answering pod sees the asking pod's own address (no NAT anywhere).
func (s *Site) demoClusterIPs(w io.Writer, fail func(string, ...any), svcs []corev1.Service) {
	k := s.Kube
	fmt.Fprintf(w, "\n== Requests from pods to the Services' cluster IPs (xlb agent on every node) ==\n")
	for _, n := range s.Nodes {
		if a := k.Agent(n); a != nil {
			m, err := a.Metrics()
			if err != nil {
				fail("%v", err)
				continue
			}
			fmt.Fprintf(w, "  node %s: xlb agent balances %v cluster IP frontends\n", n.Name, m.Sum("xlb_agent_frontends"))
		}
	}
	var from []*Pod
	for _, n := range s.Nodes {
		if i := slices.IndexFunc(s.Pods, func(p *Pod) bool { return p.Node == n }); i >= 0 {
			from = append(from, s.Pods[i])
		}
	}
	for _, svc := range svcs {
		for _, ip := range svc.Spec.ClusterIPs {
			addr, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			for _, p := range svc.Spec.Ports {
				if p.Protocol != corev1.ProtocolTCP || p.Port != PortHTTP {
					continue
				}
				dst := netip.AddrPortFrom(addr, uint16(p.Port))
				var got []string
				for _, pod := range from {
					a, err := s.podGet(pod, dst)
					if err != nil {
						fail("%s/%s: %v", svc.Namespace, svc.Name, err)
						return
					}
					got = append(got, fmt.Sprintf("%s@%s -> %s@%s", pod.Name, pod.Node.Name, a.Pod, a.Node))
				}
				fmt.Fprintf(w, "  %-18s GET http://%-24s %s\n", svc.Namespace+"/"+svc.Name, dst.String()+"/", strings.Join(got, ", "))
			}
		}
	}
	fmt.Fprintf(w, "  (each answering pod saw the asking pod's own address)\n")
}

// podGet fetches http://dst/ from pod p (ClusterIPGet) and checks that the answering pod saw p's
// own address.
func (s *Site) podGet(p *Pod, dst netip.AddrPort) (Answer, error) {
	body, err := s.Kube.ClusterIPGet(p, dst, "/")
	if err != nil {
		return Answer{}, err
	}
	a, err := ParseAnswer(strings.TrimSpace(body))
	if err != nil {
		return Answer{}, fmt.Errorf("pod %s: GET http://%s/: %w", p.Name, dst, err)
	}
	if want := p.Addr4; dst.Addr().Is6() && a.Client.Addr() != p.Addr6 || dst.Addr().Is4() && a.Client.Addr() != want {
		return a, fmt.Errorf("pod %s: GET http://%s/: pod %s saw client %s, not the asking pod's address", p.Name, dst, a.Pod, a.Client)
	}
	return a, nil
}

// demoRequest sends requests to one port of a Service's address: HTTP or TCP echo, UDP who or
// echo, by the port's target.
func (s *Site) demoRequest(ctx context.Context, w io.Writer, fail func(string, ...any), c *Client, svc *corev1.Service, vip netip.Addr, p corev1.ServicePort) {
	name := svc.Namespace + "/" + svc.Name
	dst := netip.AddrPortFrom(vip, uint16(p.Port))
	target := p.TargetPort.IntValue()
	switch {
	case p.Protocol == corev1.ProtocolTCP && target >= TargetHTTP && target <= TargetHTTP+ExtraHTTPPorts && p.Port == PortHTTP:
		var pods []string
		for range 3 {
			a, local, err := c.Get(ctx, vip)
			if err != nil {
				fail("%s: GET http://%s/: %v", name, dst, err)
				return
			}
			if a.Client != local {
				fail("%s: pod %s saw client %s, want %s", name, a.Pod, a.Client, local)
			}
			pods = append(pods, fmt.Sprintf("%s@%s", a.Pod, a.Node))
		}
		fmt.Fprintf(w, "  %-18s GET http://%-24s -> pods %s (each saw the client's own address)\n", name, dst.String()+"/", strings.Join(pods, ", "))
	case p.Protocol == corev1.ProtocolUDP && target == TargetHTTP && p.Port == PortWho:
		a, err := c.Who(vip)
		if err != nil {
			fail("%s: UDP who %s: %v", name, dst, err)
			return
		}
		fmt.Fprintf(w, "  %-18s UDP %-29s -> pod %s on node %s saw client %s\n", name, dst, a.Pod, a.Node, a.Client)
	case p.Protocol == corev1.ProtocolTCP && target == TargetEcho && p.Port == PortEcho:
		if err := echoTCP(ctx, c, vip); err != nil {
			fail("%s: TCP echo %s: %v", name, dst, err)
			return
		}
		fmt.Fprintf(w, "  %-18s TCP echo %-24s -> echoed\n", name, dst)
	case p.Protocol == corev1.ProtocolUDP && target == TargetEcho && p.Port == PortEcho:
		if err := echoUDP(c, vip); err != nil {
			fail("%s: UDP echo %s: %v", name, dst, err)
			return
		}
		fmt.Fprintf(w, "  %-18s UDP echo %-24s -> echoed\n", name, dst)
	}
}

// demoNodes shows the Nodes, each node's kube-proxy health as xlb probes it, and the
// EndpointSlices.
func (s *Site) demoNodes(ctx context.Context, w io.Writer, fail func(string, ...any)) {
	k := s.Kube
	nodes, err := k.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("list nodes: %v", err)
		return
	}
	fmt.Fprintf(w, "\n== Nodes (the lab registers them; each node namespace serves kube-proxy's health servers) ==\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tSTATUS\tINTERNAL-IP\tPOD-CIDRS\tKUBE-PROXY /healthz :%d\n", 10256)
	for _, n := range nodes.Items {
		var ips []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ips = append(ips, a.Address)
			}
		}
		status := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
		health := "-"
		if len(ips) > 0 && len(s.Gateways) > 0 {
			code, _, err := s.Gateways[0].NS.HTTPGet(netip.AddrPortFrom(netip.MustParseAddr(ips[0]), 10256).String(), "/healthz", httpTimeout)
			if err != nil {
				health = err.Error()
				fail("node %s: kube-proxy /healthz from %s: %v", n.Name, s.Gateways[0].Name, err)
			} else {
				health = strconv.Itoa(code) + " (from " + s.Gateways[0].Name + ")"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", n.Name, status, strings.Join(ips, ","), strings.Join(n.Spec.PodCIDRs, ","), health)
	}
	tw.Flush()
	sl, err := k.Client.DiscoveryV1().EndpointSlices(KubeNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + SliceManager})
	if err != nil {
		fail("list endpointslices: %v", err)
		return
	}
	fmt.Fprintf(w, "\n== EndpointSlices (the lab plays the EndpointSlice controller) ==\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tADDRESSTYPE\tPORTS\tENDPOINTS (ready, on node)\n")
	for _, e := range sl.Items {
		var ports, eps []string
		for _, p := range e.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", deref(p.Port), deref(p.Protocol)))
		}
		for _, ep := range e.Endpoints {
			mark := ""
			if !deref(ep.Conditions.Ready) {
				mark = " (not ready)"
			}
			eps = append(eps, fmt.Sprintf("%s@%s%s", strings.Join(ep.Addresses, ","), deref(ep.NodeName), mark))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Name, e.AddressType, strings.Join(ports, ","), strings.Join(eps, " "))
	}
	tw.Flush()
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// WriteServices writes Services as `kubectl get services -o wide` would, with the
// externalTrafficPolicy and healthCheckNodePort added.
func WriteServices(w io.Writer, svcs []corev1.Service) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAMESPACE\tNAME\tTYPE\tCLUSTER-IP\tEXTERNAL-IP\tPORT(S)\tTRAFFIC-POLICY\tHEALTH-CHECK-NODE-PORT\tSELECTOR\n")
	for _, s := range svcs {
		ext := "<pending>"
		if a := ingressAddrs(&s); len(a) > 0 {
			var parts []string
			for _, x := range a {
				parts = append(parts, x.String())
			}
			ext = strings.Join(parts, ",")
		}
		var ports, sel []string
		for _, p := range s.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		for k, v := range s.Spec.Selector {
			sel = append(sel, k+"="+v)
		}
		slices.Sort(sel)
		hc := "-"
		if s.Spec.HealthCheckNodePort > 0 {
			hc = strconv.Itoa(int(s.Spec.HealthCheckNodePort))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, s.Spec.Type,
			strings.Join(s.Spec.ClusterIPs, ","), ext, strings.Join(ports, ","), s.Spec.ExternalTrafficPolicy, hc, strings.Join(sel, ","))
	}
	tw.Flush()
}
