// SPDX-License-Identifier: Apache-2.0
package lab

// The end-to-end suite: a whole site (client, router with ECMP, two gateways running the real
// xlb, cluster L2, two nodes, five pods) per test, real TCP and UDP through the VIPs. Each test
// states the property it proves and logs the numbers it measured. Every loop is bounded in count
// and time. The tests need root.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// forEach runs fn(0..n-1) on at most workers goroutines.
func forEach(n, workers int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// vipOf alternates the families: even i IPv4, odd i IPv6.
func vipOf(i int) netip.Addr {
	if i%2 == 0 {
		return VIP4
	}
	return VIP6
}

// connSet is a set of long-lived keep-alive HTTP connections through the VIPs.
type connSet struct {
	conns []*HTTPConn
	pods  []string // the pod each one reached first
	dead  []bool   // failed once: not used again
}

// openConns opens n keep-alive connections from c (alternating IPv4 and IPv6) and makes one
// request on each, recording its pod.
func openConns(t *testing.T, c *Client, n int) *connSet {
	t.Helper()
	cs := &connSet{conns: make([]*HTTPConn, n), pods: make([]string, n), dead: make([]bool, n)}
	errs := make([]error, n)
	forEach(n, 16, func(i int) {
		hc, err := c.DialHTTP(context.Background(), vipOf(i))
		if err != nil {
			errs[i] = err
			return
		}
		cs.conns[i] = hc
		a, err := hc.Get()
		if err != nil {
			errs[i] = fmt.Errorf("connection %d: %w", i, err)
			return
		}
		cs.pods[i] = a.Pod
	})
	t.Cleanup(func() {
		for _, hc := range cs.conns {
			if hc != nil {
				hc.Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("open %d connections: %v", n, err)
	}
	return cs
}

// byPod counts the connections per pod.
func (cs *connSet) byPod() map[string]int {
	m := map[string]int{}
	for _, p := range cs.pods {
		m[p]++
	}
	return m
}

// round makes one request on every live connection. failed: connections whose request failed
// (marked dead); moved: connections answered by another pod than their first.
func (cs *connSet) round() (failed, moved []int, firstErr error) {
	var mu sync.Mutex
	forEach(len(cs.conns), 16, func(i int) {
		if cs.dead[i] {
			return
		}
		a, err := cs.conns[i].Get()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			failed = append(failed, i)
			cs.dead[i] = true
			if firstErr == nil {
				firstErr = fmt.Errorf("connection %d (%s, pod %s): %w", i, cs.conns[i].Local(), cs.pods[i], err)
			}
		case a.Pod != cs.pods[i]:
			moved = append(moved, i)
		}
	})
	slices.Sort(failed)
	slices.Sort(moved)
	return failed, moved, firstErr
}

// checkRound runs round and fails the test on any failed or moved connection.
func (cs *connSet) checkRound(t *testing.T, when string) {
	t.Helper()
	failed, moved, err := cs.round()
	if len(failed) > 0 || len(moved) > 0 {
		t.Fatalf("%s: %d of %d connections failed, %d moved to another pod (first error: %v)",
			when, len(failed), len(cs.conns), len(moved), err)
	}
}

// vipPackets returns, per gateway, the packets its datapath forwarded to every VIP frontend.
func vipPackets(t *testing.T, s *Site) []float64 {
	t.Helper()
	return gatewaySums(t, s, "xlb_vip_packets_total")
}

// gatewaySums returns, per gateway, the sum of metric's series whose labels match labels (name,
// value pairs).
func gatewaySums(t *testing.T, s *Site, metric string, labels ...string) []float64 {
	t.Helper()
	out := make([]float64, len(s.Gateways))
	for i, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = m.Sum(metric, labels...)
	}
	return out
}

func sub(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// waitHealthy waits until every gateway reports both addresses of each pod healthy in every
// service that has it.
func waitHealthy(t *testing.T, s *Site, pods ...*Pod) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, g := range s.Gateways {
			m, err := g.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				for _, a := range []netip.Addr{p.Addr4, p.Addr6} {
					ss := m.Samples("xlb_backend_healthy", "backend", a.String())
					ok = ok && len(ss) > 0 && !slices.ContainsFunc(ss, func(s Sample) bool { return s.Value != 1 })
				}
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			names := make([]string, len(pods))
			for i, p := range pods {
				names[i] = p.Name
			}
			t.Fatalf("pods %v not healthy on every gateway within 10s", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gets makes n requests from c on new connections (alternating families unless only4), on
// workers goroutines, and returns the answering pods per request ("" when it failed) and the
// errors.
func gets(c *Client, n, workers int, only4 bool) (pods []string, locals []netip.AddrPort, errs []error) {
	pods, locals = make([]string, n), make([]netip.AddrPort, n)
	var mu sync.Mutex
	forEach(n, workers, func(i int) {
		vip := vipOf(i)
		if only4 {
			vip = VIP4
		}
		a, local, err := c.Get(context.Background(), vip)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		pods[i], locals[i] = a.Pod, local
	})
	return pods, locals, errs
}

// TestVIPTraffic proves that clients reach the pods through the VIPs with TCP and UDP over IPv4
// and IPv6 (router ECMP, then either gateway's XDP datapath, then node and pod), and that the pod
// sees the client's real address and port: per family 50 HTTP requests on new connections and
// 50 "who" datagrams from new sockets, every one answered, every answer naming the client's own
// address:port (and UDP answers coming from VIP:80); a TCP and a UDP echo per family; every pod
// answered some, and both gateways forwarded some.
func TestVIPTraffic(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	c := s.Clients[0]
	before := vipPackets(t, s)
	perPod := map[string]int{}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		const n = 50
		for i := range n {
			a, local, err := c.Get(context.Background(), vip)
			if err != nil {
				t.Fatalf("HTTP %d to %s: %v", i, vip, err)
			}
			if a.Client != local || a.Client.Addr() != c.Addr(vip) {
				t.Fatalf("pod %s saw the client as %s, want %s", a.Pod, a.Client, local)
			}
			if a.PodAddr != map[bool]netip.Addr{true: s.Pod(a.Pod).Addr4, false: s.Pod(a.Pod).Addr6}[vip.Is4()] {
				t.Fatalf("pod %s answered on %s, not its %s address", a.Pod, a.PodAddr, vip)
			}
			perPod[a.Pod]++
		}
		for i := range n {
			a, err := c.Who(vip) // checks the source (VIP:80) and the client address the pod saw
			if err != nil {
				t.Fatalf("UDP %d to %s: %v", i, vip, err)
			}
			perPod[a.Pod]++
		}
		if err := echoTCP(context.Background(), c, vip); err != nil {
			t.Fatalf("TCP echo %s: %v", vip, err)
		}
		if err := echoUDP(c, vip); err != nil {
			t.Fatalf("UDP echo %s: %v", vip, err)
		}
	}
	d := sub(vipPackets(t, s), before)
	t.Logf("200 requests + 4 echoes answered; per pod %v; VIP packets per gateway %v", perPod, d)
	for _, p := range s.Pods {
		if perPod[p.Name] == 0 {
			t.Errorf("pod %s answered none of 200 requests", p.Name)
		}
	}
	for i, n := range d {
		if n == 0 {
			t.Errorf("gateway %s forwarded no VIP packet: ECMP did not spread", s.Gateways[i].Name)
		}
	}
}

// TestGatewayConsistency proves that both gateways send a flow to the same pod: per family, 1,000
// UDP flows (1,000 client sockets, fixed 5-tuples) go through gateway g1 only (the router's
// route to the VIPs pinned to it), then the same 1,000 flows through g2 only (which has no state
// for them); all 2×1,000 land on the same pod both times, which is also the pod the Go Maglev
// plan (lb.Plan + xdp.FlowHash) predicts. The new-flow counters show each pass took the intended
// gateway.
func TestGatewayConsistency(t *testing.T) {
	// The test edits the router's multipath route by hand.
	testGatewayConsistency(t, NewT(t, Options{XLB: xlbBin, Routing: Static}))
}

// TestGatewayConsistencyMixed is TestGatewayConsistency with g1 on the XDP datapath and g2 on
// the AF_XDP one: the two datapaths pick the same pod for every flow, so gateways of a site may
// run either.
func TestGatewayConsistencyMixed(t *testing.T) {
	testGatewayConsistency(t, NewT(t, Options{XLB: xlbBin, Routing: Static, Datapaths: []string{"xdp", "afxdp"}}))
}

func testGatewayConsistency(t *testing.T, s *Site) {
	c := s.Clients[0]
	g1, g2 := s.Gateways[0], s.Gateways[1]
	pred, err := s.Predictor(s.Backends())
	if err != nil {
		t.Fatal(err)
	}
	const flows = 1000
	newFlows := func() []float64 {
		out := make([]float64, 2)
		for i, g := range []*Gateway{g1, g2} {
			m, err := g.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			out[i] = m.Sum("xlb_vip_new_flows_total", "port", "80", "protocol", "UDP")
		}
		return out
	}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		socks := make([]*net.UDPConn, flows)
		for i := range socks {
			if socks[i], err = c.ListenUDP(vip, 0); err != nil {
				t.Fatal(err)
			}
			defer socks[i].Close()
		}
		pass := func(gw *Gateway) []string {
			if err := s.RouteVia(gw); err != nil {
				t.Fatal(err)
			}
			before := newFlows()
			pods := make([]string, flows)
			errs := make([]error, flows)
			forEach(flows, 32, func(i int) {
				a, err := WhoOn(socks[i], vip)
				pods[i], errs[i] = a.Pod, err
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("via %s: %v", gw.Name, err)
			}
			// What an operator checks by hand: `xlb show flow` on an XDP gateway names the pod
			// each flow reached, by the Maglev pick of a new flow and by what the gateway
			// remembers of it (right after the pass: fresh). Each flow sent one datagram through
			// this gateway, so that is its first-datagram entry in the handshake table, not a
			// conntrack entry; a flow whose slot a later flow's first datagram took (about 1000 /
			// 65,536 / 2 each) is remembered by neither, so one of the eight may be unnamed.
			named := 0
			for i := range 8 {
				if s.datapathKind(gw) != "xdp" {
					named = 8
					break
				}
				client := unmapAddrPort(socks[i].LocalAddr())
				want := podEndpoint(s, pods[i], vip, TargetHTTP) // the who server's port
				f := showFlow(t, gw, client, netip.AddrPortFrom(vip, PortWho))
				if f.NewFlow != want || (f.Handshake != "" && f.Handshake != want) || f.Established != "" {
					t.Errorf("xlb show flow on %s for %s -> %s: first datagram %q, established %q, new flow %q; the flow reached %s (%s) with one datagram",
						gw.Name, client, vip, f.Handshake, f.Established, f.NewFlow, pods[i], want)
				}
				if f.Handshake == want {
					named++
				}
			}
			if named < 7 {
				t.Errorf("xlb show flow on %s: %d of 8 flows' first datagrams named, want 7 at least", gw.Name, named)
			}
			d := sub(newFlows(), before)
			t.Logf("%s via %s only: new UDP flows counted by g1 %v, g2 %v", vip, gw.Name, d[0], d[1])
			if d[gw.Index-1] < flows || d[2-gw.Index] != 0 {
				t.Errorf("%s via %s only: new flows g1 %v, g2 %v: the pass did not take %s alone", vip, gw.Name, d[0], d[1], gw.Name)
			}
			return pods
		}
		p1 := pass(g1)
		p2 := pass(g2)
		mismatch, mispredicted := 0, 0
		perPod := map[string]int{}
		for i := range flows {
			if p1[i] != p2[i] {
				mismatch++
			}
			want, err := pred.Pod(unmapAddrPort(socks[i].LocalAddr()), vip, PortWho, "udp")
			if err != nil {
				t.Fatal(err)
			}
			if want.Name != p1[i] {
				mispredicted++
			}
			perPod[p1[i]]++
		}
		t.Logf("%s: %d flows, %d landed on another pod via g2 than via g1, %d differ from the Go Maglev plan; per pod %v",
			vip, flows, mismatch, mispredicted, perPod)
		if mismatch != 0 || mispredicted != 0 {
			t.Errorf("%s: %d of %d flows changed pods between the gateways, %d differ from the plan", vip, mismatch, flows, mispredicted)
		}

	}
	if err := s.RouteVia(g1, g2); err != nil {
		t.Fatal(err)
	}
}

// shownFlow is what `xlb show flow --json` says of a UDP flow: the backend endpoints of its
// conntrack entry, of its first-datagram entry and of a new flow's Maglev pick ("" for none).
type shownFlow struct{ Established, Handshake, NewFlow string }

// showFlow runs `xlb show flow` against g's pinned datapath for a UDP flow.
func showFlow(t *testing.T, g *Gateway, client, to netip.AddrPort) shownFlow {
	t.Helper()
	out, err := exec.Command(xlbBin, "show", "flow", "--json", "--pin-path", g.PinPath, "--client", client.String(),
		"--to", to.String(), "--proto", "udp").Output()
	if err != nil {
		t.Fatalf("xlb show flow on %s: %v", g.Name, err)
	}
	var doc shownFlow
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("xlb show flow on %s: %v: %s", g.Name, err, out)
	}
	return doc
}

// podEndpoint is the endpoint "addr:port" of the pod named name in vip's family, "" if none.
func podEndpoint(s *Site, name string, vip netip.Addr, port uint16) string {
	for _, p := range s.Backends() {
		if p.Name != name {
			continue
		}
		if vip.Is4() {
			return netip.AddrPortFrom(p.Addr4, port).String()
		}
		return netip.AddrPortFrom(p.Addr6, port).String()
	}
	return ""
}

// TestSpread proves that new connections spread evenly: 2,000 new TCP connections (HTTP
// requests) from one client through the ECMP'd gateways over 5 pods, every pod within ±20% of
// the even share (400), all answered, each on the pod the Go Maglev plan predicts for its
// 5-tuple.
func TestSpread(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	pred, err := s.Predictor(s.Backends())
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	start := time.Now()
	pods, locals, errs := gets(s.Clients[0], n, 8, true)
	took := time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests failed: %v", len(errs), n, errs[0])
	}
	counts := map[string]int{}
	mispredicted := 0
	for i, p := range pods {
		counts[p]++
		want, err := pred.Pod(locals[i], VIP4, PortHTTP, "tcp")
		if err != nil {
			t.Fatal(err)
		}
		if want.Name != p {
			mispredicted++
		}
	}
	even := n / len(s.Pods)
	var dev []string
	for _, p := range s.Pods {
		dev = append(dev, fmt.Sprintf("%s %d (%+.1f%%)", p.Name, counts[p.Name], 100*float64(counts[p.Name]-even)/float64(even)))
	}
	t.Logf("%d connections in %v: %s; %d not on the planned pod", n, took.Round(time.Millisecond), strings.Join(dev, ", "), mispredicted)
	for _, p := range s.Pods {
		if c := counts[p.Name]; c < even*8/10 || c > even*12/10 {
			t.Errorf("pod %s got %d of %d connections, want %d ±20%%", p.Name, c, n, even)
		}
	}
	if mispredicted != 0 {
		t.Errorf("%d of %d connections landed on another pod than the Maglev plan says", mispredicted, n)
	}
}

// TestNonVIPTraffic proves that traffic not for a VIP still reaches the gateways' own stack
// through their XDP programs: from the client, per gateway and family, a TCP exchange with a
// server on the gateway's own upstream address and a ping of it; the pods' health-check replies
// to the gateways pass too (every backend healthy on both gateways). None of it is counted as
// VIP traffic. Pings to the VIPs are answered (by the gateways' XDP program).
func TestNonVIPTraffic(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	c := s.Clients[0]
	const port = 9000
	for _, g := range s.Gateways {
		var ln net.Listener
		if err := g.NS.Do(func() (err error) { ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)); return err }); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer conn.Close()
					fmt.Fprintf(conn, "gateway %s saw %s\n", g.Name, unmapAddrPort(conn.RemoteAddr()))
				}()
			}
		}()
	}
	waitHealthy(t, s, s.Pods...)
	before := vipPackets(t, s)
	notVIP := func() []float64 {
		out := make([]float64, len(s.Gateways))
		for i, g := range s.Gateways {
			m, err := g.Metrics()
			if err != nil {
				t.Fatal(err)
			}
			out[i] = m.Sum("xlb_datapath_packets_total", "reason", "pass_not_vip")
		}
		return out
	}
	nv0 := notVIP()
	for _, g := range s.Gateways {
		for _, addr := range []netip.Addr{g.Upstream4, g.Upstream6} {
			conn, err := c.Dial(context.Background(), netip.AddrPortFrom(addr, port))
			if err != nil {
				t.Fatalf("TCP to %s's own address: %v", g.Name, err)
			}
			_ = conn.SetDeadline(time.Now().Add(IOTimeout))
			b, err := io.ReadAll(conn)
			conn.Close()
			want := fmt.Sprintf("gateway %s saw %s\n", g.Name, unmapAddrPort(conn.LocalAddr()))
			if err != nil || string(b) != want {
				t.Fatalf("TCP to %s: %q, %v; want %q", netip.AddrPortFrom(addr, port), b, err, want)
			}
			rtt, err := c.Ping(addr)
			if err != nil {
				t.Fatalf("ping %s: %v", addr, err)
			}
			t.Logf("%s: TCP to %s answered by its own stack; ping %v", g.Name, addr, rtt.Round(time.Microsecond))
		}
	}
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		rtt, err := c.Ping(vip)
		if err != nil {
			t.Fatalf("ping %s: %v", vip, err)
		}
		t.Logf("ping VIP %s: %v", vip, rtt.Round(time.Microsecond))
	}
	if d := sub(vipPackets(t, s), before); slices.ContainsFunc(d, func(f float64) bool { return f != 0 }) {
		t.Errorf("non-VIP traffic counted as VIP packets: %v", d)
	}
	nv := sub(notVIP(), nv0)
	t.Logf("pass_not_vip grew by %v per gateway", nv)
	for i, n := range nv {
		if n < 8 { // at least the SYN, ACKs and FIN of two connections
			t.Errorf("%s: pass_not_vip grew by %v, want the non-VIP TCP packets", s.Gateways[i].Name, n)
		}
	}
}

