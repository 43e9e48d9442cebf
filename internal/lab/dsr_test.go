// SPDX-License-Identifier: Apache-2.0
package lab

// Direct server return, end to end (docs/dsr.md): the site's default topology, in which the
// nodes' default route is the router and replies must never need a gateway.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// linkBytes returns the bytes interface ifname in ns received and sent.
func linkBytes(t *testing.T, ns *netlab.NS, ifname string) (rx, tx uint64) {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "-s", "-j", "link", "show", "dev", ifname).Output()
	if err != nil {
		t.Fatalf("ip -s link show %s in %s: %v", ifname, ns.Name, err)
	}
	var links []struct {
		Stats64 struct {
			RX struct{ Bytes uint64 } `json:"rx"`
			TX struct{ Bytes uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s link show %s: %v: %s", ifname, err, out)
	}
	return links[0].Stats64.RX.Bytes, links[0].Stats64.TX.Bytes
}

// towardGateways returns the bytes the cluster L2 bridge sent to each gateway: every packet
// from the cluster that a gateway could see.
func towardGateways(t *testing.T, s *Site) []uint64 {
	out := make([]uint64, len(s.Gateways))
	for i, g := range s.Gateways {
		_, out[i] = linkBytes(t, s.L2, g.Name)
	}
	return out
}

// reasons returns counter reason of every gateway's datapath.
func reasons(t *testing.T, s *Site, reason string) []float64 {
	t.Helper()
	return gatewaySums(t, s, "xlb_datapath_packets_total", "reason", reason)
}

// nodeCounter sums counter name of every node's side of DSR.
func nodeCounter(t *testing.T, s *Site, name string) uint64 {
	t.Helper()
	var n uint64
	for _, a := range s.Agents {
		p, err := a.DSR()
		if err != nil {
			t.Fatal(err)
		}
		n += p.Counters[name]
	}
	return n
}

// echoBulk sends size bytes to vip's TCP echo port and reads them back at the same time (the
// pod echoes them): size bytes each way, full-size segments both ways.
func echoBulk(ctx context.Context, c *Client, vip netip.Addr, size int) error {
	conn, err := c.Dial(ctx, netip.AddrPortFrom(vip, PortEcho))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		werr <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("%s: read back: %w", vip, err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("%s: write: %w", vip, err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("%s: the echoed bytes differ", vip)
	}
	return nil
}

// TestDSR proves direct server return on the default site (nodes' default route: the router)
// with two more services over the same pods' port: one on the same service port, one on
// another.
func TestDSR(t *testing.T) {
	if EnvReturnPath() {
		t.Skip("XLB_LAB_FORWARDING=returnPath: the site has the gateways on the replies' path")
	}
	s := NewT(t, Options{XLB: xlbBin, SharedServices: true})
	if !s.DSR() {
		t.Fatal("the default site is not in the DSR mode")
	}
	waitHealthy(t, s, s.Pods...)
	t.Run("RepliesBypassGateways", func(t *testing.T) { testRepliesBypassGateways(t, s) })
	t.Run("SharedEndpoints", func(t *testing.T) { testSharedEndpoints(t, s) })
	t.Run("AgentKilled", func(t *testing.T) { testAgentKilled(t, s) })
}

// testRepliesBypassGateways: requests (TCP, UDP, both families) and a 10 MB transfer each way in
// each family through the VIPs; every reply reaches the client from the VIP (TCP works only so;
// UDP answers are checked) and the pod saw the client's own address; meanwhile the gateways
// translate no reply (nat_reverse stays 0) and the cluster L2 sends them next to nothing: the
// replies (more than 20 MB) went to the router from the nodes, rewritten by the node agents.
func testRepliesBypassGateways(t *testing.T, s *Site) {
	c := s.Clients[0]
	rev0, carried0 := reasons(t, s, "nat_reverse"), reasons(t, s, "dsr_carried")
	l2_0 := towardGateways(t, s)
	rewritten0 := nodeCounter(t, s, "reply_rewritten")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		for range 10 {
			if _, _, err := c.Get(ctx, vip); err != nil {
				t.Fatalf("HTTP through %s: %v", vip, err)
			}
			if _, err := c.Who(vip); err != nil {
				t.Fatalf("UDP through %s: %v", vip, err)
			}
		}
	}
	const size = 10 << 20
	start := time.Now()
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if err := echoBulk(ctx, c, vip, size); err != nil {
			t.Fatalf("10 MB each way through %s: %v", vip, err)
		}
	}
	took := time.Since(start)
	rev := sub(reasons(t, s, "nat_reverse"), rev0)
	carried := sub(reasons(t, s, "dsr_carried"), carried0)
	l2 := towardGateways(t, s)
	var toGW uint64
	for i := range l2 {
		toGW += l2[i] - l2_0[i]
	}
	rewritten := nodeCounter(t, s, "reply_rewritten") - rewritten0
	t.Logf("2 x 10 MB each way in %v; gateways: nat_reverse +%v, dsr_carried +%v; L2 to the gateways: %d bytes; nodes rewrote %d replies",
		took.Round(time.Millisecond), rev, carried, toGW, rewritten)
	for i, n := range rev {
		if n != 0 {
			t.Errorf("%s translated %v replies: replies crossed a gateway", s.Gateways[i].Name, n)
		}
	}
	if carried[0]+carried[1] < 40 {
		t.Errorf("the gateways carried %v first packets, want at least the 40 connections' and datagrams'", carried)
	}
	// The client's packets reach the pods through the gateways; what the L2 sends them is the
	// health checks' answers and neighbour discovery: nothing near the 20 MB of replies.
	if toGW > 2<<20 {
		t.Errorf("the cluster L2 sent the gateways %d bytes during the transfers: replies crossed them", toGW)
	}
	if rewritten < 2*size/1500 {
		t.Errorf("the nodes rewrote %d replies, want at least the %d full-size segments of the transfers", rewritten, 2*size/1500)
	}
}

