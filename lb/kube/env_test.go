// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
)

// The controller's integration tests share one real kube-apiserver (RBAC on, deploy/rbac.yaml
// applied) and run the controller as the xlb service account, so a verb missing from the
// ClusterRole fails them. Each test has its own namespace and its own loadBalancerClass, so the
// controllers of different tests never see each other's Services.

var (
	cpOnce sync.Once
	cp     *kubetest.ControlPlane
	cpErr  error
	// testSeq numbers the tests' classes and namespaces.
	testSeq atomic.Int32
)

func TestMain(m *testing.M) {
	// client-go's leader election logs through klog; the controller's own log goes to the test.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	code := m.Run()
	if cp != nil {
		cp.Stop()
	}
	os.Exit(code)
}

// controlPlane returns the shared control plane, starting it (dual-stack Service ranges) on
// first use.
func controlPlane(t *testing.T) *kubetest.ControlPlane {
	t.Helper()
	cpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xlb-kube-test-")
		if err != nil {
			cpErr = err
			return
		}
		cp, cpErr = kubetest.Start(context.Background(), kubetest.Options{Dir: dir,
			APIServerFlags: []string{"--service-cluster-ip-range=10.96.0.0/24,2001:db8:96::/112"}})
		if cpErr != nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		rbac := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "rbac.yaml")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cpErr = kubetest.ApplyFile(ctx, cp.Admin(), rbac); cpErr != nil {
			return
		}
		cpErr = kubetest.InstallCRDs(ctx, cp.Admin(), filepath.Join(filepath.Dir(file), "..", "..", kubetest.CRDDir))
	})
	if cpErr != nil {
		t.Fatalf("control plane: %v", cpErr)
	}
	return cp
}

