// SPDX-License-Identifier: Apache-2.0
package lab

// Hard gateway failure with BFD: a gateway dies without a word, the router takes it
// out of ECMP within BFD's detection time (300 ms × 3), and every connection that crossed it
// carries on through the other gateway, to the same pod (every gateway computes the same Maglev
// tables; direct server return: the replies never crossed a gateway). Then it comes back and
// rejoins ECMP without breaking anything. Then the same failure without BFD, for comparison:
// the router notices at the hold time.

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGatewayHardFailure runs the failure against BIRD; TestGatewayHardFailureFRR against FRR.
func TestGatewayHardFailure(t *testing.T) {
	needBIRD(t)
	gatewayHardFailure(t, NewT(t, Options{XLB: xlbBin, Routing: BIRD}))
}

func TestGatewayHardFailureFRR(t *testing.T) {
	needFRR(t)
	gatewayHardFailure(t, NewT(t, Options{XLB: xlbBin, Routing: FRR}))
}

// failoverConns is how many long-lived connections cross the gateways during the failure.
const failoverConns = 200

func gatewayHardFailure(t *testing.T, s *Site) {
	g1, g2 := s.Gateways[0], s.Gateways[1]
	if s.datapathKind(g2) == "afxdp" {
		t.Skip("a stopped AF_XDP gateway stops forwarding: the failure is not silent")
	}
	waitBFDUp(t, s)
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 30*time.Second, g1, g2); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := s.RouterBFD(); err == nil {
		t.Logf("the router's BFD sessions:\n%s", out)
	}
	c := s.Clients[0]
	cs := openConns(t, c, failoverConns)
	before := vipPackets(t, s)
	cs.checkRound(t, "both gateways")
	d := sub(vipPackets(t, s), before)
	t.Logf("%d connections over pods %v; one round: VIP packets g1 %v, g2 %v", failoverConns, cs.byPod(), d[0], d[1])
	if d[0] == 0 || d[1] == 0 {
		t.Fatalf("the connections do not cross both gateways (VIP packets %v)", d)
	}

	l := startLoad(c, VIP4)
	defer l.end()
	time.Sleep(time.Second)
	mark := len(l.snapshot())

	// g2 dies.
	if err := g2.Vanish(); err != nil {
		t.Fatal(err)
	}
	vanished := time.Now()
	t.Cleanup(func() { _ = g2.Return() })
	// The long-lived connections make a request each meanwhile: those that crossed g2 wait for
	// the router to move them (TCP retransmissions).
	gaps := make(chan []time.Duration, 1)
	go func() { gaps <- timedRound(cs) }()
	var fib [2]time.Duration
	for i, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 10*time.Second, g1); err != nil {
			t.Fatal(err)
		}
		fib[i] = time.Since(vanished)
	}
	lat := <-gaps
	time.Sleep(2 * time.Second)
	hits := l.snapshot()[mark:]
	window, failed, slow := lossWindow(hits, vanished)
	t.Logf("g2 vanished: out of the router's FIB after %v (IPv4 VIP), %v (IPv6 VIP); new connections meanwhile: %d requests, %d failed, %d slower than 100 ms, loss window %v",
		fib[0].Round(time.Millisecond), fib[1].Round(time.Millisecond), len(hits), failed, slow, window.Round(time.Millisecond))
	broken, gap, delayed := summarize(cs, lat)
	t.Logf("g2 vanished: %d of %d open connections broken; %d waited for the reroute, the longest %v (TCP retransmission)",
		broken, failoverConns, delayed, gap.Round(time.Millisecond))
	if broken > 0 {
		t.Errorf("%d connections broke when g2 vanished (Maglev consistency: they should carry on through g1)", broken)
	}
	if fib[0] > 3*time.Second || fib[1] > 3*time.Second {
		t.Errorf("the router moved the VIPs off the dead gateway after %v / %v: BFD (0.9 s) did not do it", fib[0], fib[1])
	}
	if failed > 0 {
		t.Errorf("%d requests failed while g2 was dead", failed)
	}
	cs.checkRound(t, "g2 dead, through g1")

	// g2 comes back.
	if err := g2.Return(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	mark = len(l.snapshot())
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 30*time.Second, g1, g2); err != nil {
			t.Fatal(err)
		}
	}
	rejoined := time.Since(back)
	cs.checkRound(t, "g2 back")
	time.Sleep(time.Second)
	hits = l.end()
	n, firstErr := failures(hits[mark:])
	t.Logf("g2 back: in the router's ECMP routes again after %v; %d of %d open connections kept their pods; %d of %d new requests failed",
		rejoined.Round(time.Millisecond), failoverConns, failoverConns, n, len(hits)-mark)
	if n > 0 {
		t.Errorf("%d requests failed while g2 rejoined; first: %v", n, firstErr)
	}

	// The same failure without BFD: its packets to and from g2 dropped at the router first, so
	// that g2's sessions run on their hold timers (9 s).
	lift, err := g2.DropBFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lift() })
	if !waitFor(30*time.Second, func() bool {
		m, err := g2.Metrics()
		if err != nil || m.Sum("xlb_bfd_session_up") != 0 {
			return false
		}
		for _, vip := range []netip.Addr{VIP4, VIP6} {
			if _, gws, err := s.RouterRoute(vip); err != nil || !sameGateways(gws, s.Gateways) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("g2's BFD sessions not down, or its BGP sessions not back, within 30 s of dropping its BFD packets")
	}
	l = startLoad(c, VIP4)
	defer l.end()
	time.Sleep(time.Second)
	mark = len(l.snapshot())
	if err := g2.Vanish(); err != nil {
		t.Fatal(err)
	}
	vanished = time.Now()
	gaps = make(chan []time.Duration, 1)
	go func() { gaps <- timedRound(cs) }()
	var holdFIB time.Duration
	if _, err := s.WaitRouterRoute(VIP4, 20*time.Second, g1); err != nil {
		t.Fatal(err)
	}
	holdFIB = time.Since(vanished)
	lat = <-gaps
	time.Sleep(2 * time.Second)
	hits = l.end()[mark:]
	window, failed, slow = lossWindow(hits, vanished)
	broken, gap, delayed = summarize(cs, lat)
	t.Logf("without BFD, g2 vanished: out of the router's FIB after %v (the hold time); new connections: %d requests, %d failed, %d slow, loss window %v; open connections: %d broken, %d waited, the longest %v",
		holdFIB.Round(time.Millisecond), len(hits), failed, slow, window.Round(time.Millisecond), broken, delayed, gap.Round(time.Millisecond))
	// The hold timer, not BFD, must have done it: the router names it as the session's last
	// error. (Its time is not asserted to the second: the hold time counts from g2's last
	// keepalive, which a loaded machine may have delayed; BFD would have taken 0.9 s.)
	if holdFIB < 3*time.Second {
		t.Errorf("without BFD the router moved off g2 after %v: something faster than the hold timer did it", holdFIB)
	}
	if out, err := s.routerSessionErrors(); err != nil {
		t.Error(err)
	} else if !strings.Contains(strings.ToLower(out), "hold timer expired") {
		t.Errorf("without BFD the router moved off g2, but does not say its hold timer expired:\n%s", out)
	}
	if err := g2.Return(); err != nil {
		t.Fatal(err)
	}
	if err := lift(); err != nil {
		t.Error(err)
	}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if _, err := s.WaitRouterRoute(vip, 30*time.Second, g1, g2); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBFDUp waits until every gateway's xlb reports its BFD sessions up.
func waitBFDUp(t *testing.T, s *Site) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		down := ""
		for _, g := range s.Gateways {
			m, err := g.Metrics()
			if err != nil {
				down = err.Error()
				break
			}
			if n := m.Sum("xlb_bfd_session_up"); n != 2 {
				down = fmt.Sprintf("%s: %v of 2 BFD sessions up", g.Name, n)
				break
			}
		}
		if down == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("BFD sessions not up within 30s: %s", down)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// timedRound makes one request on every live connection of cs, as round does, and returns
// how long each took (-1 for a failed one, which is marked dead).
func timedRound(cs *connSet) []time.Duration {
	out := make([]time.Duration, len(cs.conns))
	var mu sync.Mutex
	forEach(len(cs.conns), len(cs.conns), func(i int) {
		if cs.dead[i] {
			return
		}
		start := time.Now()
		a, err := cs.conns[i].Get()
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			cs.dead[i] = true
			took = -1
		case a.Pod != cs.pods[i]:
			cs.dead[i] = true // moved: counted as broken
			took = -1
		}
		out[i] = took
	})
	return out
}

// summarize counts the broken connections of a timed round, the longest wait of the others and
// how many waited more than 100 ms.
func summarize(cs *connSet, lat []time.Duration) (broken int, longest time.Duration, delayed int) {
	for _, d := range lat {
		switch {
		case d < 0:
			broken++
		case d > 100*time.Millisecond:
			delayed++
		}
		longest = max(longest, d)
	}
	return broken, longest, delayed
}

// lossWindow reads the new-connection load after a failure at from: the time from the failure
// to the end of the last request that failed or took more than 100 ms, how many failed and how
// many were slow.
func lossWindow(hits []hit, from time.Time) (window time.Duration, failed, slow int) {
	var last time.Time
	for _, h := range hits {
		bad := h.err != nil || h.took > 100*time.Millisecond
		if h.err != nil {
			failed++
		} else if bad {
			slow++
		}
		if bad && h.at.After(last) {
			last = h.at
		}
	}
	if last.IsZero() {
		return 0, failed, slow
	}
	return last.Sub(from), failed, slow
}
