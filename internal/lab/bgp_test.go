package lab

// The BGP tests: the router runs BIRD (Routing BIRD) and learns the VIPs from the gateways' xlb
// (eBGP, an IPv4 and an IPv6 session per gateway, graceful restart 30 s, withdrawOnExit).

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func needBIRD(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bird"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs bird (make deps installs bird2)")
		}
		t.Skip("needs bird (bird2)")
	}
}

// sessionUp reports whether g's xlb says its IPv4 session to the router is up.
func sessionUp(g *Gateway) bool {
	m, err := g.Metrics()
	if err != nil {
		return false
	}
	_, r4, _, _ := upstreamAddrs(g.Index)
	return m.Sum("xlb_bgp_session_up", "peer", r4.String()) == 1
}

// TestBGPECMP proves that the router learns the VIPs from both gateways over BGP and installs
// one ECMP route per VIP with both gateways as next hops (IPv4 /32 and IPv6 /128), and that
// client traffic flows through both gateways: 200 new connections (both families) all answered,
// and both gateways' per-VIP packet counters grow.
func TestBGPECMP(t *testing.T) {
	needBIRD(t)
	s := NewT(t, Options{XLB: xlbBin, Routing: BIRD})
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		route, gws, err := s.RouterRoute(vip)
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) != 2 || !strings.Contains(route, "proto bird") {
			t.Fatalf("router's route to %s: %q, want one BIRD route with 2 next hops", vip, route)
		}
		t.Logf("router's route to %s: %s", vip, strings.Join(strings.Fields(route), " "))
	}
	for _, g := range s.Gateways {
		if !sessionUp(g) {
			t.Errorf("%s: xlb_bgp_session_up is not 1", g.Name)
		}
	}
	before := vipPackets(t, s)
	pods, _, errs := gets(s.Clients[0], 200, 16, false)
	d := sub(vipPackets(t, s), before)
	if len(errs) > 0 {
		t.Fatalf("%d of 200 requests failed; first: %v", len(errs), errs[0])
	}
	byPod := map[string]int{}
	for _, p := range pods {
		byPod[p]++
	}
	t.Logf("200 new connections (IPv4+IPv6) all answered, pods %v; VIP packets g1 %v, g2 %v", byPod, d[0], d[1])
	if d[0] == 0 || d[1] == 0 {
		t.Errorf("a gateway carried no VIP traffic (%v): the router did not spread over both", d)
	}
}

// TestBGPWithdraw proves that a clean stop of one gateway's xlb (SIGTERM, withdrawOnExit) takes
// its next hop out of the router's route (time measured), that 100 open TCP connections all
// survive on their pods (the flows via g1 are now hashed to g2, which picks the same pod:
// Maglev), and that the next hop comes back when xlb starts again.
func TestBGPWithdraw(t *testing.T) {
	needBIRD(t)
	s := NewT(t, Options{XLB: xlbBin, Routing: BIRD})
	g1, g2 := s.Gateways[0], s.Gateways[1]
	cs := openConns(t, s.Clients[0], 100)
	before := vipPackets(t, s)
	cs.checkRound(t, "both gateways")
	d := sub(vipPackets(t, s), before)
	t.Logf("100 connections over pods %v; VIP packets g1 %v, g2 %v", cs.byPod(), d[0], d[1])

	// The router's routes are watched while xlb stops (it withdraws, then exits).
	stopped := time.Now()
	stopErr := make(chan error, 1)
	var exited time.Duration
	go func() { err := g1.Stop(); exited = time.Since(stopped); stopErr <- err }()
	var took [2]time.Duration
	for i, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 5*time.Second, g2); err != nil {
			<-stopErr
			t.Fatal(err)
		}
		took[i] = time.Since(stopped)
	}
	if err := <-stopErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGTERM to g1's xlb: g1 out of the router's route after %v (IPv4), %v (IPv6); xlb exited after %v",
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), exited.Round(time.Millisecond))
	before2 := vipPackets2(t, g2)
	cs.checkRound(t, "g1 withdrawn")
	t.Logf("g1 withdrawn: 100 of 100 connections answered by their pods, through g2 (%v VIP packets there)", vipPackets2(t, g2)-before2)

	started := time.Now()
	if err := g1.Start(); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(started)
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, bgpUpTimeout, g1, g2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("g1's xlb started: ready after %v, back in the router's route after %v",
		ready.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	cs.checkRound(t, "g1 back")
}