// env is one test's slice of the cluster.
type env struct {
	t     *testing.T
	ctx   context.Context
	admin kubernetes.Interface
	ns    string
	class string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := controlPlane(t)
	admin, err := kubernetes.NewForConfig(c.Admin())
	if err != nil {
		t.Fatal(err)
	}
	n := testSeq.Add(1)
	e := &env{t: t, ctx: t.Context(), admin: admin, ns: fmt.Sprintf("t%d-%s", n, strings.ToLower(sanitize(t.Name()))),
		class: fmt.Sprintf("xlb.dev/test-%d", n)}
	if len(e.ns) > 60 {
		e.ns = e.ns[:60]
	}
	e.ns = strings.TrimRight(e.ns, "-")
	if _, err := admin.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// pool returns a pool named name holding ranges.
func pool(t *testing.T, name string, ranges ...string) Pool {
	t.Helper()
	p := Pool{Pool: ipam.Pool{Name: name, AutoAssign: true}}
	for _, s := range ranges {
		r, err := ipam.ParseRange(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Ranges = append(p.Ranges, r)
	}
	return p
}

// running is a controller running for a test.
type running struct {
	*Controller
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// stop stops the controller and waits for it.
func (r *running) stop() {
	r.cancel()
	<-r.done
}

// controller starts a controller as the xlb service account, with the test's class and a
// lease of its own; it stops when the test ends.
func (e *env) controller(identity string, opts Options) *running {
	e.t.Helper()
	return e.controllerAs(controlPlane(e.t).Controller(), identity, opts)
}

func (e *env) controllerAs(cfg *rest.Config, identity string, opts Options) *running {
	e.t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if opts.Class == "" {
		opts.Class = e.class
	}
	opts.Leader.Identity = identity
	opts.Leader.Name = "xlb-" + e.ns
	if opts.Leader.LeaseDuration == 0 {
		opts.Leader.LeaseDuration, opts.Leader.RenewDeadline, opts.Leader.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	}
	if opts.Pools == nil {
		opts.Pools = []Pool{pool(e.t, "edge", "198.18.100.0/30", "2001:db8:100::/126")}
	}
	r := &running{changed: make(chan struct{}, 1), done: make(chan struct{})}
	opts.Changed = func() {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	opts.Log = slog.New(slog.NewTextHandler(testWriter{e.t, identity}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(client, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	r.Controller = c
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := c.Run(ctx); err != nil {
			e.t.Errorf("controller %s: %v", identity, err)
		}
	}()
	e.t.Cleanup(r.stop)
	e.eventually(10*time.Second, identity+" synced", c.Synced)
	return r
}

// testWriter sends a controller's log to the test's.
type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Logf("[%s] %s", w.name, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// service is a LoadBalancer Service of the test's class with one TCP port 80 → 8080.
func (e *env) service(name string, mods ...func(*corev1.Service)) *corev1.Service {
	no := false
	class := e.class
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:             &class,
			AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": name},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// create creates s as the admin.
func (e *env) create(s *corev1.Service) *corev1.Service {
	e.t.Helper()
	out, err := e.admin.CoreV1().Services(s.Namespace).Create(e.ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create service %s: %v", s.Name, err)
	}
	return out
}

// get returns Service name.
func (e *env) get(name string) *corev1.Service {
	e.t.Helper()
	s, err := e.admin.CoreV1().Services(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get service %s: %v", name, err)
	}
	return s
}

// eventually polls cond every 20 ms for up to limit and fails the test with what when it never
// holds; it returns how long it took.
func (e *env) eventually(limit time.Duration, what string, cond func() bool) time.Duration {
	e.t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			e.t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ingress waits until Service name has n ingress addresses and returns them.
func (e *env) ingress(name string, n int) []netip.Addr {
	e.t.Helper()
	var got []netip.Addr
	e.eventually(10*time.Second, fmt.Sprintf("service %s has %d ingress addresses (has %v)", name, n, &got), func() bool {
		got = statusAddrs(e.get(name))
		return len(got) == n
	})
	return got
}

// events returns the "TYPE REASON: message" of xlb's Events about Service name.
func (e *env) events(name string) []string {
	e.t.Helper()
	list, err := e.admin.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Source.Component != "xlb" {
			continue // the apiserver's own (its ClusterIP repair loop, say)
		}
		out = append(out, ev.Type+" "+ev.Reason+": "+ev.Message)
	}
	return out
}

// waitEvent waits for an Event about Service name whose "TYPE REASON: message" contains want.
func (e *env) waitEvent(name, want string) string {
	e.t.Helper()
	var found string
	e.eventually(10*time.Second, fmt.Sprintf("an event about %s containing %q", name, want), func() bool {
		for _, ev := range e.events(name) {
			if strings.Contains(ev, want) {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

// condition returns Service name's Allocated condition.
func (e *env) condition(name string) *metav1.Condition {
	for _, c := range e.get(name).Status.Conditions {
		if c.Type == ConditionAllocated {
			return &c
		}
	}
	return nil
}

// endpoint describes one endpoint of a slice.
type endpoint struct {
	addr                        string
	node                        string
	ready, serving, terminating bool
}

// ready is a ready endpoint at addr on node.
func ready(addr, node string) endpoint {
	return endpoint{addr: addr, node: node, ready: true, serving: true}
}

// slice builds an EndpointSlice of Service svc with port http = port.
func (e *env) slice(svc, name string, family discoveryv1.AddressType, port int32, eps ...endpoint) *discoveryv1.EndpointSlice {
	pn, proto := "http", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port, Protocol: &proto}},
	}
	for _, ep := range eps {
		r, sv, tm := ep.ready, ep.serving, ep.terminating
		x := discoveryv1.Endpoint{Addresses: []string{ep.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &r, Serving: &sv, Terminating: &tm}}
		if ep.node != "" {
			n := ep.node
			x.NodeName = &n
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

// model returns the controller's model of Service name, if it has one.
func (r *running) model(ns, name string) (lb.Service, bool) {
	for _, s := range r.Services() {
		if s.Name == ns+"/"+name {
			return s, true
		}
	}
	return lb.Service{}, false
}

// backendStates returns "addr=state" of the model's backends, sorted.
func backendStates(s lb.Service) []string {
	var out []string
	for _, b := range s.Backends {
		out = append(out, b.Addr.String()+"="+b.State.String())
	}
	slices.Sort(out)
	return out
}

// fakeHealth is a NodeHealth whose verdicts the test sets.
type fakeHealth struct {
	mu       sync.Mutex
	bad      map[string]bool
	services []ServiceTarget
}

func (h *fakeHealth) LocalHealthy(node string, _ types.NamespacedName) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.bad[node]
}

func (h *fakeHealth) SetTargets(_ []NodeTarget, services []ServiceTarget) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.services = services
}

func (h *fakeHealth) set(node string, bad bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bad[node] = bad
}

func (h *fakeHealth) port(svc types.NamespacedName) uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.services {
		if s.Service == svc {
			return s.Port
		}
	}
	return 0
}
