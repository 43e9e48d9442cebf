// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// A Service of our class gets an address from the pool in its status (with ipMode), our
// finalizer, a True condition and an Event; its model forwards to the slice's endpoints.
func TestVIPAllocatedAndWritten(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{IPMode: corev1.LoadBalancerIPModeProxy})
	e.create(e.service("web"))
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
		e.slice("web", "web-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.50.1", "n1"), ready("198.18.50.2", "n2")),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.ingress("web", 1)
	if got[0] != addr("198.18.100.0") {
		t.Errorf("ingress %v, want the pool's first address 198.18.100.0", got)
	}
	s := e.get("web")
	if m := s.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != corev1.LoadBalancerIPModeProxy {
		t.Errorf("ipMode %v, want Proxy", m)
	}
	if !slices.Contains(s.Finalizers, Finalizer) {
		t.Errorf("finalizers %v lack %s", s.Finalizers, Finalizer)
	}
	if cond := e.condition("web"); cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "198.18.100.0 (pool edge)") {
		t.Errorf("condition %+v, want True naming 198.18.100.0 (pool edge)", cond)
	}
	t.Log(e.waitEvent("web", "Normal IPAllocated: assigned 198.18.100.0 (pool edge)"))
	e.eventually(5*time.Second, "the model serves both endpoints", func() bool {
		m, ok := c.model(e.ns, "web")
		return ok && len(m.VIPs) == 1 && m.VIPs[0] == got[0] && len(m.Backends) == 2 && m.Ports[0].Port == 80
	})
	m, _ := c.model(e.ns, "web")
	if tp := backendPort(m, 0); tp != 8080 {
		t.Errorf("backend port %d, want 8080 (from the slice)", tp)
	}
	// Nothing else was written: no NodePort advice for a Service that allocates none.
	for _, ev := range e.events("web") {
		if strings.Contains(ev, "NodePort") {
			t.Errorf("unexpected event %q", ev)
		}
	}
}

// backendPort returns the target port backend i of m uses for its first port.
func backendPort(m lb.Service, i int) uint16 {
	b := m.Backends[i]
	if p, ok := b.TargetPorts[m.Ports[0].Name]; ok {
		return p
	}
	if m.Ports[0].TargetPort != 0 {
		return m.Ports[0].TargetPort
	}
	return m.Ports[0].Port
}

// Services of another class, and class-less ones unless xlb is the default, are never written.
func TestOtherClassesUntouched(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	other := "example.com/other-lb"
	e.create(e.service("other", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &other }))
	e.create(e.service("noclass", func(s *corev1.Service) { s.Spec.LoadBalancerClass = nil }))
	e.create(e.service("ours"))
	e.ingress("ours", 1) // the controller is working
	time.Sleep(500 * time.Millisecond)
	for _, name := range []string{"other", "noclass"} {
		s := e.get(name)
		if len(s.Status.LoadBalancer.Ingress) != 0 || len(s.Finalizers) != 0 || len(s.Status.Conditions) != 0 {
			t.Errorf("service %s of another class was written: status %+v finalizers %v", name, s.Status, s.Finalizers)
		}
		if ev := e.events(name); len(ev) != 0 {
			t.Errorf("service %s of another class got events %v", name, ev)
		}
		if _, ok := c.model(e.ns, name); ok {
			t.Errorf("service %s of another class is in the model", name)
		}
	}
	c.stop()
	// As the cluster's default implementation, the class-less one is ours too.
	e.controller("gw-1", Options{DefaultClass: true})
	e.ingress("noclass", 1)
	if s := e.get("other"); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("service of another class got %v", s.Status.LoadBalancer.Ingress)
	}
}