// TestECMPChange proves that the router moving flows between gateways breaks no connection: 200
// long-lived TCP connections (100 IPv4, 100 IPv6, HTTP keep-alive) make a request after each
// step of: g1 taken out of the router's multipath routes, put back, g2 taken out, put back. Every
// request of every connection is answered by the connection's first pod (the gateway that
// takes over has no conntrack entry: Maglev gives it the same pod). The VIP packet counters
// show the traffic really moved.
func TestECMPChange(t *testing.T) {
	// The test edits the router's multipath route by hand.
	s := NewT(t, Options{XLB: xlbBin, Routing: Static})
	g1, g2 := s.Gateways[0], s.Gateways[1]
	cs := openConns(t, s.Clients[0], 200)
	t.Logf("200 connections over pods %v", cs.byPod())
	steps := []struct {
		name   string
		change func() error
	}{
		{"both gateways", func() error { return nil }},
		{"g1 removed", func() error { return s.RemoveFromRoute(g1) }},
		{"g1 back", func() error { return s.AddToRoute(g1) }},
		{"g2 removed", func() error { return s.RemoveFromRoute(g2) }},
		{"g2 back", func() error { return s.AddToRoute(g2) }},
	}
	var shares [][]float64
	for _, st := range steps {
		if err := st.change(); err != nil {
			t.Fatal(err)
		}
		before := vipPackets(t, s)
		cs.checkRound(t, st.name)
		d := sub(vipPackets(t, s), before)
		shares = append(shares, d)
		t.Logf("%-13s: 200 requests answered by the same pods; VIP packets g1 %v, g2 %v", st.name, d[0], d[1])
	}
	if shares[0][0] == 0 || shares[0][1] == 0 {
		t.Errorf("with both gateways, one carried nothing (%v): ECMP did not spread the connections", shares[0])
	}
	if shares[1][0] != 0 || shares[3][1] != 0 {
		t.Errorf("a gateway removed from the route still got VIP packets: %v, %v", shares[1], shares[3])
	}
	if perReq := (shares[0][0] + shares[0][1]) / 200; perReq > 0 {
		t.Logf("about %.0f connections moved from g1 to g2 and back, %.0f from g2 to g1 and back",
			shares[0][0]/perReq, shares[0][1]/perReq)
	}
}

