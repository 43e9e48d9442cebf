// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// clusterIPService is a ClusterIP Service with port http 80 → 8080 and the given cluster IPs.
func clusterIPService(name string, ips ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if len(ips) > 0 {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
	}
	return s
}

// connectPlan is PlanConnect of models, failing the test on errors and conflicts.
func connectPlan(t *testing.T, models ...lb.ConnectService) lb.ConnectPlan {
	t.Helper()
	p, conflicts, errs := lb.PlanConnect(models)
	if len(errs) > 0 || len(conflicts) > 0 {
		t.Fatalf("PlanConnect: %v, conflicts %v", errs, conflicts)
	}
	return p
}

// labPolicy is the address policy of the lab's cluster: its service CIDRs, and external IPs
// allowed in 198.18.99.0/24.
var labPolicy = AddressPolicy{
	ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.96.0/24"), netip.MustParsePrefix("2001:db8:96::/112")},
	ExternalIPs:  []netip.Prefix{netip.MustParsePrefix("198.18.99.0/24")},
}

func TestClusterIPModel(t *testing.T) {
	e := &env{ns: "ns"}
	v4 := e.slice("web", "web-v4", discoveryv1.AddressTypeIPv4, 8080,
		ready("198.18.1.10", "n1"), ready("198.18.1.11", "n2"),
		endpoint{addr: "198.18.1.12", node: "n1", serving: true, terminating: true})
	v6 := e.slice("web", "web-v6", discoveryv1.AddressTypeIPv6, 8080, ready("2001:db8:1::10", "n2"))
	front := func(a string) datapath.Frontend {
		return datapath.Frontend{Addr: netip.MustParseAddr(a), Port: 80, Proto: datapath.TCP}
	}
	eps := func(s ...string) datapath.ConnectFrontend {
		out := []netip.AddrPort{}
		for _, x := range s {
			out = append(out, netip.MustParseAddrPort(x))
		}
		return datapath.ConnectFrontend{Endpoints: out}
	}

	t.Run("dual-stack, cluster policy", func(t *testing.T) {
		m, problems, ok := ClusterIPModel(clusterIPService("web", "198.18.96.1", "2001:db8:96::1"), []*discoveryv1.EndpointSlice{v4, v6}, "n1", labPolicy)
		if !ok || len(problems) != 0 {
			t.Fatalf("ok %v, problems %v", ok, problems)
		}
		p := connectPlan(t, m)
		want := lb.ConnectPlan{
			front("198.18.96.1"):    eps("198.18.1.10:8080", "198.18.1.11:8080"),
			front("2001:db8:96::1"): eps("[2001:db8:1::10]:8080"),
		}
		if fmt.Sprint(p) != fmt.Sprint(want) {
			t.Errorf("plan %v, want %v", p, want)
		}
	})
	local := corev1.ServiceInternalTrafficPolicyLocal
	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		svc := clusterIPService("web", "198.18.96.1", "2001:db8:96::1")
		svc.Spec.InternalTrafficPolicy = &local
		m, _, _ := ClusterIPModel(svc, []*discoveryv1.EndpointSlice{v4, v6}, "n1", labPolicy)
		p := connectPlan(t, m)
		// n1's ready endpoint only; no IPv6 endpoint on n1: that frontend refuses.
		want := lb.ConnectPlan{front("198.18.96.1"): eps("198.18.1.10:8080"), front("2001:db8:96::1"): eps()}
		if fmt.Sprint(p) != fmt.Sprint(want) {
			t.Errorf("plan %v, want %v", p, want)
		}
		// Without its ready endpoint, n1's serving-terminating one takes over.
		noReady := e.slice("web", "web-v4", discoveryv1.AddressTypeIPv4, 8080,
			ready("198.18.1.11", "n2"), endpoint{addr: "198.18.1.12", node: "n1", serving: true, terminating: true})
		m, _, _ = ClusterIPModel(svc, []*discoveryv1.EndpointSlice{noReady}, "n1", labPolicy)
		if p := connectPlan(t, m); !p[front("198.18.96.1")].Equal(eps("198.18.1.12:8080")) {
			t.Errorf("without a local ready endpoint: %v, want the local serving-terminating one", p)
		}
		// A ready endpoint without a nodeName is on no node: not local, so it neither serves
		// nor stops the local serving-terminating one from taking over.
		nodeless := e.slice("web", "web-v4", discoveryv1.AddressTypeIPv4, 8080,
			ready("198.18.1.13", ""), endpoint{addr: "198.18.1.12", node: "n1", serving: true, terminating: true})
		m, _, _ = ClusterIPModel(svc, []*discoveryv1.EndpointSlice{nodeless}, "n1", labPolicy)
		if p := connectPlan(t, m); !p[front("198.18.96.1")].Equal(eps("198.18.1.12:8080")) {
			t.Errorf("with a nodeless ready endpoint: %v, want the local serving-terminating one", p)
		}
	})
	t.Run("external and load-balancer addresses", func(t *testing.T) {
		svc := clusterIPService("web", "198.18.96.1")
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ExternalIPs = []string{"198.18.99.7"}
		proxy := corev1.LoadBalancerIPModeProxy
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "198.18.100.1"}, {IP: "198.18.100.2", IPMode: &proxy}, {Hostname: "lb.example.org"}, {IP: "198.18.96.1"}}
		m, problems, ok := ClusterIPModel(svc, []*discoveryv1.EndpointSlice{v4}, "n1", labPolicy)
		want := []netip.Addr{netip.MustParseAddr("198.18.96.1"), netip.MustParseAddr("198.18.99.7"), netip.MustParseAddr("198.18.100.1")}
		if !ok || len(problems) != 0 || !slices.Equal(m.VIPs, want) {
			t.Errorf("VIPs %v (ok %v, problems %v), want %v: ipMode Proxy and hostnames left out, no duplicate", m.VIPs, ok, problems, want)
		}
	})
	t.Run("address policy", func(t *testing.T) {
		svc := clusterIPService("web", "198.18.96.1", "2001:db8:96::1")
		created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		svc.CreationTimestamp = metav1.NewTime(created)
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		// Inside a service CIDR (another Service's cluster IP, of either family), outside the
		// allowed prefixes, allowed, and its own cluster IP (nothing to say).
		svc.Spec.ExternalIPs = []string{"198.18.96.10", "2001:db8:96::a", "198.19.5.5", "198.18.99.8", "198.18.96.1"}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.96.11"}, {IP: "198.18.100.1"}}
		m, problems, ok := ClusterIPModel(svc, []*discoveryv1.EndpointSlice{v4}, "n1", labPolicy)
		a := netip.MustParseAddr
		if want := []netip.Addr{a("198.18.96.1"), a("2001:db8:96::1"), a("198.18.99.8"), a("198.18.100.1")}; !ok || !slices.Equal(m.VIPs, want) {
			t.Errorf("VIPs %v (ok %v), want %v", m.VIPs, ok, want)
		}
		if want := []netip.Addr{a("198.18.96.1"), a("2001:db8:96::1")}; !slices.Equal(m.Owned, want) || !m.Created.Equal(created) {
			t.Errorf("owned %v created %v, want the cluster IPs %v and %v", m.Owned, m.Created, want, created)
		}
		got := map[string]string{}
		for _, p := range problems {
			got[p.Reason] = p.Message
		}
		for reason, want := range map[string][]string{
			ReasonExternalIPRefused: {"3 spec.externalIPs not balanced", "198.18.96.10 is inside the service CIDR 198.18.96.0/24",
				"2001:db8:96::a is inside the service CIDR 2001:db8:96::/112", "198.19.5.5 is outside the allowed prefixes", "--external-ip-allow 198.18.99.0/24"},
			ReasonLoadBalancerIPRefused: {"1 status.loadBalancer.ingress addresses not balanced: 198.18.96.11 is inside the service CIDR 198.18.96.0/24"},
		} {
			for _, w := range want {
				if !strings.Contains(got[reason], w) {
					t.Errorf("%s: %q lacks %q", reason, got[reason], w)
				}
			}
		}
		if len(problems) != 2 {
			t.Errorf("problems %v, want the two refusals", problems)
		}
		// The default policy: no external IP at all; load-balancer addresses outside the
		// service CIDRs still are.
		m, problems, _ = ClusterIPModel(svc, []*discoveryv1.EndpointSlice{v4}, "n1", AddressPolicy{})
		if want := []netip.Addr{a("198.18.96.1"), a("2001:db8:96::1"), a("198.18.96.11"), a("198.18.100.1")}; !slices.Equal(m.VIPs, want) {
			t.Errorf("without a policy: VIPs %v, want %v", m.VIPs, want)
		}
		if len(problems) != 1 || problems[0].Reason != ReasonExternalIPRefused || !strings.Contains(problems[0].Message, "4 spec.externalIPs not balanced") ||
			!strings.Contains(problems[0].Message, "--external-ip-allow is empty") {
			t.Errorf("without a policy: problems %v", problems)
		}
	})
	t.Run("nothing to balance", func(t *testing.T) {
		headless := clusterIPService("h", corev1.ClusterIPNone)
		ext := clusterIPService("x", "198.18.96.9") // a cluster IP it cannot have: the type decides
		ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.org"
		sctp := clusterIPService("s", "198.18.96.10")
		sctp.Spec.Ports[0].Protocol = corev1.ProtocolSCTP
		for _, s := range []*corev1.Service{headless, ext, sctp, clusterIPService("pending"), nil} {
			if _, _, ok := ClusterIPModel(s, []*discoveryv1.EndpointSlice{v4}, "n1", labPolicy); ok {
				t.Errorf("%v: ok, want nothing to balance", s)
			}
		}
	})
	t.Run("bad input", func(t *testing.T) {
		svc := clusterIPService("web", "not-an-ip", "198.18.96.1")
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP})
		m, problems, ok := ClusterIPModel(svc, []*discoveryv1.EndpointSlice{v4}, "n1", labPolicy)
		var reasons []string
		for _, p := range problems {
			reasons = append(reasons, p.Reason)
		}
		if !ok || !slices.Equal(m.VIPs, []netip.Addr{netip.MustParseAddr("198.18.96.1")}) ||
			!slices.Contains(reasons, "InvalidClusterIP") || !slices.Contains(reasons, "UnsupportedProtocol") {
			t.Errorf("ok %v, VIPs %v, problems %v: want the valid address kept and both problems", ok, m.VIPs, reasons)
		}
	})
}

