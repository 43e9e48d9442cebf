// SPDX-License-Identifier: Apache-2.0
package lab

// The BGP tests: the router runs BIRD (Routing BIRD) or FRR (Routing FRR) and learns the VIPs
// from the gateways' xlb (eBGP, an IPv4 and an IPv6 session per gateway, graceful restart 30 s,
// withdrawOnExit). Each BIRD test builds its own site; TestBGPFRR runs the same checks, and two
// more, as subtests of one FRR site (each leaves it as it found it).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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

func needFRR(t *testing.T) {
	t.Helper()
	_, err1 := os.Stat(FRRDir + "/bgpd")
	_, err2 := exec.LookPath("vtysh")
	if err1 != nil || err2 != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs FRR (make deps installs frr)")
		}
		t.Skip("needs FRR (frr)")
	}
}

// TestBGPFRR runs the BGP tests with FRR as the router, on one site: ECMP into the router's
// kernel (multipath), the IPv6 VIP, withdrawal when every backend fails its health check,
// withdrawal on a clean stop, graceful restart after kill -9, and a peer with the wrong TCP MD5
// password that never comes up while the others stay up.
func TestBGPFRR(t *testing.T) {
	needFRR(t)
	s := NewT(t, Options{XLB: xlbBin, Routing: FRR})
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Site)
	}{
		{"ECMP", bgpECMP}, {"IPv6", bgpIPv6}, {"HealthWithdraw", bgpHealthWithdraw},
		{"Withdraw", bgpWithdraw}, {"GracefulRestart", bgpKillRestart}, {"Password", bgpPassword},
	} {
		if !t.Run(c.name, func(t *testing.T) { c.fn(t, s) }) {
			return // the site may be left in any state
		}
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
	bgpECMP(t, NewT(t, Options{XLB: xlbBin, Routing: BIRD}))
}

func bgpECMP(t *testing.T, s *Site) {
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		route, gws, err := s.RouterRoute(vip)
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) != 2 || !strings.Contains(route, "proto "+s.Opts.Routing.KernelProto()) {
			t.Fatalf("router's route to %s: %q, want one %v route with 2 next hops", vip, route, s.Opts.Routing)
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
	bgpWithdraw(t, NewT(t, Options{XLB: xlbBin, Routing: BIRD}))
}

