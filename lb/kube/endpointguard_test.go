// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/lb"
)

// TestEndpointGuardAPI runs the controller against the real apiserver with a Node (InternalIP
// 198.18.57.10, Pod CIDR 198.18.58.0/24) and tenants writing their own EndpointSlices for
// Services without a selector (the CVE-2021-25740 class):
//   - one pointing at the node's address (its targetRef forged as a Pod of its namespace) next
//     to a Pod: only the Pod is a backend, and the Service gets a Warning EndpointRefused naming
//     the node's address as "a node's address" (not which node);
//   - one pointing at the first Service's VIP: no backend, refused as a load-balancer address;
//   - the same node address in a Service of a pool whose externalEndpoints holds it (the
//     operator's opt-out, for hostNetwork backends): a backend;
//   - RefusedEndpoints counts the refusals by reason, and follows a slice its tenant fixed.
func TestEndpointGuardAPI(t *testing.T) {
	e := newEnv(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-n"},
		Spec: corev1.NodeSpec{PodCIDR: "198.18.58.0/24", PodCIDRs: []string{"198.18.58.0/24"}}}
	created, err := e.admin.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.57.10"}, {Type: corev1.NodeHostName, Address: "n"}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	hostnet := pool(t, "hostnet", "198.18.100.4/30")
	hostnet.AutoAssign = false
	hostnet.ExternalEndpoints = []netip.Prefix{netip.MustParsePrefix("198.18.57.0/24")}
	c := e.controller("gw-1", Options{Pools: []Pool{pool(t, "edge", "198.18.100.0/30"), hostnet}})

	selectorless := func(s *corev1.Service) { s.Spec.Selector = nil }
	mkSlice := func(svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		t.Helper()
		s := e.slice(svc, svc+"-1", discoveryv1.AddressTypeIPv4, 8080)
		s.Endpoints = eps
		out, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(e.ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	yes := true
	endpoint := func(addr string, pod bool) discoveryv1.Endpoint {
		x := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}
		if pod {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: e.ns, Name: "p-" + strings.ReplaceAll(addr, ".", "-")}
		}
		return x
	}
	backends := func(name string) string {
		m, _ := c.model(e.ns, name)
		var out []string
		for _, b := range m.Backends {
			out = append(out, b.Addr.String())
		}
		return strings.Join(out, " ")
	}
	waitBackends := func(name, want string) {
		t.Helper()
		e.eventually(10*time.Second, fmt.Sprintf("service %s's backends %q (has %q)", name, want, backends(name)), func() bool { return backends(name) == want })
	}
	waitRefused := func(want map[lb.EndpointRefusal]int) {
		t.Helper()
		e.eventually(10*time.Second, fmt.Sprintf("refused endpoints %v (has %v)", want, c.RefusedEndpoints()), func() bool {
			return maps.Equal(c.RefusedEndpoints(), want)
		})
	}

	e.create(e.service("hijack", selectorless))
	vip := e.ingress("hijack", 1)[0]
	sl := mkSlice("hijack", endpoint("198.18.57.10", true), endpoint("198.18.58.5", true))
	waitBackends("hijack", "198.18.58.5")
	ev := e.waitEvent("hijack", "Warning "+ReasonEndpointRefused+": 1 endpoints refused: 198.18.57.10 in EndpointSlice hijack-1: a node's address")
	if strings.Contains(ev, node.Name) {
		t.Errorf("the Event names the node: %s", ev)
	}

	e.create(e.service("aim", selectorless))
	e.ingress("aim", 1)
	mkSlice("aim", endpoint(vip.String(), false))
	e.waitEvent("aim", fmt.Sprintf("1 endpoints refused: %s in EndpointSlice aim-1: a load-balancer address", vip))
	if got := backends("aim"); got != "" {
		t.Errorf("aim's backends %q, want none (its only endpoint is hijack's VIP)", got)
	}

	e.create(e.service("hostnet", selectorless, func(s *corev1.Service) {
		s.Annotations = map[string]string{AnnotationAddressPool: "hostnet"}
	}))
	e.ingress("hostnet", 1)
	mkSlice("hostnet", endpoint("198.18.57.10", true))
	waitBackends("hostnet", "198.18.57.10")
	waitRefused(map[lb.EndpointRefusal]int{lb.RefusedNode: 1, lb.RefusedFrontend: 1})
	if slices.ContainsFunc(e.events("hostnet"), func(s string) bool { return strings.Contains(s, ReasonEndpointRefused) }) {
		t.Errorf("hostnet's events %v: its pool allows the node", e.events("hostnet"))
	}

	// Fixed by its tenant, hijack's refusal goes.
	sl.Endpoints = sl.Endpoints[1:]
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(map[lb.EndpointRefusal]int{lb.RefusedFrontend: 1})
	waitBackends("hijack", "198.18.58.5")
}