func vipPackets2(t *testing.T, g *Gateway) float64 {
	t.Helper()
	m, err := g.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("xlb_vip_packets_total")
}

// TestBGPGracefulRestart proves that kill -9 of one gateway's xlb leaves the router's route
// alone (graceful restart, 30 s: both next hops still there 2 s later, the datapath pinned in
// the kernel keeps forwarding), that 100 open connections keep their pods, and that a restarted
// xlb gets its BGP session back (time measured) with both next hops still in place.
func TestBGPGracefulRestart(t *testing.T) {
	needBIRD(t)
	s := NewT(t, Options{XLB: xlbBin, Routing: BIRD})
	g1, g2 := s.Gateways[0], s.Gateways[1]
	cs := openConns(t, s.Clients[0], 100)
	t.Logf("100 connections over pods %v", cs.byPod())
	if err := g1.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	time.Sleep(2 * time.Second)
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		route, gws, err := s.RouterRoute(vip)
		if err != nil {
			t.Fatal(err)
		}
		if !sameGateways(gws, []*Gateway{g1, g2}) {
			t.Fatalf("%v after kill -9: router's route to %s is %q, want both gateways (graceful restart)",
				time.Since(killed).Round(time.Millisecond), vip, route)
		}
	}
	t.Logf("%v after kill -9 of g1's xlb: the router's routes to both VIPs still have both next hops",
		time.Since(killed).Round(time.Millisecond))
	if out, err := s.BIRDC("show", "protocols"); err == nil {
		t.Logf("birdc show protocols:\n%s", out)
	}
	cs.checkRound(t, "g1's xlb dead")
	started := time.Now()
	if err := g1.Start(); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(started)
	deadline := time.Now().Add(bgpUpTimeout)
	for !sessionUp(g1) {
		if time.Now().After(deadline) {
			t.Fatalf("g1's BGP session not up within %v of the restart", bgpUpTimeout)
		}
		time.Sleep(routePollInterval)
	}
	t.Logf("g1's xlb restarted %v after the kill: ready after %v, BGP session up after %v",
		started.Sub(killed).Round(time.Millisecond), ready.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 5*time.Second, g1, g2); err != nil {
			t.Fatal(err)
		}
	}
	cs.checkRound(t, "g1's xlb restarted")
	t.Logf("100 of 100 connections kept their pods through the kill and the restart")
}

// TestBGPIPv6 proves that the IPv6 VIP is announced over the IPv6 sessions (a /128 via both
// gateways' IPv6 upstream addresses) and reachable: 20 HTTP requests and a ping to it.
func TestBGPIPv6(t *testing.T) {
	needBIRD(t)
	s := NewT(t, Options{XLB: xlbBin, Routing: BIRD})
	route, gws, err := s.RouterRoute(VIP6)
	if err != nil {
		t.Fatal(err)
	}
	if len(gws) != 2 || !strings.Contains(route, VIP6.String()+" proto bird") {
		t.Fatalf("router's route to %s: %q, want a BIRD /128 with 2 next hops", VIP6, route)
	}
	for i := range 20 {
		if _, _, err := s.Clients[0].Get(context.Background(), VIP6); err != nil {
			t.Fatalf("request %d to %s: %v", i, VIP6, err)
		}
	}
	rtt, err := s.Clients[0].Ping(VIP6)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s; 20 of 20 HTTP requests answered, ping %v", VIP6, strings.Join(strings.Fields(route), " "), rtt)
}