// A requested address is honoured; a second Service asking for it gets a Warning Event and a
// False condition naming the holder, and serves nothing.
func TestRequestedAddressAndConflict(t *testing.T) {
	e := newEnv(t)
	e.controller("gw-1", Options{})
	want := func(a string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationLoadBalancerIPs: a} }
	}
	e.create(e.service("first", want("198.18.100.2")))
	if got := e.ingress("first", 1); got[0] != addr("198.18.100.2") {
		t.Fatalf("first got %v, want 198.18.100.2", got)
	}
	e.create(e.service("second", want("198.18.100.2")))
	ev := e.waitEvent("second", "Warning AllocationFailed")
	t.Log(ev)
	if !strings.Contains(ev, "198.18.100.2") || !strings.Contains(ev, e.ns+"/first") {
		t.Errorf("event %q does not name the address and its holder", ev)
	}
	cond := e.condition("second")
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "AddressInUse" {
		t.Errorf("condition %+v, want False AddressInUse", cond)
	}
	if in := e.get("second").Status.LoadBalancer.Ingress; len(in) != 0 {
		t.Errorf("second got ingress %v", in)
	}
	// Outside every pool: refused with the pools named.
	e.create(e.service("third", want("198.18.99.1")))
	t.Log(e.waitEvent("third", "is in no address pool"))
	// The deprecated spec.loadBalancerIP works too.
	e.create(e.service("legacy", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.18.100.3" }))
	if got := e.ingress("legacy", 1); got[0] != addr("198.18.100.3") {
		t.Errorf("legacy got %v, want 198.18.100.3", got)
	}
}

// Services with the same sharing key share an address when their ports differ; a clash is
// refused with the port named.
func TestSharing(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	share := func(key string, port int32, proto corev1.Protocol) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnotationAllowSharedIP: key}
			s.Spec.Ports[0].Port, s.Spec.Ports[0].Protocol = port, proto
		}
	}
	e.create(e.service("dns-tcp", share("dns", 53, corev1.ProtocolTCP)))
	a := e.ingress("dns-tcp", 1)
	e.create(e.service("dns-udp", share("dns", 53, corev1.ProtocolUDP)))
	b := e.ingress("dns-udp", 1)
	if a[0] != b[0] {
		t.Errorf("dns-tcp %v and dns-udp %v do not share", a, b)
	}
	e.create(e.service("dns-clash", func(s *corev1.Service) {
		share("dns", 53, corev1.ProtocolUDP)(s)
		s.Annotations[AnnotationLoadBalancerIPs] = a[0].String()
	}))
	t.Log(e.waitEvent("dns-clash", "53/UDP"))
	// Both sharers are in the model with the one VIP.
	e.eventually(5*time.Second, "both sharers modelled", func() bool {
		x, ok1 := c.model(e.ns, "dns-tcp")
		y, ok2 := c.model(e.ns, "dns-udp")
		return ok1 && ok2 && x.VIPs[0] == y.VIPs[0]
	})
}

// RequireDualStack gets one address per family; PreferDualStack with no IPv6 pool gets IPv4.
func TestDualStack(t *testing.T) {
	e := newEnv(t)
	e.controller("gw-1", Options{})
	req := corev1.IPFamilyPolicyRequireDualStack
	e.create(e.service("dual", func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &req
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}))
	got := e.ingress("dual", 2)
	if !got[0].Is6() || !got[1].Is4() {
		t.Errorf("ingress %v, want IPv6 then IPv4 (ipFamilies order)", got)
	}

	e2 := newEnv(t)
	e2.controller("gw-1", Options{Pools: []Pool{pool(t, "v4only", "198.18.101.0/30")}})
	pref := corev1.IPFamilyPolicyPreferDualStack
	e2.create(e2.service("pref", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &pref }))
	if got := e2.ingress("pref", 1); !got[0].Is4() {
		t.Errorf("PreferDualStack got %v, want one IPv4 address", got)
	}
	e2.create(e2.service("req", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &req }))
	t.Log(e2.waitEvent("req", "Warning AllocationFailed"))
}

// An exhausted pool leaves the Service pending with a reason; freeing an address serves it.
func TestPoolExhaustionThenFreed(t *testing.T) {
	e := newEnv(t)
	e.controller("gw-1", Options{Pools: []Pool{pool(t, "tiny", "198.18.102.1-198.18.102.2")}})
	e.create(e.service("a"))
	e.ingress("a", 1)
	e.create(e.service("b"))
	e.ingress("b", 1)
	e.create(e.service("c"))
	ev := e.waitEvent("c", "Warning AllocationFailed")
	t.Log(ev)
	if !strings.Contains(ev, "tiny") {
		t.Errorf("event %q does not name the pool", ev)
	}
	if cond := e.condition("c"); cond == nil || cond.Reason != "PoolExhausted" {
		t.Errorf("condition %+v, want PoolExhausted", cond)
	}
	freed := e.ingress("a", 1)[0]
	if err := e.admin.CoreV1().Services(e.ns).Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := e.eventually(10*time.Second, "c gets the freed address", func() bool {
		got := statusAddrs(e.get("c"))
		return len(got) == 1 && got[0] == freed
	})
	t.Logf("pending service got the freed address %v %v after the delete", freed, took.Round(time.Millisecond))
	if cond := e.condition("c"); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("condition %+v, want True", cond)
	}
}