// TestBackendAdded proves that adding a backend keeps established connections and gives new
// ones to it: with 200 keep-alive connections open over 5 pods, pod p6 is created and added to
// every gateway's config (SIGHUP). All 200 connections go on with their pods, although the new
// Maglev table sends some of their 5-tuples elsewhere (counted; conntrack keeps them); then 300
// new connections all land on the pods the new plan predicts, p6 getting a fair share
// (50 ± 25).
func TestBackendAdded(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	cs := openConns(t, s.Clients[0], 200)
	t.Logf("200 connections over pods %v", cs.byPod())
	p6, err := s.AddPod(s.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	pods := append(s.Backends(), p6)
	if err := s.SetBackends(pods...); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, s, p6)
	// Healthy is not yet serving: a backend new to a serving service waits out the warm-up
	// (datapath.backendWarmup) before it takes new flows.
	waitServing(t, s, len(pods))
	pred, err := s.Predictor(pods)
	if err != nil {
		t.Fatal(err)
	}
	wouldMove := 0
	for i, hc := range cs.conns {
		p, err := pred.Pod(hc.Local(), vipOf(i), PortHTTP, "tcp")
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != cs.pods[i] {
			wouldMove++
		}
	}
	cs.checkRound(t, "after adding p6")
	t.Logf("after adding p6: 200 of 200 connections kept their pods; the new table maps %d of their 5-tuples to another pod", wouldMove)
	if wouldMove == 0 {
		t.Errorf("the new table moves none of the 200 5-tuples: the test proves nothing")
	}
	const n = 300
	newPods, locals, errs := gets(s.Clients[0], n, 8, false)
	if len(errs) > 0 {
		t.Fatalf("%d of %d new connections failed: %v", len(errs), n, errs[0])
	}
	counts := map[string]int{}
	mispredicted := 0
	for i, p := range newPods {
		counts[p]++
		want, err := pred.Pod(locals[i], vipOf(i), PortHTTP, "tcp")
		if err != nil {
			t.Fatal(err)
		}
		if want.Name != p {
			mispredicted++
		}
	}
	t.Logf("%d new connections: %v; %d not on the planned pod", n, counts, mispredicted)
	if c := counts[p6.Name]; c < 25 || c > 75 {
		t.Errorf("p6 got %d of %d new connections, want 50 ± 25", c, n)
	}
	if mispredicted != 0 {
		t.Errorf("%d new connections not on the planned pod", mispredicted)
	}
	cs.checkRound(t, "after the new connections")
}

