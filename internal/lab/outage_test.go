// SPDX-License-Identifier: Apache-2.0
package lab

// An apiserver outage: the gateways keep forwarding, health-checking and announcing
// on what they last knew; nothing is withdrawn; the controller catches up when the apiserver is
// back.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// outageFor is how long the apiserver is out.
const outageFor = 30 * time.Second

// testAPIServerOutage: the apiserver hangs (SIGSTOP) for outageFor under a steady load on web.
// Meanwhile every VIP stays in the router's ECMP route via both gateways (polled every 250 ms),
// not one request fails, and the gateways' health checks go on: n1's kube-proxy turns unhealthy
// and healthy again, and both gateways see it. The leader cannot renew its Lease and follows,
// which changes nothing that serves. Once the apiserver is back, a Service created then gets its
// address and is reachable.
func testAPIServerOutage(t *testing.T, s *Site) {
	ctx := t.Context()
	web, err := s.Kube.WaitServiceAddrs(KubeNamespace, "web", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	vips := []netip.Addr{web[0]}
	if local, err := s.Kube.WaitServiceAddrs(KubeNamespace, "web-local", 10*time.Second); err == nil {
		vips = append(vips, local[0])
	}
	for _, vip := range vips {
		if _, err := s.WaitRouterRoute(vip, 10*time.Second, s.Gateways...); err != nil {
			t.Fatal(err)
		}
	}
	c := s.Clients[0]
	l := startLoad(c, web[0])
	defer l.end()
	time.Sleep(500 * time.Millisecond)

	if err := s.Kube.CP.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = s.Kube.CP.Resume()
		}
	})
	// Announcements: polled until the end of the outage.
	polls, missing := 0, 0
	var firstMissing string
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for time.Since(paused) < outageFor {
			for _, vip := range vips {
				route, gws, err := s.RouterRoute(vip)
				polls++
				if err != nil || !sameGateways(gws, s.Gateways) {
					missing++
					if firstMissing == "" {
						firstMissing = fmt.Sprintf("%v after the outage began: %s %q %v", time.Since(paused).Round(time.Millisecond), vip, route, err)
					}
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	// Health checks: n1's kube-proxy fails and recovers while the apiserver is out.
	n1 := s.Nodes[0]
	proxy := s.Kube.Proxy(n1)
	base := unhealthyBackends(t, s)
	time.Sleep(3 * time.Second)
	proxy.SetHealthy(false)
	sawDown := waitFor(10*time.Second, func() bool {
		now := unhealthyBackends(t, s)
		return now[0] > base[0] && now[1] > base[1]
	})
	proxy.SetHealthy(true)
	sawUp := waitFor(10*time.Second, func() bool {
		now := unhealthyBackends(t, s)
		return now[0] == base[0] && now[1] == base[1]
	})
	if !sawDown || !sawUp {
		t.Errorf("apiserver out: the gateways' health checks did not follow n1's kube-proxy (down seen %v, up seen %v)", sawDown, sawUp)
	}
	<-watchDone
	if err := s.Kube.CP.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	back := time.Now()
	hits := l.snapshot()
	n, first := failures(hits)
	t.Logf("apiserver out for %v: %d route polls, %d without both gateways; n1's kube-proxy down and up seen by both gateways: %v/%v; load on web: %d requests, %d failed, slowest %v",
		outageFor, polls, missing, sawDown, sawUp, len(hits), n, slowest(hits).Round(time.Millisecond))
	if missing > 0 {
		t.Errorf("a VIP left the router's ECMP route during the outage (%d of %d polls), first: %s", missing, polls, firstMissing)
	}
	if n > 0 {
		t.Errorf("%d of %d requests failed during the outage; first: %v", n, len(hits), first)
	}

	// The controller catches up: a Service created now is allocated and reachable.
	svc := newLBService("after-outage", DefaultApp, TargetHTTP+6, false)
	var created time.Duration
	if !waitFor(30*time.Second, func() bool {
		_, err := s.Kube.Client.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{})
		created = time.Since(back)
		return err == nil
	}) {
		t.Fatal("the apiserver did not take a Service within 30 s of its return")
	}
	deleteService(t, s, svc.Name)
	vip, _, last := waitServiceAnswers(ctx, s, c, svc.Name, 30*time.Second)
	if last != nil {
		t.Fatalf("service %s created after the outage: address %v, not reachable within 30 s: %v", svc.Name, vip, last)
	}
	hits = l.end()
	n, first = failures(hits)
	t.Logf("apiserver back: a Service created %v after got %s, reachable %v after the return; whole test: %d requests, %d failed",
		created.Round(time.Millisecond), vip, time.Since(back).Round(time.Millisecond), len(hits), n)
	if n > 0 {
		t.Errorf("%d of %d requests failed; first: %v", n, len(hits), first)
	}
}

// unhealthyBackends returns, per gateway, how many of its health-checked backends and node
// checks are unhealthy (xlb_backend_healthy, xlb_node_healthy 0).
func unhealthyBackends(t *testing.T, s *Site) []int {
	t.Helper()
	out := make([]int, len(s.Gateways))
	for i, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"xlb_backend_healthy", "xlb_node_healthy"} {
			for _, smp := range m.Samples(name) {
				if smp.Value == 0 {
					out[i]++
				}
			}
		}
	}
	return out
}