// Deleting a Service waits for xlb's finalizer: the model drops it first, then the Service goes
// and its address is free again.
func TestDeleteReleasesAfterFinalizer(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	e.create(e.service("gone"))
	a := e.ingress("gone", 1)[0]
	e.eventually(5*time.Second, "modelled", func() bool { _, ok := c.model(e.ns, "gone"); return ok })
	if err := e.admin.CoreV1().Services(e.ns).Delete(e.ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the Service is gone (finalizer removed)", func() bool {
		_, err := e.admin.CoreV1().Services(e.ns).Get(e.ctx, "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, ok := c.model(e.ns, "gone"); ok {
		t.Error("deleted service still in the model")
	}
	e.create(e.service("next"))
	if got := e.ingress("next", 1); got[0] != a {
		t.Errorf("next got %v, want the released %v", got, a)
	}
}

// A restarted controller rebuilds its allocations from status: every Service keeps its
// address, even when a newer Service would have come first in the pool.
func TestRestartKeepsAddresses(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	want := map[string]netip.Addr{}
	for _, n := range []string{"s1", "s2", "s3"} {
		e.create(e.service(n))
		want[n] = e.ingress(n, 1)[0]
	}
	c.stop()
	// While it is down, s1 is deleted and a new Service comes: it must take none of theirs.
	if err := e.admin.CoreV1().Services(e.ns).Delete(e.ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.create(e.service("s4"))
	e.controller("gw-1b", Options{})
	got4 := e.ingress("s4", 1)[0]
	for _, n := range []string{"s2", "s3"} {
		if got := statusAddrs(e.get(n)); len(got) != 1 || got[0] != want[n] {
			t.Errorf("%s has %v after the restart, want %v", n, got, want[n])
		}
	}
	// s1 was deleted while no controller ran: its finalizer held it, and its address stays
	// held until it is gone, so s4 did not get it either.
	if got4 == want["s1"] {
		t.Errorf("s4 got %v, s1's address, before s1 was gone", got4)
	}
	e.eventually(10*time.Second, "s1 gone once the new controller removed its finalizer", func() bool {
		_, err := e.admin.CoreV1().Services(e.ns).Get(e.ctx, "s1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// Two controllers: one leads and writes; both model the Services; when the leader stops, the
// other takes over within the lease and allocates for new Services.
func TestLeaderHandover(t *testing.T) {
	e := newEnv(t)
	a := e.controller("gw-a", Options{})
	e.eventually(10*time.Second, "gw-a leads", a.Leading)
	b := e.controller("gw-b", Options{})
	e.create(e.service("one"))
	vip := e.ingress("one", 1)[0]
	e.eventually(5*time.Second, "both gateways model the service", func() bool {
		x, ok1 := a.model(e.ns, "one")
		y, ok2 := b.model(e.ns, "one")
		return ok1 && ok2 && x.VIPs[0] == vip && y.VIPs[0] == vip
	})
	if b.Leading() {
		t.Fatal("two leaders")
	}
	start := time.Now()
	a.stop()
	took := e.eventually(10*time.Second, "gw-b leads", b.Leading)
	t.Logf("leadership moved %v after the leader stopped (lease 4s; released on clean stop)", took.Round(time.Millisecond))
	e.create(e.service("two"))
	e.ingress("two", 1)
	t.Logf("a new Service was allocated %v after the old leader stopped", time.Since(start).Round(time.Millisecond))
	if m, ok := b.model(e.ns, "one"); !ok || m.VIPs[0] != vip {
		t.Errorf("the follower-turned-leader lost service one: %+v", m)
	}
}

// Endpoints going ready → terminating → gone: the model follows each change, and the time it
// takes is logged. It is not asserted: other packages' apiservers share the CPUs, so a wall-clock
// bound would measure the machine; make bench measures the latency (bench/ctlplane).
func TestEndpointLifecycleLatency(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	e.create(e.service("app"))
	e.ingress("app", 1)
	sl := e.slice("app", "app-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.51.1", "n1"), ready("198.18.51.2", "n2"))
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "two active backends", func() bool {
		m, ok := c.model(e.ns, "app")
		return ok && slices.Equal(backendStates(m), []string{"198.18.51.1=active", "198.18.51.2=active"})
	})
	step := func(what string, change func(*discoveryv1.EndpointSlice), want []string) time.Duration {
		t.Helper()
		cur, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Get(e.ctx, "app-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		drain(c.changed)
		start := time.Now()
		if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(5 * time.Second)
		for {
			if m, _ := c.model(e.ns, "app"); slices.Equal(backendStates(m), want) {
				took := time.Since(start)
				t.Logf("%s: model followed in %v", what, took.Round(100*time.Microsecond))
				return took
			}
			select {
			case <-c.changed:
			case <-time.After(5 * time.Millisecond):
			case <-deadline:
				m, _ := c.model(e.ns, "app")
				t.Fatalf("%s: model backends %v, want %v", what, backendStates(m), want)
			}
		}
	}
	var worst time.Duration
	for _, took := range []time.Duration{
		step("endpoint 2 terminating", func(s *discoveryv1.EndpointSlice) {
			f, tr := false, true
			s.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: &f, Serving: &tr, Terminating: &tr}
		}, []string{"198.18.51.1=active", "198.18.51.2=draining"}),
		step("endpoint 2 gone", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints = s.Endpoints[:1]
		}, []string{"198.18.51.1=active"}),
		step("endpoint 3 ready", func(s *discoveryv1.EndpointSlice) {
			tr := true
			n := "n3"
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.51.3"}, NodeName: &n,
				Conditions: discoveryv1.EndpointConditions{Ready: &tr, Serving: &tr}})
		}, []string{"198.18.51.1=active", "198.18.51.3=active"}),
	} {
		worst = max(worst, took)
	}
	t.Logf("worst EndpointSlice-to-model latency %v", worst.Round(100*time.Microsecond))
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// A Service with 10,000 endpoints over 100 slices is modelled whole.
func TestTenThousandEndpoints(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	e.create(e.service("big"))
	e.ingress("big", 1)
	start := time.Now()
	for i := range 100 {
		var eps []endpoint
		for j := range 100 {
			eps = append(eps, ready(fmt.Sprintf("198.19.%d.%d", i, j+1), fmt.Sprintf("n%d", j%10)))
		}
		if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
			e.slice("big", fmt.Sprintf("big-%d", i), discoveryv1.AddressTypeIPv4, 8080, eps...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Since(start)
	took := e.eventually(20*time.Second, "10,000 backends modelled", func() bool {
		m, ok := c.model(e.ns, "big")
		return ok && len(m.Backends) == 10000
	})
	t.Logf("100 slices × 100 endpoints created in %v; model complete %v later", created.Round(time.Millisecond), took.Round(time.Millisecond))
	m, _ := c.model(e.ns, "big")
	plan, errs := lb.Plan([]lb.Service{m}, lb.PlanOptions{TableSize: 65537})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for f, p := range plan.Frontends {
		if p.Serving != 10000 {
			t.Errorf("frontend %v serves %d backends, want 10000", f, p.Serving)
		}
	}
}

// A Service whose type changes away from LoadBalancer loses our ingress, condition and finalizer.
func TestTypeChangedAway(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	e.create(e.service("flip"))
	e.ingress("flip", 1)
	s := e.get("flip")
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.LoadBalancerClass = nil
	s.Spec.AllocateLoadBalancerNodePorts = nil
	if _, err := e.admin.CoreV1().Services(e.ns).Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "ingress, condition and finalizer removed", func() bool {
		s := e.get("flip")
		return len(s.Status.LoadBalancer.Ingress) == 0 && len(s.Finalizers) == 0 && e.condition("flip") == nil
	})
	if _, ok := c.model(e.ns, "flip"); ok {
		t.Error("still modelled")
	}
}

// Problems with a Service are Events; the rest of it works: SCTP ports, NodePorts advice,
// excluded nodes.
func TestProblemsAndExclusions(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	yes := true
	e.create(e.service("mixed", func(s *corev1.Service) {
		s.Spec.AllocateLoadBalancerNodePorts = &yes
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sctp", Port: 9999, Protocol: corev1.ProtocolSCTP})
	}))
	e.ingress("mixed", 1)
	t.Log(e.waitEvent("mixed", "Warning "))
	t.Log(e.waitEvent("mixed", "allocateLoadBalancerNodePorts"))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-excluded", Labels: map[string]string{LabelExcludeFromLB: ""}}}
	if _, err := e.admin.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.CoreV1().Nodes().Delete(t.Context(), node.Name, metav1.DeleteOptions{}) })
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
		e.slice("mixed", "mixed-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.52.1", node.Name), ready("198.18.52.2", "elsewhere")),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "the excluded node's endpoint takes no new flows", func() bool {
		m, ok := c.model(e.ns, "mixed")
		if !ok || len(m.Ports) != 1 {
			return false
		}
		for _, b := range m.Backends {
			if b.Addr == addr("198.18.52.1") && b.State == lb.Active {
				return false
			}
		}
		return slices.Contains(backendStates(m), "198.18.52.2=active")
	})
}