// TestBackendRemoved proves that removing a backend breaks only its own connections: with 200
// keep-alive connections open over 5 pods, p5 is removed from every gateway's config (SIGHUP).
// Exactly the connections that were on p5 fail (the datapath re-balances them to a pod that
// resets them); of the others none fails and none moves (0). Then 200 new connections never
// reach p5.
func TestBackendRemoved(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	cs := openConns(t, s.Clients[0], 200)
	byPod := cs.byPod()
	t.Logf("200 connections over pods %v", byPod)
	removed := s.Pods[4]
	if byPod[removed.Name] == 0 {
		t.Fatalf("no connection on %s: nothing to prove", removed.Name)
	}
	if err := s.SetBackends(s.Pods[:4]...); err != nil {
		t.Fatal(err)
	}
	failed, moved, ferr := cs.round()
	var failedOn, failedElsewhere []int
	for _, i := range failed {
		if cs.pods[i] == removed.Name {
			failedOn = append(failedOn, i)
		} else {
			failedElsewhere = append(failedElsewhere, i)
		}
	}
	t.Logf("after removing %s: %d of its %d connections failed (first error: %v); of the other %d: %d failed, %d moved",
		removed.Name, len(failedOn), byPod[removed.Name], ferr, 200-byPod[removed.Name], len(failedElsewhere), len(moved))
	if len(failedOn) != byPod[removed.Name] || len(failedElsewhere) != 0 || len(moved) != 0 {
		t.Errorf("want exactly %s's %d connections to fail and none of the others to fail or move", removed.Name, byPod[removed.Name])
	}
	cs.checkRound(t, "again")
	pods, _, errs := gets(s.Clients[0], 200, 8, false)
	if len(errs) > 0 {
		t.Fatalf("%d of 200 new connections failed: %v", len(errs), errs[0])
	}
	if n := slices.Index(pods, removed.Name); n >= 0 {
		t.Errorf("a new connection reached the removed %s", removed.Name)
	}
}

