// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kubeSite builds the one Kubernetes-mode site the Kubernetes tests share (BIRD routing when
// bird is installed, as make lab runs it).
func kubeSite(t *testing.T) *Site { return kubeSiteWith(t, Options{}) }

// kubeSiteWith is kubeSite with opts (XLB, Mode, Log and ReturnPath are set here, and Routing
// unless opts asks for BGP routing).
func kubeSiteWith(t *testing.T, opts Options) *Site {
	t.Helper()
	routing := Static
	if _, err := exec.LookPath("bird"); err == nil {
		routing = BIRD
	}
	var log bytes.Buffer
	if opts.Routing != Static {
		routing = opts.Routing
	}
	opts.XLB, opts.Mode, opts.Routing, opts.Log, opts.ReturnPath = xlbBin, Kubernetes, routing, &log, EnvReturnPath()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, g := range s.Gateways {
				t.Logf("%s xlb log (%s):\n%s", g.Name, g.LogPath, g.logTail(60))
			}
			t.Logf("site log:\n%s", log.String())
		}
		if err := s.Close(); err != nil {
			t.Errorf("close site %s: %v", s.Prefix, err)
		}
	})
	return s
}

// TestKubernetes runs the Kubernetes-mode properties on one site (etcd and kube-apiserver in the
// control namespace, both gateways' xlb as controllers, BIRD peering with them).
func TestKubernetes(t *testing.T) {
	s := kubeSite(t)
	t.Run("Demo", func(t *testing.T) {
		var b bytes.Buffer
		s.Describe(&b)
		err := s.Demo(context.Background(), &b)
		s.Guide(&b)
		if err != nil || testing.Verbose() {
			t.Logf("demo output:\n%s", b.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("NewService", func(t *testing.T) { testNewService(t, s) })
	t.Run("Scale", func(t *testing.T) { testScale(t, s) })
	t.Run("LocalHealth", func(t *testing.T) { testLocalHealth(t, s) })
	t.Run("LeaderKilled", func(t *testing.T) { testLeaderKilled(t, s) })
	t.Run("APIServerOutage", func(t *testing.T) { testAPIServerOutage(t, s) })
	// Last: it adds a pod of its own to the site.
	t.Run("ClusterIPs", func(t *testing.T) { testClusterIPs(t, s) })
}

// TestKubernetesFRR runs the failures of TestKubernetes that involve the router with FRR as the
// router: the leader killed, the apiserver out.
func TestKubernetesFRR(t *testing.T) {
	needFRR(t)
	s := kubeSiteWith(t, Options{Routing: FRR})
	t.Run("LeaderKilled", func(t *testing.T) { testLeaderKilled(t, s) })
	t.Run("APIServerOutage", func(t *testing.T) { testAPIServerOutage(t, s) })
}

// waitServiceAnswers waits, up to timeout, until Service name (in KubeNamespace) has an address
// in its status and client c's request to it is answered. It returns the address, when it
// appeared, and nil, or the last error when it never answered.
func waitServiceAnswers(ctx context.Context, s *Site, c *Client, name string, timeout time.Duration) (netip.Addr, time.Time, error) {
	var vip netip.Addr
	var at time.Time
	last := errors.New("no address in its status")
	waitFor(timeout, func() bool {
		if !vip.IsValid() {
			a, err := s.Kube.ServiceAddrs(ctx, KubeNamespace, name)
			if err != nil || len(a) == 0 {
				return false
			}
			vip, at = a[0], time.Now()
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, _, last = c.Get(rctx, vip)
		return last == nil
	})
	return vip, at, last
}

// newLBService returns a LoadBalancer Service of xlb's class in KubeNamespace: HTTP port 80 to
// the pods' target (a port of its own: see docs/datapath.md, Reverse NAT), selecting
// LabelApp: app.
func newLBService(name, app string, target int32, local bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: KubeNamespace},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:             ptr("xlb.dev/xdp"),
			AllocateLoadBalancerNodePorts: ptr(false),
			Selector:                      map[string]string{LabelApp: app},
			Ports: []corev1.ServicePort{{Name: "http", Port: PortHTTP, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(target)}},
		},
	}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return svc
}

// deleteService deletes a test's Service (and so its slices and VIP) when the test ends.
func deleteService(t *testing.T, s *Site, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Kube.Client.CoreV1().Services(KubeNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete service %s: %v", name, err)
		}
	})
}