// externalTrafficPolicy: Local: endpoints on nodes whose health check fails take no new flows.
func TestLocalTrafficNodeHealth(t *testing.T) {
	e := newEnv(t)
	h := &fakeHealth{bad: map[string]bool{}}
	c := e.controller("gw-1", Options{NodeHealth: h})
	e.create(e.service("local", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	e.ingress("local", 1)
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
		e.slice("local", "local-1", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.53.1", "n1"), ready("198.18.53.2", "n2")),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(5*time.Second, "both active", func() bool {
		m, _ := c.model(e.ns, "local")
		return slices.Equal(backendStates(m), []string{"198.18.53.1=active", "198.18.53.2=active"})
	})
	e.eventually(5*time.Second, "the prober is told the service's health check node port", func() bool {
		return h.port(types.NamespacedName{Namespace: e.ns, Name: "local"}) == uint16(e.get("local").Spec.HealthCheckNodePort)
	})
	h.set("n2", true)
	c.NodeHealthChanged()
	e.eventually(5*time.Second, "n2's endpoint draining (no new flows, established ones stay)", func() bool {
		m, _ := c.model(e.ns, "local")
		return slices.Equal(backendStates(m), []string{"198.18.53.1=active", "198.18.53.2=draining"})
	})
	h.set("n2", false)
	c.NodeHealthChanged()
	e.eventually(5*time.Second, "n2's endpoint active again", func() bool {
		m, _ := c.model(e.ns, "local")
		return slices.Equal(backendStates(m), []string{"198.18.53.1=active", "198.18.53.2=active"})
	})
}

// PodRoutes follows the Nodes' podCIDRs and InternalIPs; a CIDR two nodes claim is left out.
func TestPodRoutes(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	mk := func(name, ip4, ip6 string, cidrs ...string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-" + name},
			Spec: corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip4},
				{Type: corev1.NodeInternalIP, Address: ip6}, {Type: corev1.NodeHostName, Address: name}}}}
		created, err := e.admin.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = n.Status
		if _, err := e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.CoreV1().Nodes().Delete(t.Context(), n.Name, metav1.DeleteOptions{}) })
	}
	mk("a", "198.18.60.2", "2001:db8:60::2", "198.18.64.0/24", "2001:db8:64::/64")
	mk("b", "198.18.60.3", "2001:db8:60::3", "198.18.65.0/24")
	mk("c", "198.18.60.4", "2001:db8:60::4", "198.18.65.0/24") // claims b's CIDR too
	var got []string
	e.eventually(5*time.Second, "pod routes of nodes a (both families); b and c's shared CIDR left out", func() bool {
		got = got[:0]
		for _, r := range c.PodRoutes() {
			if strings.HasPrefix(r.Node, e.ns) {
				got = append(got, fmt.Sprintf("%v via %v", r.Prefix, r.Via))
			}
		}
		return slices.Equal(got, []string{"198.18.64.0/24 via 198.18.60.2", "2001:db8:64::/64 via 2001:db8:60::2"})
	})
}

