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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// objects is a test's access to xlb.dev objects as the admin.
type objects struct {
	e   *env
	dyn dynamic.Interface
}

func (e *env) objects() objects {
	e.t.Helper()
	dyn, err := dynamic.NewForConfig(controlPlane(e.t).Admin())
	if err != nil {
		e.t.Fatal(err)
	}
	return objects{e, dyn}
}

// applyPool creates or replaces AddressPool name with spec (deleted when the test ends).
func (o objects) applyPool(name string, spec v1alpha1.AddressPoolSpec) {
	o.e.t.Helper()
	p := &v1alpha1.AddressPool{TypeMeta: metav1.TypeMeta{APIVersion: "xlb.dev/v1alpha1", Kind: "AddressPool"},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		o.e.t.Fatal(err)
	}
	delete(m, "status")
	res := o.dyn.Resource(poolResource())
	if _, err := res.Apply(o.e.ctx, name, &unstructured.Unstructured{Object: m},
		metav1.ApplyOptions{FieldManager: "test", Force: true}); err != nil {
		o.e.t.Fatalf("apply AddressPool %s: %v", name, err)
	}
	o.e.t.Cleanup(func() { // t.Context() has ended by now
		if err := res.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			o.e.t.Errorf("delete AddressPool %s: %v", name, err)
		}
	})
}

// pool reads AddressPool name.
func (o objects) pool(name string) v1alpha1.AddressPool {
	o.e.t.Helper()
	u, err := o.dyn.Resource(poolResource()).Get(o.e.ctx, name, metav1.GetOptions{})
	if err != nil {
		o.e.t.Fatalf("get AddressPool %s: %v", name, err)
	}
	var p v1alpha1.AddressPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		o.e.t.Fatal(err)
	}
	return p
}

// poolReady waits until AddressPool name's Ready condition, for its current generation, has
// status and reason, and returns the pool.
func (o objects) poolReady(name string, status metav1.ConditionStatus, reason string) v1alpha1.AddressPool {
	o.e.t.Helper()
	var p v1alpha1.AddressPool
	o.e.eventually(15*time.Second, fmt.Sprintf("AddressPool %s Ready %s/%s (has %+v)", name, status, reason, &p.Status), func() bool {
		p = o.pool(name)
		c := meta.FindStatusCondition(p.Status.Conditions, "Ready")
		return c != nil && c.Status == status && c.Reason == reason && p.Status.ObservedGeneration == p.Generation
	})
	return p
}

