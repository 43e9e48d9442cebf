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
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestDSRStatus: the condition and the Warning a Service gets in each forwarding mode; the
// messages name the nodes (sorted, each once, a bounded number), not the endpoints.
func TestDSRStatus(t *testing.T) {
	b := func(a, node string, dsr bool) lb.Backend {
		return lb.Backend{Addr: netip.MustParseAddr(a), Node: node, DSR: dsr, Weight: 1}
	}
	svc := lb.Service{Name: "ns/web", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.1")},
		Backends: []lb.Backend{b("198.18.1.1", "n1", true), b("198.18.1.2", "n4", false), b("198.18.1.3", "n3", false),
			b("198.18.1.4", "n3", false), b("2001:db8::1", "n9", false) /* no IPv6 VIP: not counted */}}
	dsr := lb.Forwarding{Mode: datapath.DSR}
	if _, p, ok := DSRStatus(lb.Forwarding{}, svc); ok || p != nil {
		t.Error("the return-path mode has a DSR condition or problem")
	}
	cond, p, ok := DSRStatus(dsr, svc)
	wantMsg := "endpoints on nodes n3, n4 have no DSR-capable xlb agent: excluded (no new flows)"
	if !ok || cond.Type != ConditionDSR || cond.Status != metav1.ConditionFalse || cond.Reason != DSREndpointsExcluded || cond.Message != wantMsg {
		t.Errorf("condition %+v, want False %s %q", cond, DSREndpointsExcluded, wantMsg)
	}
	if p == nil || p.Type != corev1.EventTypeWarning || p.Reason != ReasonDSRFallback || !strings.HasPrefix(p.Message, wantMsg+"; ") {
		t.Errorf("problem %+v", p)
	}
	cond, _, _ = DSRStatus(lb.Forwarding{Mode: datapath.DSR, Fallback: lb.FallbackReturnPath}, svc)
	if cond.Reason != DSRReturnPathFallback || !strings.HasSuffix(cond.Message, "served through the gateways (their replies must return through a gateway)") {
		t.Errorf("returnPath fallback: %+v", cond)
	}
	// More nodes than examples, and an endpoint without a node.
	for i, n := range []string{"n5", "n6", "", "n7"} {
		svc.Backends = append(svc.Backends, b(fmt.Sprintf("198.18.1.%d", 10+i), n, false))
	}
	cond, _, _ = DSRStatus(dsr, svc)
	if want := "endpoints on nodes (no nodeName), n3, n4 and 3 more have"; !strings.HasPrefix(cond.Message, want) {
		t.Errorf("message %q, want it to start %q", cond.Message, want)
	}
	svc.Backends = []lb.Backend{b("198.18.1.1", "n1", true), b("198.18.1.9", "n2", false)}
	if cond, _, _ = DSRStatus(dsr, svc); !strings.HasPrefix(cond.Message, "endpoints on node n2 have") {
		t.Errorf("one node: %q", cond.Message)
	}
	svc.Backends = svc.Backends[:1]
	cond, p, ok = DSRStatus(dsr, svc)
	if !ok || p != nil || cond.Status != metav1.ConditionTrue || cond.Reason != DSRAllDirect {
		t.Errorf("all direct: %+v, %+v", cond, p)
	}
}