// A pool's BGP attributes reach the model of the Services holding its addresses (the announcer
// merges them with the speaker's).
func TestPoolRouteAttributes(t *testing.T) {
	e := newEnv(t)
	p := pool(t, "edge", "198.18.103.0/30")
	med := uint32(7)
	p.Route = lb.RouteAttributes{Communities: []uint32{65000<<16 | 300}, LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 3, Local2: 1}}, MED: &med}
	c := e.controller("gw-1", Options{Pools: []Pool{p}})
	e.create(e.service("web"))
	e.ingress("web", 1)
	e.eventually(5*time.Second, "the model carries the pool's attributes", func() bool {
		m, ok := c.model(e.ns, "web")
		return ok && slices.Equal(m.Route.Communities, p.Route.Communities) && len(m.Route.LargeCommunities) == 1 &&
			m.Route.MED != nil && *m.Route.MED == 7
	})
}

// Pools changed under a Service (SIGHUP): its address, now in no pool, keeps serving and is
// given to nobody else; the Service gets a Warning and a False condition saying why.
func TestPoolChangedUnderService(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{Pools: []Pool{pool(t, "old", "198.18.104.0/30")}})
	e.create(e.service("web"))
	vip := e.ingress("web", 1)[0]
	if err := c.SetPools([]Pool{pool(t, "new", "198.18.105.0/30")}); err != nil {
		t.Fatal(err)
	}
	t.Log(e.waitEvent("web", "Warning AllocationFailed"))
	e.eventually(5*time.Second, "condition False, AddressOrphaned", func() bool {
		cond := e.condition("web")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "AddressOrphaned" &&
			strings.Contains(cond.Message, vip.String())
	})
	if got := statusAddrs(e.get("web")); len(got) != 1 || got[0] != vip {
		t.Errorf("status %v, want the old %v kept", got, vip)
	}
	if m, ok := c.model(e.ns, "web"); !ok || m.VIPs[0] != vip {
		t.Errorf("model %+v: the VIP stopped being served", m)
	}
	// A new Service gets an address of the new pool, not the orphan.
	e.create(e.service("next"))
	if got := e.ingress("next", 1); got[0] != addr("198.18.105.0") {
		t.Errorf("next got %v, want 198.18.105.0", got)
	}
	// Invalid pools are refused and change nothing.
	if err := c.SetPools([]Pool{pool(t, "a", "198.18.106.0/30"), pool(t, "b", "198.18.106.2/31")}); err == nil {
		t.Error("overlapping pools accepted")
	}
}

