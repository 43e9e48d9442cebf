// SPDX-License-Identifier: Apache-2.0
package kube

// Regression tests from a review of the controller: each Test* reproduces a bug that was
// fixed (writes on another xlb's Services, VIPs moved by a leader restart, pending Services not
// retried); BenchmarkUpdateTargets measures the node prober's target rebuild, which now runs
// only when a Local Service of ours changes.

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/retry"
)

// edit applies mod to Service name, retrying on conflicts.
func (e *env) edit(name string, mod func(*corev1.Service)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := e.admin.CoreV1().Services(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(s)
		_, err = e.admin.CoreV1().Services(e.ns).Update(e.ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("edit service %s: %v", name, err)
	}
}

// Finding 1: two xlb deployments with different classes (each leading its own Lease) in one
// cluster. Controller B sees A's Service (type LoadBalancer, class A — never B's, the class is
// immutable) with our finalizer and the xlb.dev/AddressAllocated condition, concludes
// ownedBefore, and strips the condition and the finalizer; A puts them back: a write loop
// that never ends, and A's Service is unprotected by its finalizer half the time.
func TestOtherXLBClassNotTouched(t *testing.T) {
	a := newEnv(t)
	b := newEnv(t)
	a.controller("gw-a", Options{})
	b.controller("gw-b", Options{Pools: []Pool{pool(t, "other", "198.18.110.0/30")}})
	a.create(a.service("web"))
	a.ingress("web", 1)
	time.Sleep(time.Second) // both controllers have seen it

	w, err := a.admin.CoreV1().Services(a.ns).Watch(a.ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", "web").String(),
		ResourceVersion: a.get("web").ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writes []string
	deadline := time.After(3 * time.Second)
loop:
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				continue
			}
			s := ev.Object.(*corev1.Service)
			cond := "no condition"
			for _, c := range s.Status.Conditions {
				if c.Type == ConditionAllocated {
					cond = "condition"
				}
			}
			writes = append(writes, fmt.Sprintf("finalizer=%v %s", slices.Contains(s.Finalizers, Finalizer), cond))
		case <-deadline:
			break loop
		}
	}
	if len(writes) > 0 {
		t.Errorf("a Service of class %s was written %d times in 3 s by the controller of class %s (first: %v)",
			a.class, len(writes), b.class, writes[:min(len(writes), 6)])
	}
}

// Finding 2: prime (a new or restarted leader) feeds each Service's *requested* addresses, not
// only its status addresses, to the allocator. An older Service that asks for an address a
// younger Service holds (so it is pending, AddressInUse, still serving its old address) is
// given the younger Service's address at prime; the younger one then loses its serving VIP.
func TestRestartDoesNotMoveVIPs(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	e.create(e.service("a-old"))
	oldVIP := e.ingress("a-old", 1)[0]
	e.create(e.service("b-young", func(s *corev1.Service) {
		s.Annotations = map[string]string{AnnotationLoadBalancerIPs: "198.18.100.2"}
	}))
	if got := e.ingress("b-young", 1)[0]; got != addr("198.18.100.2") {
		t.Fatalf("b-young got %v", got)
	}
	// The older Service now asks for the younger one's address: refused, it keeps its own.
	e.edit("a-old", func(s *corev1.Service) {
		s.Annotations = map[string]string{AnnotationLoadBalancerIPs: "198.18.100.2"}
	})
	e.eventually(10*time.Second, "a-old pending with AddressInUse", func() bool {
		cond := e.condition("a-old")
		return cond != nil && cond.Reason == "AddressInUse"
	})
	c.stop()
	c2 := e.controller("gw-2", Options{})
	e.eventually(10*time.Second, "gw-2 leads", c2.Leading)
	time.Sleep(2 * time.Second) // every Service re-synced by the new leader
	if got := statusAddrs(e.get("b-young")); len(got) != 1 || got[0] != addr("198.18.100.2") {
		t.Errorf("after a leader restart b-young has %v, want the 198.18.100.2 it held (condition %+v)", got, e.condition("b-young"))
	}
	if got := statusAddrs(e.get("a-old")); len(got) != 1 || got[0] != oldVIP {
		t.Errorf("after a leader restart a-old has %v, want its own %v", got, oldVIP)
	}
}