// hit is one request of a load: when it ended, which pod and node answered, or its error.
type hit struct {
	at        time.Time
	took      time.Duration
	pod, node string
	err       error
}

// load sends HTTP requests to vip from client c, each on a new connection, one after the
// other and at most one per loadPace, until stop is called (at most maxRequests, for at most
// maxLoad), and records them. The pace keeps the count bound from ending a load early on a
// fast machine (CI once ran 50,000 requests out in 20 s, before the test was done with it).
type load struct {
	mu   sync.Mutex
	hits []hit
	stop chan struct{}
	done chan struct{}
}

const (
	maxRequests = 100000
	loadPace    = 2 * time.Millisecond
	maxLoad     = 3 * time.Minute
)

func startLoad(c *Client, vip netip.Addr) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		pace := time.NewTicker(loadPace)
		defer pace.Stop()
		deadline := time.After(maxLoad)
		for range maxRequests {
			select {
			case <-l.stop:
				return
			case <-deadline:
				return
			case <-pace.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), IOTimeout)
			began := time.Now()
			a, _, err := c.Get(ctx, vip)
			cancel()
			l.mu.Lock()
			l.hits = append(l.hits, hit{at: time.Now(), took: time.Since(began), pod: a.Pod, node: a.Node, err: err})
			l.mu.Unlock()
		}
	}()
	return l
}

// end stops the load and returns every request.
func (l *load) end() []hit {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return l.snapshot()
}

func (l *load) snapshot() []hit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hits)
}

// waitFor polls cond every 10 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// slowest returns the longest request.
func slowest(hits []hit) time.Duration {
	var m time.Duration
	for _, h := range hits {
		m = max(m, h.took)
	}
	return m
}

func failures(hits []hit) (n int, first error) {
	for _, h := range hits {
		if h.err != nil {
			if n == 0 {
				first = h.err
			}
			n++
		}
	}
	return n, first
}

func countBy(hits []hit, key func(hit) string) map[string]int {
	out := map[string]int{}
	for _, h := range hits {
		if h.err == nil {
			out[key(h)]++
		}
	}
	return out
}