// TestSharedEndpointsEvent: two Services sending to the same Pod ports each get a Warning
// SharedEndpoints naming the other (the one created first too, when the second appears); one on
// another service port is told about the Maglev re-derivation instead.
func TestSharedEndpointsEvent(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	pods := []endpoint{ready("198.18.54.1", "n1"), ready("198.18.54.2", "n1")}
	mk := func(name string, port int32, eps ...endpoint) {
		e.create(e.service(name, func(s *corev1.Service) { s.Spec.Ports[0].Port = port }))
		e.ingress(name, 1)
		if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
			e.slice(name, name+"-1", discoveryv1.AddressTypeIPv4, 8080, eps...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("sa", 80, pods...)
	e.eventually(5*time.Second, "sa modelled with 2 backends", func() bool {
		m, ok := c.model(e.ns, "sa")
		return ok && len(m.Backends) == 2
	})
	if evs := e.events("sa"); slices.ContainsFunc(evs, func(s string) bool { return strings.Contains(s, ReasonSharedEndpoints) }) {
		t.Errorf("sa alone got a %s event: %v", ReasonSharedEndpoints, evs)
	}
	mk("sb", 80, pods...)
	sameA := "Warning " + ReasonSharedEndpoints + ": shares Pod ports with " + e.ns + "/sa on the same service port"
	sameB := "Warning " + ReasonSharedEndpoints + ": shares Pod ports with " + e.ns + "/sb on the same service port"
	t.Log(e.waitEvent("sb", sameA))
	t.Log(e.waitEvent("sa", sameB))
	// sc, on port 81, shares one Pod with both: it hears about the re-derivation, and sa (told
	// again, since its sharers changed) about both kinds.
	mk("sc", 81, pods[1])
	t.Log(e.waitEvent("sc", "Warning "+ReasonSharedEndpoints+": shares Pod ports with "+e.ns+"/sa, "+e.ns+"/sb on other service ports"))
	t.Log(e.waitEvent("sa", sameB+" (a reply that returns through a gateway that did not see its connection's first packet usually cannot be translated: the client waits for a retransmission) and with "+e.ns+"/sc on other service ports"))
}