// TestDirectServerReturn runs the controller in the DSR forwarding mode against the real
// apiserver: backends are flagged DSR from their Node's annotation (and follow it as agents
// publish and withdraw it), a Service with endpoints on nodes without agent gets the
// DSRFallback Warning and a False condition naming those nodes, True once they all serve; a
// change that keeps the set of nodes writes nothing; two Services on the same Pod ports get no
// SharedEndpoints Warning while those Pods' nodes serve DSR, and do once one does not; a
// controller in the return-path mode removes the condition.
func TestDirectServerReturn(t *testing.T) {
	e := newEnv(t)
	nodeA, nodeB := e.ns+"-a", e.ns+"-b"
	for _, n := range []string{nodeA, nodeB} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n == nodeA {
			node.Annotations = map[string]string{AnnotationDSR: DSRCarrierVersion}
		}
		if _, err := e.admin.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.CoreV1().Nodes().Delete(t.Context(), n, metav1.DeleteOptions{}) })
	}
	annotate := func(node string, on bool) {
		t.Helper()
		v := `null`
		if on {
			v = `"` + DSRCarrierVersion + `"`
		}
		if _, err := e.admin.CoreV1().Nodes().Patch(e.ctx, node, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+AnnotationDSR+`":`+v+`}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dsrCond := func(name string) *metav1.Condition {
		return apimeta.FindStatusCondition(e.get(name).Status.Conditions, ConditionDSR)
	}
	waitCond := func(name string, status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		var got *metav1.Condition
		e.eventually(10*time.Second, fmt.Sprintf("service %s: condition %s %s %s %q (has %v)", name, ConditionDSR, status, reason, msg, &got), func() bool {
			got = dsrCond(name)
			return got != nil && got.Status == status && got.Reason == reason && strings.Contains(got.Message, msg)
		})
	}
	hasEvent := func(name, reason string) bool {
		return slices.ContainsFunc(e.events(name), func(s string) bool { return strings.Contains(s, " "+reason+": ") })
	}

	c := e.controller("gw-1", Options{Forwarding: lb.Forwarding{Mode: datapath.DSR}})
	pods := []endpoint{ready("198.18.55.1", nodeA), ready("198.18.55.2", nodeB)}
	mk := func(name string) *discoveryv1.EndpointSlice {
		e.create(e.service(name))
		e.ingress(name, 1)
		sl, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx,
			e.slice(name, name+"-1", discoveryv1.AddressTypeIPv4, 8080, pods...), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sl
	}
	dsrOf := func(name string) string {
		m, _ := c.model(e.ns, name)
		var out []string
		for _, b := range m.Backends {
			out = append(out, fmt.Sprintf("%s=%v", b.Addr, b.DSR))
		}
		return strings.Join(out, " ")
	}
	waitDSR := func(name, want string) {
		t.Helper()
		e.eventually(10*time.Second, fmt.Sprintf("service %s's backends DSR %s (has %s)", name, want, dsrOf(name)), func() bool { return dsrOf(name) == want })
	}

	sl := mk("web")
	waitDSR("web", "198.18.55.1=true 198.18.55.2=false")
	fallback := "endpoints on node " + nodeB + " have no DSR-capable xlb agent: excluded (no new flows)"
	waitCond("web", metav1.ConditionFalse, DSREndpointsExcluded, fallback)
	t.Log(e.waitEvent("web", "Warning "+ReasonDSRFallback+": "+fallback))

	// nodeB's agent publishes: both direct, the condition True.
	annotate(nodeB, true)
	waitDSR("web", "198.18.55.1=true 198.18.55.2=true")
	waitCond("web", metav1.ConditionTrue, DSRAllDirect, "")

	// A second Service on the same Pod ports: both Pods translate their own replies, so no
	// SharedEndpoints Warning.
	mk("web2")
	waitCond("web2", metav1.ConditionTrue, DSRAllDirect, "")
	// A change that keeps the set of nodes (one more endpoint on nodeA) writes nothing.
	rv := e.get("web").ResourceVersion
	sl.Endpoints = append(sl.Endpoints, e.slice("web", "x", discoveryv1.AddressTypeIPv4, 8080, ready("198.18.55.3", nodeA)).Endpoints...)
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDSR("web", "198.18.55.1=true 198.18.55.2=true 198.18.55.3=true")
	time.Sleep(500 * time.Millisecond)
	if got := e.get("web").ResourceVersion; got != rv {
		t.Errorf("web was written (resourceVersion %s → %s) by an endpoint change that kept its nodes", rv, got)
	}
	for _, name := range []string{"web", "web2"} {
		if hasEvent(name, ReasonSharedEndpoints) {
			t.Errorf("%s got %s with every Pod's node serving DSR: %v", name, ReasonSharedEndpoints, e.events(name))
		}
	}

	// nodeB's agent withdraws (an agent stopped with --cleanup-on-exit): its Pod's replies
	// return through the gateways again, shared by both Services.
	annotate(nodeB, false)
	waitCond("web", metav1.ConditionFalse, DSREndpointsExcluded, fallback)
	waitCond("web2", metav1.ConditionFalse, DSREndpointsExcluded, fallback)
	t.Log(e.waitEvent("web", "Warning "+ReasonSharedEndpoints+": shares Pod ports with "+e.ns+"/web2"))
	t.Log(e.waitEvent("web2", "Warning "+ReasonDSRFallback+": "+fallback))

	// The return-path mode has no such condition: a controller in it removes it.
	c.stop()
	e.controller("gw-2", Options{})
	e.eventually(10*time.Second, "the DSR condition removed in the return-path mode", func() bool {
		return dsrCond("web") == nil && dsrCond("web2") == nil
	})
}