// testNewService: a Service created through the API becomes reachable from the client, through
// the router's BGP route, within 2 s of its creation: the leader allocates its VIP and writes
// its status, the lab (as the EndpointSlice controller) gives it slices, both gateways model
// it, program it and announce it, BIRD installs the route.
func testNewService(t *testing.T, s *Site) {
	ctx := t.Context()
	svc := newLBService("fresh", DefaultApp, TargetHTTP+3, false)
	created := time.Now()
	if _, err := s.Kube.Client.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteService(t, s, svc.Name)
	var vip netip.Addr
	var addrAt, routeAt time.Time
	c := s.Clients[0]
	var last error
	ok := waitFor(10*time.Second, func() bool {
		if !vip.IsValid() {
			a, err := s.Kube.ServiceAddrs(ctx, KubeNamespace, svc.Name)
			if err != nil || len(a) == 0 {
				return false
			}
			vip, addrAt = a[0], time.Now()
		}
		if routeAt.IsZero() && s.Opts.Routing.BGP() {
			if _, gws, _ := s.RouterRoute(vip); len(gws) > 0 {
				routeAt = time.Now()
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, _, last = c.Get(rctx, vip)
		return last == nil
	})
	reached := time.Since(created)
	if !ok {
		t.Fatalf("service %s (VIP %v) not reachable within 10s of its creation: %v", svc.Name, vip, last)
	}
	t.Logf("service %s/%s: VIP %s in its status %v after creation, in the router's route after %v, first successful request %v after creation",
		KubeNamespace, svc.Name, vip, addrAt.Sub(created).Round(time.Millisecond), routeAt.Sub(created).Round(time.Millisecond),
		reached.Round(time.Millisecond))
	if reached > 2*time.Second {
		t.Errorf("first successful request %v after the Service's creation, want ≤ 2s", reached.Round(time.Millisecond))
	}
	if _, gws, _ := s.RouterRoute(vip); s.Opts.Routing.BGP() && len(gws) == 0 {
		t.Errorf("the router has no route to %s", vip)
	}
}

// testScale: scaling a Service's pods through its EndpointSlices under a steady load of new
// connections. Two new pods join (ready): requests reach them. Then one of the first pods goes
// as Kubernetes removes a pod: terminating but still serving (no new flows), then gone from the
// slice, then stopped. Not one request fails.
func testScale(t *testing.T, s *Site) {
	ctx := t.Context()
	const app = "scale"
	labels := map[string]string{LabelApp: app}
	var first []*Pod
	for _, n := range s.Nodes {
		p, err := s.AddPodLabeled(n, labels)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, p)
	}
	svc := newLBService(app, app, TargetHTTP+4, false)
	if _, err := s.Kube.Client.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteService(t, s, svc.Name)
	vips, err := s.Kube.WaitServiceAddrs(KubeNamespace, app, serviceAddrTimeout)
	if err != nil {
		t.Fatal(err)
	}
	vip := vips[0]
	c := s.Clients[0]
	if !waitFor(10*time.Second, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, _, err := c.Get(rctx, vip)
		return err == nil
	}) {
		t.Fatalf("service %s at %s not reachable", app, vip)
	}

	l := startLoad(c, vip)
	defer l.end()
	time.Sleep(500 * time.Millisecond)
	mark := len(l.snapshot())
	var added []*Pod
	for _, n := range s.Nodes {
		p, err := s.AddPodLabeled(n, labels)
		if err != nil {
			t.Fatal(err)
		}
		added = append(added, p)
	}
	addedAt := time.Now()
	reached := func(p *Pod, from int) bool {
		return slices.ContainsFunc(l.snapshot()[from:], func(h hit) bool { return h.pod == p.Name })
	}
	if !waitFor(5*time.Second, func() bool { return reached(added[0], mark) && reached(added[1], mark) }) {
		t.Errorf("the new pods %s and %s got no request within 5s of joining the slices", added[0].Name, added[1].Name)
	}
	t.Logf("new pods %s, %s: both answered within %v of joining the slices", added[0].Name, added[1].Name,
		time.Since(addedAt).Round(time.Millisecond))
	time.Sleep(time.Second)

	gone := first[0]
	mark = len(l.snapshot())
	if err := s.SetPodState(gone, PodTerminating); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	// No new flows once the gateways have the terminating endpoint: wait for a quiet second.
	var lastHit time.Time
	waitFor(5*time.Second, func() bool {
		for _, h := range l.snapshot()[mark:] {
			if h.pod == gone.Name {
				lastHit = h.at
			}
		}
		return time.Since(later(lastHit, termAt)) > time.Second
	})
	if lastHit.IsZero() {
		t.Logf("pod %s (terminating): no new request after it was marked terminating", gone.Name)
	} else {
		t.Logf("pod %s (terminating): its last new request %v after it was marked terminating", gone.Name, lastHit.Sub(termAt).Round(time.Millisecond))
	}
	if err := s.SetPodState(gone, PodDeleted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	gone.StopServers()
	time.Sleep(time.Second)
	hits := l.end()
	n, firstErr := failures(hits)
	before := countBy(hits[:mark], func(h hit) string { return h.pod })
	after := countBy(hits[mark:], func(h hit) string { return h.pod })
	t.Logf("%d requests over %v, %d failed, slowest %v; per pod before the removal %v, after %v", len(hits),
		hits[len(hits)-1].at.Sub(hits[0].at).Round(time.Millisecond), n, slowest(hits).Round(time.Millisecond), before, after)
	if n > 0 {
		t.Errorf("%d of %d requests failed during the scaling; first: %v", n, len(hits), firstErr)
	}
	if tail := hits[len(hits)*9/10:]; slices.ContainsFunc(tail, func(h hit) bool { return h.pod == gone.Name }) {
		t.Errorf("pod %s still got new requests after it was removed", gone.Name)
	}
}

// testLocalHealth: externalTrafficPolicy: Local. Node n1's kube-proxy stops being healthy (its
// /healthz and the Service's healthCheckNodePort answer 503, as kube-proxy does when its rules
// are out of sync): n1's pods get no new flows of web-local within fall × interval (2 × 1 s)
// and a bit, established connections to them are not cut, and new requests keep being
// answered by n2's pods. When it is healthy again, new flows come back to n1.
func testLocalHealth(t *testing.T, s *Site) {
	ctx := t.Context()
	vips, err := s.Kube.WaitServiceAddrs(KubeNamespace, "web-local", serviceAddrTimeout)
	if err != nil {
		t.Fatal(err)
	}
	vip := vips[0]
	c := s.Clients[0]
	n1 := s.Nodes[0]
	// Long-lived connections, some of them on n1's pods.
	const conns = 40
	type open struct {
		hc  *HTTPConn
		pod string
	}
	var opened []open
	for i := range conns {
		hc, err := c.DialHTTP(ctx, vip)
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Close()
		a, err := hc.Get()
		if err != nil {
			t.Fatalf("connection %d from %s: %v", i, hc.Local(), err)
		}
		opened = append(opened, open{hc, a.Pod})
	}
	onN1 := 0
	for _, o := range opened {
		if s.Pod(o.pod).Node == n1 {
			onN1++
		}
	}
	if onN1 == 0 {
		t.Fatalf("none of %d connections is on %s's pods", conns, n1.Name)
	}

	l := startLoad(c, vip)
	defer l.end()
	time.Sleep(500 * time.Millisecond)
	proxy := s.Kube.Proxy(n1)
	mark := len(l.snapshot())
	proxy.SetHealthy(false)
	failedAt := time.Now()
	var lastN1 time.Time
	quiet := waitFor(10*time.Second, func() bool {
		for _, h := range l.snapshot()[mark:] {
			if h.node == n1.Name {
				lastN1 = h.at
			}
		}
		return time.Since(later(lastN1, failedAt)) > 1500*time.Millisecond
	})
	if !quiet {
		t.Errorf("%s's pods still get new flows 10s after its kube-proxy health failed", n1.Name)
	}
	reaction := time.Duration(0)
	if !lastN1.IsZero() {
		reaction = lastN1.Sub(failedAt)
	}
	t.Logf("%s's kube-proxy unhealthy (503): its pods' last new flow %v after (probe interval 1s, fall 2)", n1.Name, reaction.Round(time.Millisecond))

	kept := 0
	for _, o := range opened {
		a, err := o.hc.Get()
		switch {
		case err != nil:
			t.Errorf("connection on pod %s: %v", o.pod, err)
		case a.Pod != o.pod:
			t.Errorf("connection moved from pod %s to %s", o.pod, a.Pod)
		default:
			kept++
		}
	}
	t.Logf("%d/%d established connections (%d on %s's pods) still answered by their pods while %s was unhealthy", kept, conns, onN1, n1.Name, n1.Name)

	mark = len(l.snapshot())
	proxy.SetHealthy(true)
	healedAt := time.Now()
	var back time.Time
	if !waitFor(10*time.Second, func() bool {
		for _, h := range l.snapshot()[mark:] {
			if h.node == n1.Name {
				back = h.at
				return true
			}
		}
		return false
	}) {
		t.Errorf("no new flow to %s's pods within 10s of its kube-proxy being healthy again", n1.Name)
	} else {
		t.Logf("%s healthy again: first new flow to its pods %v after", n1.Name, back.Sub(healedAt).Round(time.Millisecond))
	}
	hits := l.end()
	n, firstErr := failures(hits)
	t.Logf("%d requests during the test, %d failed, slowest %v; per node %v", len(hits), n, slowest(hits).Round(time.Millisecond),
		countBy(hits, func(h hit) string { return h.node }))
	if n > 0 {
		t.Errorf("%d of %d requests failed; first: %v", n, len(hits), firstErr)
	}
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// testLeaderKilled: the leading gateway's xlb dies (SIGKILL) under a steady load on an existing
// Service. The other gateway takes the Lease (lab timings: leaseDuration 4 s, retryPeriod
// 0.5 s) and allocates the address of a Service created after the kill, which becomes
// reachable; not one request of the load fails (the dead xlb's pinned datapath keeps
// forwarding, graceful restart keeps its routes); the restarted xlb rejoins, as a follower, and
// announces the new VIP too.
func testLeaderKilled(t *testing.T, s *Site) {
	ctx := t.Context()
	holder := func() string {
		l, err := s.Kube.Client.CoordinationV1().Leases("xlb-system").Get(ctx, "xlb-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader, other *Gateway
	for _, g := range s.Gateways {
		if g.GatewayName() == holder() {
			leader = g
		} else {
			other = g
		}
	}
	if leader == nil || other == nil {
		t.Fatalf("lease holder %q is not one of two gateways %v", holder(), gatewayNames(s.Gateways))
	}
	web, err := s.Kube.WaitServiceAddrs(KubeNamespace, "web", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Clients[0]
	l := startLoad(c, web[0])
	defer l.end()
	time.Sleep(500 * time.Millisecond)

	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := leader.Start(); err != nil {
				t.Errorf("restart %s: %v", leader.Name, err)
			}
		}
	})
	svc := newLBService("after-leader", DefaultApp, TargetHTTP+5, false)
	if _, err := s.Kube.Client.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteService(t, s, svc.Name)
	vip, addrAt, last := waitServiceAnswers(ctx, s, c, svc.Name, 20*time.Second)
	if last != nil {
		t.Fatalf("service %s created after %s's xlb was killed: address %v, not reachable within 20 s: %v",
			svc.Name, leader.Name, vip, last)
	}
	addrAfter := addrAt.Sub(killed)
	reached := time.Since(killed)
	if h := holder(); h != other.GatewayName() {
		t.Errorf("lease holder after the kill: %q, want %s", h, other.GatewayName())
	}

	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	var rejoined time.Duration
	if s.Opts.Routing.BGP() {
		if rejoined, err = s.WaitRouterRoute(vip, 20*time.Second, s.Gateways...); err != nil {
			t.Error(err)
		}
	}
	hits := l.end()
	n, first := failures(hits)
	t.Logf("%s (leader) killed: %s holds the lease; service %s got %s %v after the kill, reachable %v after; %s restarted: the router routes the new VIP via both gateways %v later; load on web: %d requests, %d failed, slowest %v",
		leader.Name, other.Name, svc.Name, vip, addrAfter.Round(time.Millisecond), reached.Round(time.Millisecond),
		leader.Name, rejoined.Round(time.Millisecond), len(hits), n, slowest(hits).Round(time.Millisecond))
	if n > 0 {
		t.Errorf("%d of %d requests to web failed across the leader's death; first: %v", n, len(hits), first)
	}
	if len(hits) < 100 {
		t.Errorf("only %d requests in the load: the test proves little", len(hits))
	}
	if h := holder(); h != other.GatewayName() {
		t.Errorf("lease holder after %s came back: %q, want %s to keep it", leader.Name, h, other.GatewayName())
	}
}

// testClusterIPs: the node agents balance every example Service's cluster IPs (both families of
// the dual-stack one) over its pods, from pods on every node, without NAT; a Service added later
// is reached as soon as it has pods, and one without pods refuses connections.
func testClusterIPs(t *testing.T, s *Site) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svcs, err := s.Kube.ExampleServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, svc := range svcs {
		if !slices.Contains([]string{"web", "web-dual", "web-local"}, svc.Name) { // deploy/examples'
			continue // (the other subtests' Services may be on their way out)
		}
		for _, ip := range svc.Spec.ClusterIPs {
			dst := netip.AddrPortFrom(netip.MustParseAddr(ip), PortHTTP)
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Port == PortHTTP && p.Protocol == corev1.ProtocolTCP
			}) {
				continue
			}
			seen := map[string]bool{}
			for _, p := range s.Pods {
				for range 4 {
					a, err := s.podGet(p, dst)
					if err != nil {
						t.Fatalf("%s: %v", svc.Name, err)
					}
					seen[a.Pod] = true
				}
			}
			if len(seen) < 2 {
				t.Errorf("%s at %s: answered only by %v, want the requests spread over its pods", svc.Name, dst, seen)
			}
			checked++
		}
	}
	if checked < 4 {
		t.Errorf("checked %d cluster IP frontends, want the example Services' (at least 4)", checked)
	}
	// A pod reaching web's load balancer address goes straight to a pod too (the reply would
	// otherwise come back past the gateways' reverse NAT).
	for _, svc := range svcs {
		if svc.Name != "web" {
			continue
		}
		for _, vip := range ingressAddrs(&svc) {
			for _, p := range s.Pods {
				if _, err := s.podGet(p, netip.AddrPortFrom(vip, PortHTTP)); err != nil {
					t.Errorf("web's load balancer address from a pod: %v", err)
				}
			}
			checked++
		}
	}

	// A Service without pods refuses; once a pod has its label, it answers.
	svc := newLBService("agent-late", "agent-late", TargetHTTP+8, false)
	svc.Spec.Type, svc.Spec.LoadBalancerClass, svc.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeClusterIP, nil, nil
	created, err := s.Kube.Client.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteService(t, s, svc.Name)
	dst := netip.AddrPortFrom(netip.MustParseAddr(created.Spec.ClusterIP), PortHTTP)
	p := s.Pods[0]
	if !waitFor(10*time.Second, func() bool {
		_, err := s.podGet(p, dst)
		return err != nil && strings.Contains(err.Error(), "exit status 7") // curl: could not connect (refused at once)
	}) {
		t.Fatalf("%s at %s: the Service without pods does not refuse connections", svc.Name, dst)
	}
	pod, err := s.AddPodLabeled(s.Nodes[len(s.Nodes)-1], map[string]string{LabelApp: "agent-late"})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool {
		a, err := s.podGet(p, dst)
		return err == nil && a.Pod == pod.Name
	}) {
		t.Fatalf("%s at %s: the new pod %s does not answer", svc.Name, dst, pod.Name)
	}
}