func bgpWithdraw(t *testing.T, s *Site) {
	g1, g2 := s.Gateways[0], s.Gateways[1]
	if s.datapathKind(g1) == "afxdp" {
		// Only with XLB_LAB_DATAPATH=afxdp: a stopped AF_XDP gateway no longer translates the
		// replies the nodes still route through it (docs/afxdp.md).
		t.Skip("a stopped AF_XDP gateway stops translating replies: the connections whose replies route through it break")
	}
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
// alone where the router keeps a graceful restart going when BFD then goes down too (FRR:
// graceful restart, 30 s: both next hops still there 2 s later, the datapath pinned in the
// kernel keeps forwarding), or takes the gateway out of ECMP where it does not (BIRD: xlb's BFD
// dies with the process, and BIRD ends the graceful restart on BFD down, docs/bgp.md); that 100
// open connections keep their pods either way; and that a restarted xlb gets its BGP session
// back (time measured) with both next hops in place.
func TestBGPGracefulRestart(t *testing.T) {
	needBIRD(t)
	bgpKillRestart(t, NewT(t, Options{XLB: xlbBin, Routing: BIRD}))
}

func bgpKillRestart(t *testing.T, s *Site) {
	g1, g2 := s.Gateways[0], s.Gateways[1]
	if s.datapathKind(g1) == "afxdp" {
		// Only with XLB_LAB_DATAPATH=afxdp (docs/afxdp.md).
		t.Skip("a killed AF_XDP gateway stops forwarding while graceful restart keeps its routes: nothing to prove")
	}
	waitBFDUp(t, s) // what BIRD does after the kill depends on it (below)
	cs := openConns(t, s.Clients[0], 100)
	t.Logf("100 connections over pods %v", cs.byPod())
	if err := g1.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	time.Sleep(2 * time.Second)
	want, why := []*Gateway{g1, g2}, "both gateways (graceful restart)"
	if s.Opts.Routing == BIRD {
		want, why = []*Gateway{g2}, "g2 only (BIRD ends the graceful restart when BFD goes down)"
	}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		route, gws, err := s.RouterRoute(vip)
		if err != nil {
			t.Fatal(err)
		}
		if !sameGateways(gws, want) {
			t.Fatalf("%v after kill -9: router's route to %s is %q, want %s",
				time.Since(killed).Round(time.Millisecond), vip, route, why)
		}
	}
	t.Logf("%v after kill -9 of g1's xlb: the router's routes to both VIPs have %s",
		time.Since(killed).Round(time.Millisecond), why)
	if out, err := s.routerSessions(); err == nil {
		t.Logf("the router's sessions:\n%s", out)
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
	bgpIPv6(t, NewT(t, Options{XLB: xlbBin, Routing: BIRD}))
}

func bgpIPv6(t *testing.T, s *Site) {
	route, gws, err := s.RouterRoute(VIP6)
	if err != nil {
		t.Fatal(err)
	}
	if len(gws) != 2 || !strings.Contains(route, VIP6.String()) || !strings.Contains(route, " proto "+s.Opts.Routing.KernelProto()+" ") {
		t.Fatalf("router's route to %s: %q, want a %v /128 with 2 next hops", VIP6, route, s.Opts.Routing)
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

// bgpHealthWithdraw proves that when every backend fails its health check, the gateways
// withdraw the VIPs within a bound (the router has no route left to either), and that both
// gateways announce them again once the pods answer. The bound is the detection time, (fall + 1)
// intervals with their 10% jitter (the first failing probe may come up to an interval after the
// stop; the probe timeout is within the interval), and 2 s for the reconcile, the withdrawal and
// the router on a loaded machine.
func bgpHealthWithdraw(t *testing.T, s *Site) {
	pods := s.Backends()
	t.Cleanup(func() {
		for _, p := range pods {
			_ = p.StartServers()
		}
	})
	bound := 3*s.Opts.HealthInterval*11/10 + 2*time.Second // fall 2 (ConfigYAML)
	stopped := time.Now()
	for _, p := range pods {
		p.StopServers()
	}
	var took [2]time.Duration
	for i, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, bound); err != nil {
			t.Fatal(err)
		}
		took[i] = time.Since(stopped)
	}
	if took[1] > bound {
		t.Errorf("withdrawn %v after the backends stopped, want within (fall+1)×interval×1.1+2s = %v", took[1], bound)
	}
	t.Logf("every backend down: both VIPs gone from the router after %v (IPv4), %v (IPv6); bound (fall+1)×interval×1.1+2s = %v",
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), bound)
	started := time.Now()
	for _, p := range pods {
		if err := p.StartServers(); err != nil {
			t.Fatal(err)
		}
	}
	for i, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, bound, s.Gateways...); err != nil {
			t.Fatal(err)
		}
		took[i] = time.Since(started)
	}
	t.Logf("pods back: both VIPs via both gateways again after %v (IPv4), %v (IPv6) (rise 1, interval %v)",
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), s.Opts.HealthInterval)
	// A VIP is announced again with its first healthy backend: wait for all of them, on every
	// gateway, so that both gateways' Maglev tables are whole again for the tests that follow.
	waitServing(t, s, len(pods))
	t.Logf("every frontend of both gateways serves %d backends again %v after the pods came back",
		len(pods), time.Since(started).Round(time.Millisecond))
	if _, _, err := s.Clients[0].Get(context.Background(), VIP4); err != nil {
		t.Fatal(err)
	}
}

// xlbPeer is one session of an xlb's /bgp.
type xlbPeer struct {
	Address, State, Since, LastError string
}

// xlbPeers reads g's /bgp: its sessions by address.
func xlbPeers(t *testing.T, g *Gateway) map[string]xlbPeer {
	t.Helper()
	code, body, err := g.HTTPGet("/bgp")
	if err != nil || code != 200 {
		t.Fatalf("%s: GET /bgp: %d %v", g.Name, code, err)
	}
	var st struct{ Peers []xlbPeer }
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%s: /bgp: %v", g.Name, err)
	}
	out := map[string]xlbPeer{}
	for _, p := range st.Peers {
		out[p.Address] = p
	}
	return out
}