// poolEvents returns "reason: message" of the Events on AddressPool name.
func (o objects) poolEvents(name string) []string {
	list, err := o.e.admin.CoreV1().Events("").List(o.e.ctx, metav1.ListOptions{})
	if err != nil {
		o.e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "AddressPool" && ev.InvolvedObject.Name == name {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

// TestAddressPoolObjects is the operator's story with AddressPool objects and no pool in the
// config file: a Service pending for want of a pool gets an address when a pool is created; an
// overlapping pool is refused on its status and by an Event; editing and deleting the pool
// under a serving VIP never takes the address away; a spec only a full parse refuses (host bits)
// is reported as Invalid. The controller runs as the xlb ServiceAccount (deploy/rbac.yaml).
func TestAddressPoolObjects(t *testing.T) {
	e := newEnv(t)
	o := e.objects()
	dyn, err := dynamic.NewForConfig(controlPlane(t).Controller())
	if err != nil {
		t.Fatal(err)
	}
	c := e.controller("gw-1", Options{Pools: []Pool{}, Dynamic: dyn})
	e.eventually(10*time.Second, "leading", c.Leading)

	e.create(e.service("web"))
	t.Log(e.waitEvent("web", "AllocationFailed")) // pending: no pool at all
	a, b := "pa-"+e.ns, "pb-"+e.ns
	o.applyPool(a, v1alpha1.AddressPoolSpec{Addresses: []string{"198.18.210.0/30"}})
	got := e.ingress("web", 1)
	if got[0] != netip.MustParseAddr("198.18.210.0") {
		t.Fatalf("web got %v, want 198.18.210.0 (the lowest address of the new pool)", got)
	}
	p := o.poolReady(a, metav1.ConditionTrue, ReasonPoolReady)
	e.eventually(15*time.Second, "pool usage 1 used, 3 free", func() bool {
		p = o.pool(a)
		return p.Status.Used == 1 && p.Status.Free == "3"
	})

	// A pool overlapping it, created later, is refused; the older one keeps serving.
	o.applyPool(b, v1alpha1.AddressPoolSpec{Addresses: []string{"198.18.210.2-198.18.210.9"}, Priority: 0})
	pb := o.poolReady(b, metav1.ConditionFalse, ReasonPoolConflict)
	if msg := meta.FindStatusCondition(pb.Status.Conditions, "Ready").Message; !strings.Contains(msg, a) {
		t.Errorf("conflict message %q does not name the pool it overlaps (%s)", msg, a)
	}
	e.eventually(10*time.Second, "a PoolConflict Event on "+b, func() bool {
		return slices.ContainsFunc(o.poolEvents(b), func(s string) bool { return strings.HasPrefix(s, "PoolConflict: ") })
	})

	// Editing the serving pool away from the Service's address: the Service keeps it.
	o.applyPool(a, v1alpha1.AddressPoolSpec{Addresses: []string{"198.18.211.0/30"}})
	o.poolReady(a, metav1.ConditionTrue, ReasonPoolReady)
	o.poolReady(b, metav1.ConditionTrue, ReasonPoolReady) // no overlap any more
	e.create(e.service("shop"))
	if got := e.ingress("shop", 1); got[0] != netip.MustParseAddr("198.18.210.2") && got[0] != netip.MustParseAddr("198.18.211.0") {
		t.Errorf("shop got %v, want an address of the edited pools", got)
	}
	time.Sleep(time.Second)
	if got := statusAddrs(e.get("web")); len(got) != 1 || got[0] != netip.MustParseAddr("198.18.210.0") {
		t.Fatalf("web has %v after its pool was edited; want 198.18.210.0 kept", got)
	}
	// Deleting it: still kept.
	if err := o.dyn.Resource(poolResource()).Delete(e.ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := statusAddrs(e.get("web")); len(got) != 1 || got[0] != netip.MustParseAddr("198.18.210.0") {
		t.Fatalf("web has %v after its pool was deleted; want 198.18.210.0 kept", got)
	}
	if !slices.ContainsFunc(c.Services(), func(s lb.Service) bool { return s.Name == e.ns+"/web" }) {
		t.Fatalf("web is not balanced any more after its pool was deleted")
	}

	// A CIDR with host bits passes the apiserver's isCIDR but not xlb's parse.
	bad := "pbad-" + e.ns
	o.applyPool(bad, v1alpha1.AddressPoolSpec{Addresses: []string{"198.18.212.1/30"}, AutoAssign: ptr(false)})
	pbad := o.poolReady(bad, metav1.ConditionFalse, ReasonPoolInvalid)
	if msg := meta.FindStatusCondition(pbad.Status.Conditions, "Ready").Message; !strings.Contains(msg, "host bits") {
		t.Errorf("invalid pool's message %q does not say what is wrong", msg)
	}
}

// TestAddressPoolsFollowTheFile: the config file's pools come first and win a name or address
// clash; a file reload (SetPools) re-decides the objects. A Service written for MetalLB gets
// what its metallb.io annotations ask for.
func TestAddressPoolsFollowTheFile(t *testing.T) {
	e := newEnv(t)
	o := e.objects()
	dyn, err := dynamic.NewForConfig(controlPlane(t).Controller())
	if err != nil {
		t.Fatal(err)
	}
	name := "pf-" + e.ns
	file := pool(t, "file-"+e.ns, "198.18.213.0/30")
	c := e.controller("gw-1", Options{Pools: []Pool{file}, Dynamic: dyn})
	e.eventually(10*time.Second, "leading", c.Leading)
	o.applyPool(name, v1alpha1.AddressPoolSpec{Addresses: []string{"198.18.213.2/31"}})
	o.poolReady(name, metav1.ConditionFalse, ReasonPoolConflict)
	if err := c.SetPools([]Pool{pool(t, "file-"+e.ns, "198.18.214.0/30")}); err != nil {
		t.Fatal(err)
	}
	o.poolReady(name, metav1.ConditionTrue, ReasonPoolReady)
	// A Service asking for the object's pool by name gets its address.
	e.create(e.service("web", func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationAddressPool: name} }))
	if got := e.ingress("web", 1); got[0] != netip.MustParseAddr("198.18.213.2") {
		t.Fatalf("web got %v, want 198.18.213.2 from pool %s", got, name)
	}
	// A Service written for MetalLB: its annotations are honoured as they are.
	e.create(e.service("metallb", func(s *corev1.Service) {
		s.Annotations = map[string]string{MetalLBLoadBalancerIPs: "198.18.213.3", MetalLBAllowSharedIP: "k"}
	}))
	if got := e.ingress("metallb", 1); got[0] != netip.MustParseAddr("198.18.213.3") {
		t.Fatalf("a Service with metallb.io/loadBalancerIPs 198.18.213.3 got %v", got)
	}
}

// gatewayStatus reads GatewayStatus name.
func (o objects) gatewayStatus(name string) (v1alpha1.GatewayStatus, bool) {
	u, err := o.dyn.Resource(gatewayResource()).Get(o.e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return v1alpha1.GatewayStatus{}, false
	}
	if err != nil {
		o.e.t.Fatalf("get GatewayStatus %s: %v", name, err)
	}
	var g v1alpha1.GatewayStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
		o.e.t.Fatal(err)
	}
	return g, true
}

// TestGatewayStatus: two gateways write their own GatewayStatus objects (as the xlb
// ServiceAccount), which follow their reports; when one stops, the leader marks its object stale
// within StaleAfter heartbeats, and the gateway's return makes it Ready again.
func TestGatewayStatus(t *testing.T) {
	e := newEnv(t)
	o := e.objects()
	dyn, err := dynamic.NewForConfig(controlPlane(t).Controller())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"gwa-" + e.ns, "gwb-" + e.ns}
	for _, n := range names {
		t.Cleanup(func() { _ = o.dyn.Resource(gatewayResource()).Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	type gw struct {
		mu     sync.Mutex
		st     v1alpha1.GatewayStatusStatus
		r      *StatusReporter
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(name string, leading bool, st v1alpha1.GatewayStatusStatus) *gw {
		g := &gw{st: st, done: make(chan struct{})}
		g.r, err = NewStatusReporter(StatusReporterOptions{Client: dyn, Name: name, Heartbeat: time.Second,
			Leading:  func() bool { return leading },
			Snapshot: func() v1alpha1.GatewayStatusStatus { g.mu.Lock(); defer g.mu.Unlock(); return *g.st.DeepCopy() },
			Log:      slog.New(slog.NewTextHandler(testWriter{t, name}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		var ctx context.Context
		ctx, g.cancel = context.WithCancel(context.Background())
		go func() { defer close(g.done); g.r.Run(ctx) }()
		t.Cleanup(func() { g.cancel(); <-g.done })
		return g
	}
	healthy := func(vips ...string) v1alpha1.GatewayStatusStatus {
		st := v1alpha1.GatewayStatusStatus{Datapath: v1alpha1.DatapathStatus{Kind: "xdp", Healthy: true},
			SessionsUp: "1/1", Sessions: []v1alpha1.BGPSessionStatus{{Peer: "198.18.0.254", ASN: 65000, State: "established"}}}
		for _, v := range vips {
			st.Announced = append(st.Announced, v1alpha1.VIPStatus{Address: v, Services: []string{"shop/web"}})
		}
		return st
	}
	a := start(names[0], true, healthy("198.18.100.1"))
	b := start(names[1], false, healthy("198.18.100.1", "198.18.100.2"))

	ready := func(name string, status metav1.ConditionStatus, reason string) v1alpha1.GatewayStatus {
		t.Helper()
		var g v1alpha1.GatewayStatus
		e.eventually(15*time.Second, fmt.Sprintf("GatewayStatus %s Ready %s/%s (has %+v)", name, status, reason, &g.Status.Conditions), func() bool {
			var ok bool
			g, ok = o.gatewayStatus(name)
			c := meta.FindStatusCondition(g.Status.Conditions, "Ready")
			return ok && c != nil && c.Status == status && c.Reason == reason
		})
		return g
	}
	ga := ready(names[0], metav1.ConditionTrue, ReasonGatewayReporting)
	gb := ready(names[1], metav1.ConditionTrue, ReasonGatewayReporting)
	if ga.Status.AnnouncedCount != 1 || gb.Status.AnnouncedCount != 2 || gb.Status.Announced[1].Address != "198.18.100.2" ||
		gb.Status.SessionsUp != "1/1" || gb.Status.Sessions[0].State != "established" {
		t.Fatalf("statuses do not say what the gateways announce: a %+v, b %+v", ga.Status, gb.Status)
	}

	// b withdraws a VIP: its object says so at once (not at the next heartbeat only).
	b.mu.Lock()
	b.st.Announced = b.st.Announced[:1]
	b.st.Withdrawn = []v1alpha1.VIPStatus{{Address: "198.18.100.2", Reason: "0 backends take new flows"}}
	b.mu.Unlock()
	b.r.Changed()
	e.eventually(5*time.Second, "b's withdrawal on its status", func() bool {
		g, _ := o.gatewayStatus(names[1])
		return g.Status.WithdrawnCount == 1 && g.Status.Withdrawn[0].Reason != ""
	})

	// b dies: the leader marks it stale; a unhealthy datapath is reported as such.
	b.cancel()
	<-b.done
	stale := ready(names[1], metav1.ConditionFalse, ReasonGatewayStale)
	if stale.Status.AnnouncedCount != 1 {
		t.Errorf("a stale gateway's last announcements are kept: %+v", stale.Status)
	}
	a.mu.Lock()
	a.st.Datapath.Healthy, a.st.Datapath.Message = false, "attach ext0: no such device"
	a.mu.Unlock()
	a.r.Changed()
	if g := ready(names[0], metav1.ConditionFalse, ReasonGatewayDatapath); !strings.Contains(meta.FindStatusCondition(g.Status.Conditions, "Ready").Message, "no such device") {
		t.Errorf("unhealthy datapath's condition does not say why: %+v", g.Status.Conditions)
	}
	// b is back.
	start(names[1], false, healthy("198.18.100.1"))
	ready(names[1], metav1.ConditionTrue, ReasonGatewayReporting)
}