// TestKubernetesProxyIPMode: with the gateways writing ipMode: Proxy, a pod reaching a Service's
// load balancer address goes through a gateway (the node agent's socket load balancer leaves
// Proxy addresses alone), and in the DSR mode it is answered: the chosen pod's node rewrites
// the reply to come from the VIP, also when the chosen pod is on the asking pod's own node
// (the reply never leaves the node). The asking pods (one per node) are none of web's: a pod
// whose connection to the VIP lands on itself cannot be answered (its reply never leaves it;
// docs/dsr.md). Each asks 10 times per address; every answer comes from a pod that saw the
// asking pod's address, and the gateways forwarded the requests.
func TestKubernetesProxyIPMode(t *testing.T) {
	if EnvReturnPath() {
		t.Skip("XLB_LAB_FORWARDING=returnPath: ipMode Proxy needs the replies translated at the pods' nodes (DSR)")
	}
	s := kubeSiteWith(t, Options{ProxyIPMode: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var askers []*Pod
	for _, n := range s.Nodes {
		p, err := s.AddPodLabeled(n, map[string]string{LabelApp: "proxy-client"})
		if err != nil {
			t.Fatal(err)
		}
		askers = append(askers, p)
	}
	svcs, err := s.Kube.ExampleServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fwd0 := reasons(t, s, "nat_forward")
	sameNode, otherNode, asked := 0, 0, 0
	for _, svc := range svcs {
		if svc.Name != "web" {
			continue
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeProxy {
				t.Errorf("web's ingress %s: ipMode %v, want Proxy", in.IP, in.IPMode)
			}
		}
		for _, vip := range ingressAddrs(&svc) {
			for _, p := range askers {
				for range 10 {
					asked++
					a, err := s.podGet(p, netip.AddrPortFrom(vip, PortHTTP))
					if err != nil {
						t.Errorf("web's load balancer address %s from pod %s: %v", vip, p.Name, err)
						continue
					}
					if a.Node == p.Node.Name {
						sameNode++
					} else {
						otherNode++
					}
				}
			}
		}
	}
	fwd := sub(reasons(t, s, "nat_forward"), fwd0)
	t.Logf("%d requests from pods to web's load balancer addresses: %d answered on the asking pod's node, %d on another; gateways forwarded %v packets",
		asked, sameNode, otherNode, fwd)
	if asked < 10*len(askers) {
		t.Fatalf("asked %d times, want every asking pod to ask each of web's addresses", asked)
	}
	if sameNode == 0 || otherNode == 0 {
		t.Errorf("answers on the same node %d, on another %d: want both cases", sameNode, otherNode)
	}
	if fwd[0]+fwd[1] < float64(asked) {
		t.Errorf("the gateways forwarded %v packets for %d requests: the requests did not go through them", fwd, asked)
	}
}