// bgpPassword proves that a session with the wrong TCP MD5 password never comes up, that xlb
// says why (the peer's last error in /bgp and in its log, xlb_bgp_session_up 0), and that the
// gateway's other sessions are not touched. g1 gets a third peer: the router's second address
// on g1's link (.3), from g1's second address there (.4); the router wants the password
// "right" from it, g1 has "wrong". All of it is undone at the end.
func bgpPassword(t *testing.T, s *Site) {
	g1 := s.Gateways[0]
	gw4, r4, _, _ := upstreamAddrs(g1.Index)
	rb, gb := r4.Next().Next(), gw4.Next().Next()
	if err := ipc(s.Router.NS, fmt.Sprintf("addr add %s/24 dev %s", rb, g1.Name)); err != nil {
		t.Fatal(err)
	}
	if err := ipc(g1.NS, fmt.Sprintf("addr add %s/24 dev up0", gb)); err != nil {
		t.Fatal(err)
	}
	neighbor := func(cmd string) error {
		switch s.Opts.Routing {
		case FRR:
			return s.VTYSHConfig(fmt.Sprintf("router bgp %d", RouterASN), cmd)
		}
		return fmt.Errorf("bgpPassword: routing %v", s.Opts.Routing)
	}
	if err := neighbor(fmt.Sprintf("neighbor %s peer-group gw4", gb)); err != nil {
		t.Fatal(err)
	}
	if err := neighbor(fmt.Sprintf("neighbor %s password right", gb)); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(s.Dir, "g1-wrong.pw")
	if err := os.WriteFile(pw, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g1.WriteConfig(s.ConfigYAML(g1, s.Backends())); err == nil {
			_ = g1.Reload()
		}
		_ = neighbor("no neighbor " + gb.String())
		_ = ipc(g1.NS, fmt.Sprintf("addr del %s/24 dev up0", gb))
		_ = ipc(s.Router.NS, fmt.Sprintf("addr del %s/24 dev %s", rb, g1.Name))
	})
	// Every existing session up first (the IPv6 one may still be coming up after an earlier
	// subtest): a session that comes up meanwhile is not one the reload touched.
	var before map[string]xlbPeer
	upBy := time.Now().Add(bgpUpTimeout)
	for {
		before = xlbPeers(t, g1)
		all := true
		for _, p := range before {
			all = all && p.State == "established"
		}
		if all {
			break
		}
		if time.Now().After(upBy) {
			t.Fatalf("g1's sessions not all established within %v: %+v", bgpUpTimeout, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1100 * time.Millisecond) // establishment times are whole seconds: make a reset visible
	cfg := s.ConfigYAML(g1, s.Backends()) + fmt.Sprintf(
		"    - {address: %s, asn: %d, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, localAddress: %s, passwordFile: %s}\n",
		rb, RouterASN, gb, pw)
	if err := g1.WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	if err := g1.Reload(); err != nil {
		t.Fatal(err)
	}
	var bad xlbPeer
	deadline := time.Now().Add(bgpUpTimeout)
	for {
		bad = xlbPeers(t, g1)[rb.String()]
		if bad.LastError != "" && strings.Contains(g1.Log(), "bgp session error\" peer="+rb.String()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error for the peer with the wrong password within %v: %+v", bgpUpTimeout, bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("wrong password: after %v, /bgp says state %s, last error %q", time.Since(reloaded).Round(time.Millisecond), bad.State, bad.LastError)
	for _, line := range strings.Split(g1.Log(), "\n") {
		if strings.Contains(line, "bgp session error\" peer="+rb.String()) {
			t.Logf("xlb log: %s", line)
			break
		}
	}
	m, err := g1.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if up := m.Samples("xlb_bgp_session_up", "peer", rb.String()); len(up) != 1 || up[0].Value != 0 {
		t.Errorf("xlb_bgp_session_up{peer=%q}: %v, want one sample, 0", rb, up)
	}
	if bad.State == "established" {
		t.Errorf("the session with the wrong password is established")
	}
	if out, err := s.VTYSH("show bgp neighbors " + gb.String()); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "BGP state =") {
				t.Logf("router: neighbor %s: %s", gb, strings.TrimSpace(line))
				if strings.Contains(line, "Established") {
					t.Errorf("the router has the session with the wrong password established")
				}
			}
		}
	}
	after := xlbPeers(t, g1)
	for addr, p := range before {
		if q := after[addr]; q.State != "established" || q.Since != p.Since {
			t.Errorf("g1's session to %s: %+v before, %+v after: touched", addr, p, q)
		}
	}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, gws, err := s.RouterRoute(vip); err != nil || len(gws) != 2 {
			t.Errorf("router's route to %s: next hops %v (%v), want both gateways", vip, gatewayNames(gws), err)
		}
	}
	t.Logf("g1's other sessions untouched (established since %s and %s), the router's routes via both gateways",
		before[r4.String()].Since, before[upstreamV6(g1.Index).String()].Since)
}

func upstreamV6(g int) netip.Addr {
	_, _, _, r6 := upstreamAddrs(g)
	return r6
}

// waitServing waits until every frontend of every gateway has n backends taking new flows
// (xlb_frontend_serving_backends), within 10 s.
func waitServing(t *testing.T, s *Site, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, g := range s.Gateways {
			m, err := g.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			smp := m.Samples("xlb_frontend_serving_backends")
			ok = ok && len(smp) > 0
			for _, x := range smp {
				ok = ok && x.Value == float64(n)
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every frontend of every gateway serves %d backends within 10s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