// testSharedEndpoints: the demo service and two others over the same pods' port 8080 (one on the
// same service port 80, one on port 8081): 1,200 new connections spread over the three VIPs and
// both families, each from a source port of its own (the router's ECMP spreads them over both
// gateways): every one answered, by a pod that saw the client's address; both gateways
// forwarded some.
// sharedEndpointsPorts is the first of testSharedEndpoints' source ports (one per connection).
const sharedEndpointsPorts = 20000

func testSharedEndpoints(t *testing.T, s *Site) {
	c := s.Clients[0]
	targets := []netip.AddrPort{
		netip.AddrPortFrom(VIP4, PortHTTP), netip.AddrPortFrom(VIP6, PortHTTP),
		netip.AddrPortFrom(VIPSame4, PortHTTP), netip.AddrPortFrom(VIPSame6, PortHTTP),
		netip.AddrPortFrom(VIPOther4, PortOther), netip.AddrPortFrom(VIPOther6, PortOther),
	}
	fwd0 := reasons(t, s, "nat_forward")
	const n = 1200
	var mu sync.Mutex
	var errs []error
	pods := map[string]int{}
	forEach(n, 16, func(i int) {
		dst := targets[i%len(targets)]
		ctx, cancel := context.WithTimeout(context.Background(), 2*IOTimeout)
		defer cancel()
		// A port of its own, below the kernel's ephemeral range: left to the kernel, two
		// connections to two VIPs sharing a pod endpoint may get the same local port, and then
		// the pod sees one 5-tuple for both (the second meets the first, or its TIME_WAIT, and
		// is reset: docs/dsr.md; CI saw 7 of 1,200).
		conn, err := c.DialFrom(ctx, uint16(sharedEndpointsPorts+i), dst)
		var a Answer
		if err == nil {
			hc := NewHTTPConn(conn)
			a, err = hc.get(true)
			hc.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("connection %d to %s: %w", i, dst, err))
			return
		}
		pods[a.Pod]++
	})
	fwd := sub(reasons(t, s, "nat_forward"), fwd0)
	t.Logf("%d connections over %d VIP:ports: %d failed; pods %v; gateways forwarded %v packets", n, len(targets), len(errs), pods, fwd)
	if len(errs) > 0 {
		t.Fatalf("%d of %d connections failed, first: %v", len(errs), n, errs[0])
	}
	for i, f := range fwd {
		if f < n/10 {
			t.Errorf("%s forwarded %v packets of %d connections: the router's ECMP did not spread them", s.Gateways[i].Name, f, n)
		}
	}
	if len(pods) != len(s.Pods) {
		t.Errorf("answered by %d pods, want all %d", len(pods), len(s.Pods))
	}
}

// testAgentKilled: every node's agent is killed (SIGKILL) under 40 open keep-alive connections:
// each keeps working on its pod, and new connections work, with no agent running (the node side
// of DSR is pinned); the agents restarted adopt it, and every connection still works.
func testAgentKilled(t *testing.T, s *Site) {
	c := s.Clients[0]
	cs := openConns(t, c, 40)
	for _, a := range s.Agents {
		if err := a.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	cs.checkRound(t, "after the agents were killed")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		if _, _, err := c.Get(ctx, vipOf(i)); err != nil {
			t.Fatalf("new connection with no agent running: %v", err)
		}
	}
	var errs []error
	for _, a := range s.Agents {
		errs = append(errs, a.Start())
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := s.waitAgentPairs(s.Backends()); err != nil {
		t.Fatal(err)
	}
	cs.checkRound(t, "after the agents restarted")
	for i := range 20 {
		if _, _, err := c.Get(ctx, vipOf(i)); err != nil {
			t.Fatalf("new connection after the restart: %v", err)
		}
	}
	t.Logf("40 connections kept their pods through the agents' kill and restart; 40 new ones answered")
}