// Finding 3: a pending Service is retried only when a Service is forgotten (deleted, not ours).
// An address freed because its Service moved to another pool (or dropped a family, or changed
// its requested address) leaves the pending Service pending until some unrelated event.
func TestPendingRetriedWhenAddressMoves(t *testing.T) {
	e := newEnv(t)
	spare := pool(t, "spare", "198.18.103.1/32")
	spare.AutoAssign = false
	e.controller("gw-1", Options{Pools: []Pool{pool(t, "tiny", "198.18.102.1-198.18.102.2"), spare}})
	e.create(e.service("a"))
	freed := e.ingress("a", 1)[0]
	e.create(e.service("b"))
	e.ingress("b", 1)
	e.create(e.service("c"))
	e.waitEvent("c", "Warning AllocationFailed")
	e.edit("a", func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationAddressPool: "spare"} })
	e.eventually(10*time.Second, "a moves to spare's 198.18.103.1", func() bool {
		got := statusAddrs(e.get("a"))
		return len(got) == 1 && got[0] == addr("198.18.103.1")
	})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got := statusAddrs(e.get("c")); len(got) == 1 && got[0] == freed {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("c still pending 5 s after a released %v (condition %+v)", freed, e.condition("c"))
}

// Finding 5 (scale): updateTargets runs on every Service event (any Service of the cluster,
// including the controller's own status writes): it lists every Service and Node and rebuilds
// nodes×Local-Services probe targets. 100 nodes, 1,000 eTP=Local Services of ours.
func BenchmarkUpdateTargets(b *testing.B) {
	c, err := New(fake.NewClientset(), Options{Pools: []Pool{pool(&testing.T{}, "edge", "198.18.100.0/24")},
		NodeHealth: NewNodeProber(NodeProberOptions{Logger: slog.New(slog.DiscardHandler)}),
		Leader:     LeaderOptions{Identity: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	class := DefaultClass
	nodes := c.factory.Core().V1().Nodes().Informer().GetIndexer()
	svcs := c.factory.Core().V1().Services().Informer().GetIndexer()
	for i := range 100 {
		_ = nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP,
				Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}}}})
	}
	for i := range 1000 {
		_ = svcs.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%d", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: int32(30000 + i)}})
	}
	b.ResetTimer()
	for range b.N {
		c.updateTargets()
	}
}

// Finding 2b: prime drops the sharing key of a Service whose request has an Err (any bad
// annotation), so after a leader restart the older sharer holds the address unshared and the
// younger sharer loses its serving VIP.
func TestRestartKeepsSharedVIP(t *testing.T) {
	e := newEnv(t)
	c := e.controller("gw-1", Options{})
	share := func(port int32) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnotationAllowSharedIP: "dns"}
			s.Spec.Ports[0].Port = port
		}
	}
	e.create(e.service("a-old", share(53)))
	vip := e.ingress("a-old", 1)[0]
	e.create(e.service("b-young", share(54)))
	if got := e.ingress("b-young", 1)[0]; got != vip {
		t.Fatalf("b-young got %v, want the shared %v", got, vip)
	}
	// A typo in an unrelated annotation of the older sharer: it keeps its address (req.Err).
	e.edit("a-old", func(s *corev1.Service) { s.Annotations[AnnotationLoadBalancerIPs] = "bogus" })
	e.waitEvent("a-old", "InvalidLoadBalancerIP")
	c.stop()
	c2 := e.controller("gw-2", Options{})
	e.eventually(10*time.Second, "gw-2 leads", c2.Leading)
	time.Sleep(2 * time.Second)
	if got := statusAddrs(e.get("b-young")); len(got) != 1 || got[0] != vip {
		t.Errorf("after a leader restart b-young has %v, want the shared %v (condition %+v)", got, vip, e.condition("b-young"))
	}
}