// TestGatewayKilled proves that a crashed xlb does not stop forwarding: under a steady stream
// of new connections (one request each, both families, about 4 s) and with 50 keep-alive
// connections open, g1's xlb is killed with SIGKILL, left dead for a second, and restarted (it
// adopts the pinned datapath). 0 requests fail, every keep-alive connection keeps working on its
// pod while xlb is dead and after the restart, and g1 carried VIP traffic across the window.
func TestGatewayKilled(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	g1 := s.Gateways[0]
	if s.datapathKind(g1) == "afxdp" {
		// Only with XLB_LAB_DATAPATH=afxdp: the AF_XDP datapath lives in xlb's process.
		t.Skip("a killed AF_XDP gateway stops forwarding by design (docs/afxdp.md): nothing to prove")
	}
	c := s.Clients[0]
	cs := openConns(t, c, 50)
	before := vipPackets(t, s)

	type result struct {
		n       int
		errs    []error
		slowest time.Duration
	}
	stop := make(chan struct{})
	done := make(chan result)
	go func() {
		var r result
		deadline := time.Now().Add(30 * time.Second) // bound, should stop long before
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			start := time.Now()
			_, _, err := c.Get(context.Background(), vipOf(i))
			r.n++
			r.slowest = max(r.slowest, time.Since(start))
			if err != nil {
				r.errs = append(r.errs, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		done <- r
	}()

	time.Sleep(time.Second)
	if err := g1.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	out, err := exec.Command("ip", "-n", g1.NS.Name, "link", "show", "dev", "up0").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("xdp")) {
		t.Errorf("up0 on %s has no XDP program after the kill: %v: %s", g1.Name, err, out)
	}
	cs.checkRound(t, "xlb on g1 dead")
	time.Sleep(time.Until(killed.Add(time.Second)))
	if err := g1.Start(); err != nil {
		t.Fatal(err)
	}
	dead := time.Since(killed)
	cs.checkRound(t, "xlb on g1 restarted")
	time.Sleep(time.Second)
	close(stop)
	r := <-done
	d := sub(vipPackets(t, s), before)
	t.Logf("%d requests, %d failed, slowest %v; xlb on g1 dead for %v; 50 keep-alive connections kept their pods; VIP packets g1 %v, g2 %v",
		r.n, len(r.errs), r.slowest.Round(time.Millisecond), dead.Round(time.Millisecond), d[0], d[1])
	if len(r.errs) > 0 {
		t.Errorf("%d of %d requests failed; first: %v", len(r.errs), r.n, r.errs[0])
	}
	if r.n < 100 {
		t.Errorf("only %d requests in the stream", r.n)
	}
	if d[0] == 0 {
		t.Errorf("g1 carried no VIP traffic: the test proves nothing")
	}
}

// TestDemo runs what `make lab DEMO=1` shows (BGP routing if bird is installed) and checks that
// it reports no failure.
func TestDemo(t *testing.T) {
	// As `make lab` shows it: BGP routing when bird is installed.
	routing := Static
	if _, err := exec.LookPath("bird"); err == nil {
		routing = BIRD
	}
	s := NewT(t, Options{XLB: xlbBin, Routing: routing})
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
}