// TestAgent runs the agent against the real apiserver: Services and EndpointSlices of every
// namespace become plans, after every change, and nothing else does.
func TestAgent(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var plan lb.ConnectPlan
	applies := 0
	a, err := NewAgent(e.admin, AgentOptions{
		Node: "n1",
		Log:  slog.New(slog.NewTextHandler(testWriter{t, "agent"}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Apply: func(pass ClusterIPs) error {
			mu.Lock()
			defer mu.Unlock()
			plan = pass.Plan
			applies++
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	// endpointsOf returns the plan's endpoints of Service name's port 80 at its cluster IP.
	endpointsOf := func(name string) ([]string, bool) {
		s := e.get(name)
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			return nil, false
		}
		mu.Lock()
		defer mu.Unlock()
		cf, ok := plan[datapath.Frontend{Addr: netip.MustParseAddr(s.Spec.ClusterIP), Port: 80, Proto: datapath.TCP}]
		var out []string
		for _, ep := range cf.Endpoints {
			out = append(out, ep.String())
		}
		return out, ok
	}
	waitEndpoints := func(name string, want ...string) {
		t.Helper()
		var got []string
		var ok bool
		took := e.eventually(10*time.Second, fmt.Sprintf("service %s's plan %v (has %v, present %v)", name, want, &got, &ok), func() bool {
			got, ok = endpointsOf(name)
			return ok && strings.Join(got, " ") == strings.Join(want, " ")
		})
		t.Logf("service %s: %v in %v", name, want, took)
	}
	plain := func(s *corev1.Service) {
		s.Spec.Type, s.Spec.LoadBalancerClass, s.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeClusterIP, nil, nil
	}

	e.create(e.service("web", plain))
	waitEndpoints("web") // no endpoints yet: the frontend exists and refuses
	esc := e.admin.DiscoveryV1().EndpointSlices(e.ns)
	sl, err := esc.Create(e.ctx, e.slice("web", "web-1", discoveryv1.AddressTypeIPv4, 8080,
		ready("198.18.1.10", "n1"), ready("198.18.1.11", "n2")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints("web", "198.18.1.10:8080", "198.18.1.11:8080")
	sl.Endpoints = sl.Endpoints[1:]
	if _, err := esc.Update(e.ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints("web", "198.18.1.11:8080")

	// A LoadBalancer Service's cluster IP is balanced too; a headless one is not.
	e.create(e.service("lb"))
	if _, err := esc.Create(e.ctx, e.slice("lb", "lb-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.1.20", "n2")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints("lb", "198.18.1.20:8080")

	e.create(e.service("headless", plain, func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }))
	if _, err := esc.Create(e.ctx, e.slice("headless", "headless-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.1.30", "n1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	webFront := datapath.Frontend{Addr: netip.MustParseAddr(e.get("web").Spec.ClusterIP), Port: 80, Proto: datapath.TCP}
	lbFront := datapath.Frontend{Addr: netip.MustParseAddr(e.get("lb").Spec.ClusterIP), Port: 80, Proto: datapath.TCP}
	if err := e.admin.CoreV1().Services(e.ns).Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the deleted service's frontend leaves the plan, the other stays", func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, web := plan[webFront]
		_, other := plan[lbFront]
		return !web && other
	})
	mu.Lock()
	defer mu.Unlock()
	for f, cf := range plan {
		for _, ep := range cf.Endpoints {
			if ep.Addr() == netip.MustParseAddr("198.18.1.30") {
				t.Errorf("the headless service's endpoint is in the plan (frontend %s)", f)
			}
		}
	}
	if applies < 5 {
		t.Errorf("%d applies, want one per change at least (5)", applies)
	}
}

// BenchmarkClusterIPRebuild10k: what the agent does after every burst of changes with 10,000
// Services of 3 ready endpoints: model each from its slice and plan the whole node (the
// reconcile pass comes on top: lb/reconcile's BenchmarkConnectApply10k, xdp/socklb's
// BenchmarkApply10k).
func BenchmarkClusterIPRebuild10k(b *testing.B) {
	const n = 10000
	e := &env{ns: "ns"}
	svcs := make([]*corev1.Service, n)
	slices := make([][]*discoveryv1.EndpointSlice, n)
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		svcs[i] = clusterIPService(name, fmt.Sprintf("198.18.%d.%d", 96+i>>8, i&255))
		slices[i] = []*discoveryv1.EndpointSlice{e.slice(name, name+"-1", discoveryv1.AddressTypeIPv4, 8080,
			ready(fmt.Sprintf("198.19.%d.%d", i>>8, i&255), "n1"), ready(fmt.Sprintf("198.20.%d.%d", i>>8, i&255), "n2"),
			ready(fmt.Sprintf("198.21.%d.%d", i>>8, i&255), "n3"))}
	}
	for b.Loop() {
		models := make([]lb.ConnectService, 0, n)
		for i, svc := range svcs {
			if m, _, ok := ClusterIPModel(svc, slices[i], "n1", labPolicy); ok {
				models = append(models, m)
			}
		}
		p, _, errs := lb.PlanConnect(models)
		if len(errs) > 0 || len(p) != n {
			b.Fatalf("PlanConnect: %d frontends, %v", len(p), errs)
		}
	}
}

// TestLoadBalancerModel: a node agent's view of a LoadBalancer Service for direct server
// return: its status addresses (any ipMode) as VIPs, every endpoint with its node, none without
// an address in its status.
func TestLoadBalancerModel(t *testing.T) {
	e := &env{ns: "ns"}
	sl := e.slice("web", "web-1", discoveryv1.AddressTypeIPv4, 8080,
		ready("198.18.1.10", "n1"), endpoint{addr: "198.18.1.11", node: "n2", terminating: true})
	svc := clusterIPService("web", "198.18.96.1")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	if _, ok := LoadBalancerModel(svc, []*discoveryv1.EndpointSlice{sl}); ok {
		t.Error("a Service without a status address has a model")
	}
	proxy := corev1.LoadBalancerIPModeProxy
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.100.1"}, {IP: "2001:db8:100::1", IPMode: &proxy}, {Hostname: "lb.example.org"}}
	m, ok := LoadBalancerModel(svc, []*discoveryv1.EndpointSlice{sl})
	wantVIPs := []netip.Addr{netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8:100::1")}
	if !ok || !slices.Equal(m.VIPs, wantVIPs) || len(m.Backends) != 2 || m.Backends[0].Node != "n1" || m.Backends[1].Node != "n2" ||
		len(m.Ports) != 1 || m.Ports[0].TargetPort != 8080 {
		t.Errorf("model %+v (ok %v): want VIPs %v and both endpoints with their nodes", m, ok, wantVIPs)
	}
	pairs := lb.DSRServices([]lb.Service{m}, func(b lb.Backend) bool { return b.Node == "n1" })
	want := datapath.DSRService{Frontend: datapath.Frontend{Addr: wantVIPs[0], Port: 80, Proto: datapath.TCP}, Endpoint: netip.MustParseAddrPort("198.18.1.10:8080")}
	if len(pairs) != 1 || !pairs[want] {
		t.Errorf("n1's pairs %v, want only %v", pairs, want)
	}
}
