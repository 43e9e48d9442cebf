// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/dsr"
)

// The flood test's figures. The new-flow budget is set low (datapath.newFlowRate) and every
// kind of flood is sent at 8 times it: over the budget whether the datapath counts it per CPU
// (2 CPUs here) or over all CPUs.
const (
	floodBudget   = 1000             // the gateways' datapath.newFlowRate
	floodRate     = 8 * floodBudget  // packets per second, per kind
	floodDuration = 12 * time.Second // per kind, all kinds at once
	fragFlood     = 40000            // first fragments, at fragRate
	// fragRate paces the first-fragment flood: twice the budget, and below what a veth takes
	// (unpaced, the generator reached 139,000/s and the veths dropped half before XDP saw them).
	fragRate   = 2 * fragBudget
	fragBudget = 16384 // FRAG_BUDGET (xdp/gateway/bpf/consts.h): first fragments remembered per second, per gateway
)

// The forged sources: 198.19.0.0/16, which no namespace of the site has; the router routes it to
// the attacker's namespace, whose kernel (not forwarding) drops what the pods answer. One /18
// per kind, so that the pods' counters tell the kinds apart.
var (
	floodSources = netip.MustParsePrefix("198.19.0.0/16")
	floodSrcOf   = map[FloodKind]netip.Prefix{
		FloodSYN:       netip.MustParsePrefix("198.19.0.0/18"),
		FloodACK:       netip.MustParsePrefix("198.19.64.0/18"),
		FloodUDP:       netip.MustParsePrefix("198.19.128.0/18"),
		FloodFirstFrag: netip.MustParsePrefix("198.19.192.0/18"),
	}
)

// attacker is the namespace the floods leave from: a second client behind the router.
type attacker struct {
	c              *Client
	mac, routerMAC net.HardwareAddr
}

// newAttacker makes s.Clients[1] the attacker: the router routes floodSources to it.
func newAttacker(t *testing.T, s *Site) attacker {
	t.Helper()
	if len(s.Clients) < 2 {
		t.Fatal("the flood test needs a second client namespace (Options.Clients 2) as its attacker")
	}
	a := s.Clients[1]
	if err := s.Router.NS.IP(fmt.Sprintf("-4 route add %s via %s dev %s", floodSources, a.Addr4, a.Name)); err != nil {
		t.Fatal(err)
	}
	return attacker{c: a, mac: macOf(t, a.NS, "eth0"), routerMAC: macOf(t, s.Router.NS, a.Name)}
}

func (a attacker) flood(kind FloodKind, rate, count int, d time.Duration, targets ...netip.AddrPort) *Flood {
	return &Flood{Kind: kind, NS: a.c.NS, Ifname: "eth0", SrcMAC: a.mac, DstMAC: a.routerMAC,
		Sources: floodSrcOf[kind], Targets: targets, Rate: rate, Count: count, Duration: d}
}

// podCounters counts, in every pod's namespace (nftables, before anything else of the pod's
// kernel), the packets from each kind's forged sources: what the gateways delivered.
type podCounters struct{ pods []*Pod }

const nftTable = "xlbflood"

func nft(ns *netlab.NS, stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft %s in %s: %v: %s", strings.Join(args, " "), ns.Name, err, out)
	}
	return string(out), nil
}

// nftName is kind's counter in the pods' table.
func nftName(k FloodKind) string { return "flood_" + strings.ReplaceAll(k.String(), "-", "_") }

func newPodCounters(t *testing.T, pods []*Pod) podCounters {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", nftTable)
	for k := range floodSrcOf {
		fmt.Fprintf(&b, "  counter %s {}\n", nftName(k))
	}
	b.WriteString("  chain pre {\n    type filter hook prerouting priority -300; policy accept;\n")
	for k, p := range floodSrcOf {
		fmt.Fprintf(&b, "    ip saddr %s counter name %s\n", p, nftName(k))
	}
	b.WriteString("  }\n}\n")
	for _, p := range pods {
		if _, err := nft(p.NS, b.String(), "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	return podCounters{pods: pods}
}

// read sums each kind's counter over the pods.
func (pc podCounters) read(t *testing.T) map[FloodKind]int {
	t.Helper()
	out := map[FloodKind]int{}
	for _, p := range pc.pods {
		js, err := nft(p.NS, "", "-j", "list", "counters", "table", "ip", nftTable)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Nftables []struct {
				Counter *struct {
					Name    string `json:"name"`
					Packets int    `json:"packets"`
				} `json:"counter"`
			} `json:"nftables"`
		}
		if err := json.Unmarshal([]byte(js), &doc); err != nil {
			t.Fatalf("%s: nft counters: %v", p.Name, err)
		}
		for _, e := range doc.Nftables {
			if e.Counter == nil {
				continue
			}
			for k := range floodSrcOf {
				if nftName(k) == e.Counter.Name {
					out[k] += e.Counter.Packets
				}
			}
		}
	}
	return out
}

// allReasons sums every datapath counter over the gateways.
func allReasons(t *testing.T, s *Site) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range m.Samples("xlb_datapath_packets_total") {
			out[x.Labels["reason"]] += x.Value
		}
	}
	return out
}

// moved is after - before, without the counters that did not move.
func moved(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// sumPrefix adds up the counters whose name starts with prefix (or, with contains, has it).
func sumMatching(m map[string]float64, match func(string) bool) float64 {
	var n float64
	for k, v := range m {
		if match(k) {
			n += v
		}
	}
	return n
}

// newFlowsPerGateway is, per gateway, xlb_vip_new_flows_total summed over every frontend.
func newFlowsPerGateway(t *testing.T, s *Site) []float64 {
	t.Helper()
	return gatewaySums(t, s, "xlb_vip_new_flows_total")
}

// getOnce sends one request to dst on a new connection (closed after) and returns the answer.
func getOnce(ctx context.Context, c *Client, dst netip.AddrPort) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*IOTimeout)
	defer cancel()
	conn, err := c.Dial(ctx, dst)
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	return NewHTTPConn(conn).get(true)
}

// TestFlood floods the gateways while clients use the site, and sends full-size traffic
// across a narrower link and fragmented datagrams through a first-fragment flood.
// One site: three clients (c1 holds the idle connections, c2 is the attacker, c3 runs the
// steady load), two gateways whose new-flow budget is
// floodBudget, the demo service and two more over the same pods' port (shared endpoints).
func TestFlood(t *testing.T) {
	if EnvReturnPath() {
		t.Skip("XLB_LAB_FORWARDING=returnPath: services sharing a pod port need direct server return (docs/lab.md, One Pod port per Service)")
	}
	s := NewT(t, Options{XLB: xlbBin, Clients: 3, SharedServices: true, NewFlowRate: floodBudget, DSRFlows: dsr.DefaultFlows})
	waitHealthy(t, s, s.Pods...)
	atk := newAttacker(t, s)
	t.Run("Floods", func(t *testing.T) { testFloods(t, s, atk) })
	t.Run("PathMTU", func(t *testing.T) { testPathMTU(t, s) })
	t.Run("Fragments", func(t *testing.T) { testFragments(t, s, atk) })
}

// testFloods: with 200 idle keep-alive connections open (over the demo VIPs and the shared
// endpoints' VIPs, both families, spread over both gateways by the router) and a steady load of
// new connections through both gateways, the attacker floods SYNs, random-tuple ACKs and
// random-tuple UDP, each at floodRate (8 times the budget) for floodDuration, against the demo
// VIP and the VIP sharing its endpoints, while a sixth pod joins every service (each Maglev
// table changes). Then: every keep-alive connection answers on its pod, the load kept at least
// 95% of its requests, some budget was hit (a *_rate_limited counter moved), and each flood
// packet either reached a pod (counted there) or was dropped on a named drop_* counter.
func testFloods(t *testing.T, s *Site, atk attacker) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Clients[0]
	p6, err := s.AddPod(s.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	counters := newPodCounters(t, s.Pods)

	// 200 idle keep-alive connections, 50 per VIP.
	kvips := []netip.Addr{VIP4, VIP6, VIPSame4, VIPSame6}
	flows0 := newFlowsPerGateway(t, s)
	type kept struct {
		conn *HTTPConn
		pod  string
	}
	conns := make([]kept, 200)
	errs := make([]error, len(conns))
	forEach(len(conns), 16, func(i int) {
		h, err := c.DialHTTP(ctx, kvips[i%len(kvips)])
		if err != nil {
			errs[i] = err
			return
		}
		a, err := h.Get()
		if err != nil {
			h.Close()
			errs[i] = err
			return
		}
		conns[i] = kept{h, a.Pod}
	})
	defer func() {
		for _, k := range conns {
			if k.conn != nil {
				k.conn.Close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("open 200 keep-alive connections: %v", err)
	}
	// Linux picks a client's ephemeral ports per destination, so two of these connections, to
	// VIPs sharing a pod port, may hold the same local port and land on the same pod: one 5-tuple
	// at the pod for two connections, which no balancer without SNAT can serve (docs/dsr.md,
	// Limits). Such a pair is not the floods' doing: the later one is dialled again, the earlier
	// one still open so that its port is not given out again.
	replaced := 0
	for round := 0; round < 5; round++ {
		seen := map[string]bool{}
		var redo []int
		for i, k := range conns {
			key := k.pod + "|" + k.conn.Local().String()
			if seen[key] {
				redo = append(redo, i)
			}
			seen[key] = true
		}
		if len(redo) == 0 {
			break
		}
		for _, i := range redo {
			h, err := c.DialHTTP(ctx, kvips[i%len(kvips)])
			if err != nil {
				t.Fatalf("dial again: %v", err)
			}
			a, err := h.Get()
			if err != nil {
				h.Close()
				t.Fatalf("dial again: %v", err)
			}
			conns[i].conn.Close()
			conns[i] = kept{h, a.Pod}
			replaced++
		}
	}
	perGW := sub(newFlowsPerGateway(t, s), flows0)
	t.Logf("200 keep-alive connections open (%d dialled again: same local port and pod as another); new flows per gateway while opening them: %v", replaced, perGW)
	for i, n := range perGW {
		if n < 20 {
			t.Fatalf("%s saw %v of the 200 connections: the router's ECMP did not spread them", s.Gateways[i].Name, n)
		}
	}

	// The steady load: new connections, one request each, over four VIP:ports, from another
	// client. From c1 it would, now and then, reuse the port of an idle connection toward another
	// VIP sharing its pod's endpoint: the same 5-tuple at the pod, and the node's flow re-pointed
	// to the other VIP (docs/datapath.md, Reverse NAT: the limits of shared endpoints), which
	// breaks the idle connection whatever the floods do.
	lc := s.Clients[2]
	load := []netip.AddrPort{
		netip.AddrPortFrom(VIP4, PortHTTP), netip.AddrPortFrom(VIP6, PortHTTP),
		netip.AddrPortFrom(VIPSame4, PortHTTP), netip.AddrPortFrom(VIPOther4, PortOther),
	}
	var okN, failN atomic.Int64
	var firstErr atomic.Value
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000 && loadCtx.Err() == nil; i++ {
				_, err := getOnce(loadCtx, lc, load[(w+i)%len(load)])
				switch {
				case loadCtx.Err() != nil:
				case err != nil:
					failN.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				default:
					okN.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}

	before, pods0 := allReasons(t, s), counters.read(t)
	ct0 := conntrackEntries(t, s)
	tcp := []netip.AddrPort{netip.AddrPortFrom(VIP4, PortHTTP), netip.AddrPortFrom(VIPSame4, PortHTTP)}
	floods := []*Flood{
		atk.flood(FloodSYN, floodRate, floodRate*int(floodDuration/time.Second), floodDuration, tcp...),
		atk.flood(FloodACK, floodRate, floodRate*int(floodDuration/time.Second), floodDuration, tcp...),
		atk.flood(FloodUDP, floodRate, floodRate*int(floodDuration/time.Second), floodDuration, netip.AddrPortFrom(VIP4, PortEcho)),
	}
	results := make([]FloodResult, len(floods))
	ferrs := make([]error, len(floods))
	var fwg sync.WaitGroup
	for i, f := range floods {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			results[i], ferrs[i] = f.Run(ctx)
		}()
	}
	// A Maglev table change in the middle: p6 joins every service.
	time.Sleep(floodDuration / 3)
	changeStart := time.Now()
	if err := s.SetBackends(append(s.Backends(), p6)...); err != nil {
		t.Errorf("add p6 during the floods: %v", err)
	}
	changeTook := time.Since(changeStart)
	fwg.Wait()
	if err := errors.Join(ferrs...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // what is in flight arrives
	ctPeak := conntrackEntries(t, s)
	after, pods1 := allReasons(t, s), counters.read(t)
	stopLoad()
	wg.Wait()

	d := moved(before, after)
	sent, delivered := 0, 0
	for i, f := range floods {
		r := results[i]
		got := pods1[f.Kind] - pods0[f.Kind]
		sent += r.Sent
		delivered += got
		t.Logf("flood %-4s: %d packets in %v (%.0f/s, aimed at %d/s) to %v; %d reached a pod", f.Kind, r.Sent,
			r.Took.Round(time.Millisecond), r.Rate(), f.Rate, f.Targets, got)
	}
	drops := sumMatching(d, func(k string) bool { return strings.HasPrefix(k, "drop_") })
	limited := sumMatching(d, func(k string) bool { return strings.Contains(k, "rate_limited") })
	t.Logf("gateways' counters moved by %v", d)
	t.Logf("sent %d, reached the pods %d, not delivered %d; gateways' drop_* +%.0f, *_rate_limited +%.0f; conntrack entries %v before, %v after (conntrackSize 65,536 each)",
		sent, delivered, sent-delivered, drops, limited, ct0, ctPeak)
	t.Logf("p6 joined every service during the floods (reload took %v)", changeTook.Round(time.Millisecond))
	// Packets lost outside the datapath (a veth ring full as a burst is redirected) are on no
	// xlb counter: a handful is tolerated, 1 in 10,000.
	if undelivered := float64(sent - delivered); undelivered-drops > float64(sent)/10000 {
		t.Errorf("%.0f flood packets neither reached a pod nor were counted on a drop_* counter (undelivered %.0f, drops %.0f)",
			undelivered-drops, undelivered, drops)
	}
	if limited == 0 {
		t.Errorf("no *_rate_limited counter moved: the floods (%d packets at 8x the budget %d/s) never hit the new-flow budget", sent, floodBudget)
	}
	for i, r := range results {
		if r.Sent < floods[i].Count/2 {
			t.Errorf("flood %s: %d of %d packets sent: the generator fell short, the test proves less than it says", floods[i].Kind, r.Sent, floods[i].Count)
		}
	}

	// The load kept at least 95% during the floods.
	ok, failed := okN.Load(), failN.Load()
	fe, _ := firstErr.Load().(string)
	t.Logf("steady load during the floods: %d answered, %d failed (%.2f%%; first error: %s)", ok, failed, 100*float64(failed)/float64(max(ok+failed, 1)), fe)
	if ok < 100 || float64(failed) > 0.05*float64(ok+failed) {
		t.Errorf("steady load: %d answered, %d failed: want at least 95%% answered (and 100 requests)", ok, failed)
	}

	// The node side of direct server return, before the connections are used again: each idle
	// connection's flow on its pod's node, with its own VIP (else the pod's replies are not
	// given the VIP the client sent to).
	nodeFlows := map[netip.AddrPort]dsr.Flow{} // client -> its flow
	for _, a := range s.Agents {
		p, err := a.DSR()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.Flows {
			if f.Client.Addr() == c.Addr4 || f.Client.Addr() == c.Addr6 {
				nodeFlows[f.Client] = f
			}
		}
	}
	noFlow, wrongVIP := 0, 0
	for i, k := range conns {
		f, ok := nodeFlows[k.conn.Local()]
		switch {
		case !ok:
			noFlow++
		case f.VIP != netip.AddrPortFrom(kvips[i%len(kvips)], PortHTTP):
			wrongVIP++
		}
	}
	t.Logf("node side: of the 200 idle connections, %d have no flow on their pod's node, %d one with another VIP", noFlow, wrongVIP)

	// Every idle connection still answers, from its pod.
	var mu sync.Mutex
	broken := 0
	var brokenErr error
	byKind := map[string]int{} // "VIP error": broken connections
	forEach(len(conns), 16, func(i int) {
		k := conns[i]
		a, err := k.conn.Get()
		if err == nil && a.Pod != k.pod {
			err = fmt.Errorf("answered by %s, opened on %s", a.Pod, k.pod)
		}
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		e := err.Error()
		if j := strings.LastIndex(e, ": "); j >= 0 {
			e = e[j+2:]
		}
		byKind[kvips[i%len(kvips)].String()+" "+e]++
		broken++
		if brokenErr == nil {
			brokenErr = fmt.Errorf("%s: %w", k.conn.Local(), err)
		}
	})
	t.Logf("keep-alive connections: %d kept their pods, %d broken %v (first: %v)", len(conns)-broken, broken, byKind, brokenErr)
	if broken != 0 {
		t.Errorf("%d of %d established connections broken or moved by the floods: %v", broken, len(conns), brokenErr)
	}
}

// conntrackEntries is each gateway's xlb_conntrack_entries.
func conntrackEntries(t *testing.T, s *Site) []float64 {
	t.Helper()
	return gatewaySums(t, s, "xlb_conntrack_entries")
}

// setMTU sets the MTU of each link (namespace, interface) and restores 1500 when the test
// ends.
func setMTU(t *testing.T, mtu int, links ...netLink) {
	t.Helper()
	for _, l := range links {
		t.Cleanup(func() {
			if err := l.ns.IP(fmt.Sprintf("link set dev %s mtu 1500", l.ifname)); err != nil {
				t.Errorf("restore the MTU: %v", err)
			}
		})
		if err := l.ns.IP(fmt.Sprintf("link set dev %s mtu %d", l.ifname, mtu)); err != nil {
			t.Fatal(err)
		}
	}
}

type netLink struct {
	ns     *netlab.NS
	ifname string
}

// transfer uploads (POST) or downloads (GET) size bytes through dst on a new connection, within
// 30 s: without path MTU discovery a full-size segment with DF set never arrives and it stalls.
func transfer(ctx context.Context, c *Client, dst netip.AddrPort, size int, upload bool) error {
	conn, err := c.Dial(ctx, dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	hc := NewHTTPConn(conn)
	var req *http.Request
	if upload {
		req, err = http.NewRequest(http.MethodPost, "http://vip/bytes/", bytes.NewReader(bytes.Repeat([]byte{0xa5}, size)))
	} else {
		req, err = http.NewRequest(http.MethodGet, "http://vip/bytes/"+strconv.Itoa(size), nil)
	}
	if err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(hc); err != nil {
		return fmt.Errorf("%s: send: %w", dst, err)
	}
	resp, err := http.ReadResponse(hc.br, req)
	if err != nil {
		return fmt.Errorf("%s: read the answer: %w", dst, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: read the body (%d bytes so far): %w", dst, len(body), err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", dst, resp.StatusCode, body)
	}
	if upload {
		if got := strings.TrimSpace(string(body)); got != strconv.Itoa(size) {
			return fmt.Errorf("%s: the pod read %s bytes, want %d", dst, got, size)
		}
	} else if len(body) != size {
		return fmt.Errorf("%s: %d bytes downloaded, want %d", dst, len(body), size)
	}
	return nil
}

// testPathMTU: full-size traffic across a narrower link (MTU 1400), each direction, both
// families, 4 MB per transfer on a new connection:
//   - client to pod (upload): the gateways' cluster legs (both ends of each veth) are narrowed;
//     the gateway's datapath answers the client's full-size segments with "too big"
//     (icmp_too_big_client) and the upload completes.
//   - pod to client (download): with direct server return the replies bypass the gateways, so
//     the router's side of the client's link is narrowed (the client does not know: it sends
//     only requests and ACKs); the router's "too big" goes to the VIP, and the gateway that
//     knows the flow relays it to the pod (icmp_to_backend). In the return-path topology the
//     gateways' upstream links are narrowed instead, and the gateway answers the pod's
//     full-size replies itself (icmp_too_big_backend).
func testPathMTU(t *testing.T, s *Site) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Clients[0]
	const size = 4 << 20
	dsts := []netip.AddrPort{netip.AddrPortFrom(VIP4, PortHTTP), netip.AddrPortFrom(VIP6, PortHTTP)}
	run := func(t *testing.T, upload bool, counter string, links ...netLink) {
		setMTU(t, 1400, links...)
		before := reasons(t, s, counter)
		for _, dst := range dsts {
			start := time.Now()
			for i := range 4 { // 4 connections: both gateways, likely
				if err := transfer(ctx, c, dst, size, upload); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
			}
			t.Logf("%s: 4 x %d MB in %v", dst, size>>20, time.Since(start).Round(time.Millisecond))
		}
		d := sub(reasons(t, s, counter), before)
		t.Logf("%s on the gateways: %v", counter, d)
		if d[0]+d[1] == 0 {
			t.Errorf("%s did not move: nothing crossed the narrow link at full size", counter)
		}
	}
	// The download first: once the client has learned the narrower path to a VIP (the upload),
	// its SYNs advertise an MSS that fits it, and the pod never sends a full-size segment.
	t.Run("Download", func(t *testing.T) {
		if s.DSR() {
			run(t, false, "icmp_to_backend", netLink{s.Router.NS, c.Name})
			return
		}
		var links []netLink
		for _, g := range s.Gateways {
			links = append(links, netLink{g.NS, "up0"}, netLink{s.Router.NS, g.Name})
		}
		run(t, false, "icmp_too_big_backend", links...)
	})
	t.Run("Upload", func(t *testing.T) {
		var links []netLink
		for _, g := range s.Gateways {
			links = append(links, netLink{g.NS, "cl0"}, netLink{s.L2, g.Name})
		}
		run(t, true, "icmp_too_big_client", links...)
	})
}

// testFragments: fragFlood IPv4 first fragments with random IP ids (their datagrams never
// complete) to the VIP's UDP echo port at fragRate, all through g1 (the
// router's route pinned to it), while the client sends
// real 3,000-byte datagrams (its kernel fragments them) to the same port every 100 ms; then 10
// more after it. Every datagram after the flood is echoed whole; each flood packet reached a
// pod or was dropped on a named counter; above the budget (FRAG_BUDGET per second), first
// fragments are forwarded without being remembered (frag_rate_limited), and no gateway
// remembers more than its budget allows.
func testFragments(t *testing.T, s *Site, atk attacker) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Clients[0]
	// The flood's datagrams wait in the pods' reassembly queues: give them room and a short
	// life, so that the pods' own fragment memory (4 MiB, 30 s by default) is not what is
	// measured.
	for _, p := range s.Pods {
		for k, v := range map[string]string{"net.ipv4.ipfrag_high_thresh": strconv.Itoa(256 << 20), "net.ipv4.ipfrag_time": "5"} {
			if err := p.NS.SetSysctl(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	counters := newPodCountersIfNeeded(t, s)
	conn, err := c.ListenUDP(VIP4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := netip.AddrPortFrom(VIP4, PortEcho)
	payload := bytes.Repeat([]byte("fragmented-datagram "), 150) // 3,000 bytes: 3 fragments
	echo := func() error {
		got, _, err := Exchange(conn, dst, payload)
		if err == nil && !bytes.Equal(got, payload) {
			err = fmt.Errorf("the echo differs (%d bytes)", len(got))
		}
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("a fragmented datagram before the flood: %v", err)
	}

	// All of it through g1 (the router's route to the VIPs via g1 alone), so that one gateway
	// gets the whole flood: its budget is spent within the first second. Both again after.
	g1 := s.Gateways[0]
	if err := s.RouteVia(g1); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.RouteVia(s.Gateways...); err != nil {
			t.Errorf("restore the route via every gateway: %v", err)
		}
	}()
	// The budget's window opened by that datagram ends: the flood opens its own.
	time.Sleep(1100 * time.Millisecond)
	before, pods0 := allReasons(t, s), counters.read(t)
	fwd0, limited0 := reasons(t, s, "nat_forward"), reasons(t, s, "frag_rate_limited")
	f := atk.flood(FloodFirstFrag, fragRate, fragFlood, 10*time.Second, dst)
	var res FloodResult
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, ferr = f.Run(ctx)
	}()
	var duringOK, duringFail int
	for i := 0; i < 100; i++ {
		select {
		case <-done:
			i = 100
			continue
		default:
		}
		if err := echo(); err != nil {
			duringFail++
		} else {
			duringOK++
		}
		time.Sleep(100 * time.Millisecond)
	}
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
	time.Sleep(time.Second)
	afterOK := 0
	var afterErr error
	for range 10 {
		if err := echo(); err != nil {
			afterErr = err
		} else {
			afterOK++
		}
	}
	time.Sleep(500 * time.Millisecond)
	after, pods1 := allReasons(t, s), counters.read(t)
	fwd, limited := sub(reasons(t, s, "nat_forward"), fwd0), sub(reasons(t, s, "frag_rate_limited"), limited0)
	d := moved(before, after)
	got := pods1[FloodFirstFrag] - pods0[FloodFirstFrag]
	drops := sumMatching(d, func(k string) bool { return strings.HasPrefix(k, "drop_") })
	t.Logf("first-fragment flood: %d packets in %v (%.0f/s); %d reached a pod; gateways' counters moved by %v",
		res.Sent, res.Took.Round(time.Millisecond), res.Rate(), got, d)
	t.Logf("3,000-byte datagrams echoed: %d of %d during the flood, %d of 10 after (last error: %v)",
		duringOK, duringOK+duringFail, afterOK, afterErr)
	if afterOK != 10 {
		t.Errorf("after the flood %d of 10 fragmented datagrams echoed (last error: %v)", afterOK, afterErr)
	}
	if undelivered := float64(res.Sent - got); undelivered > drops {
		t.Errorf("%.0f first fragments neither reached a pod nor were counted on a drop_* counter", undelivered-drops)
	}
	// A gateway remembers at most fragBudget first fragments a second (give or take its CPUs
	// racing for the last ones), in windows the flood's first fragment opened: over its
	// ceil(duration) windows, the rest are counted frag_rate_limited. (nat_forward also counts
	// the real datagrams' fragments: a few dozen.)
	windows := math.Ceil((res.Took + 50*time.Millisecond).Seconds())
	t.Logf("packets forwarded per gateway %v (first fragments and the real datagrams'), frag_rate_limited %v; at most %d remembered a second per gateway, %.0f window(s)",
		fwd, limited, fragBudget, windows)
	for i, g := range s.Gateways {
		if limited[i] > fwd[i] {
			t.Errorf("%s: frag_rate_limited %v, more than the %v packets it forwarded", g.Name, limited[i], fwd[i])
		}
		if kept := fwd[i] - limited[i]; kept > windows*fragBudget+200 {
			t.Errorf("%s remembered up to %v first fragments in %.0f window(s) (forwarded %v, frag_rate_limited %v): over its budget of %d a second",
				g.Name, kept, windows, fwd[i], limited[i], fragBudget)
		}
	}
	if limited[0] == 0 {
		t.Logf("g1 never spent its budget (%v forwarded in %v): frag_rate_limited proves nothing this run", fwd[0], res.Took.Round(time.Millisecond))
	}
}

// newPodCountersIfNeeded (re)installs the pods' counters on every pod the site has now.
func newPodCountersIfNeeded(t *testing.T, s *Site) podCounters {
	t.Helper()
	var fresh []*Pod
	for _, p := range s.Pods {
		if _, err := nft(p.NS, "", "list", "table", "ip", nftTable); err != nil {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) > 0 {
		newPodCounters(t, fresh)
	}
	return podCounters{pods: s.Pods}
}

// TestFloodFrames checks the flood generator's frames against gopacket: the fields it sets and
// its checksums (no root, no site).
func TestFloodFrames(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	for _, k := range []FloodKind{FloodSYN, FloodACK, FloodUDP, FloodFirstFrag} {
		f := &Flood{Kind: k, SrcMAC: mac, DstMAC: mac, Sources: floodSrcOf[k]}
		dst := netip.AddrPortFrom(VIP4, 80)
		frame := f.frame(make([]byte, 128), rand.New(rand.NewPCG(1, 2)), 0xc6130001, dst)
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			t.Fatalf("%s: no IPv4 layer: %v", k, pkt)
		}
		if ip.SrcIP.String() != "198.19.0.1" || ip.DstIP.String() != VIP4.String() {
			t.Errorf("%s: %s > %s", k, ip.SrcIP, ip.DstIP)
		}
		// Serialize again with checksums computed: the same bytes.
		buf := gopacket.NewSerializeBuffer()
		var ls []gopacket.SerializableLayer
		for _, l := range pkt.Layers() {
			sl, ok := l.(gopacket.SerializableLayer)
			if !ok {
				continue
			}
			if tl, ok := l.(*layers.TCP); ok {
				_ = tl.SetNetworkLayerForChecksum(ip)
			}
			if ul, ok := l.(*layers.UDP); ok {
				_ = ul.SetNetworkLayerForChecksum(ip)
			}
			ls = append(ls, sl)
		}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: k != FloodFirstFrag}, ls...); err != nil {
			t.Fatal(err)
		}
		// (gopacket pads the frame to Ethernet's 60 bytes; the kernel does the same.)
		if out := buf.Bytes(); len(out) < len(frame) || !bytes.Equal(out[:len(frame)], frame) || bytes.Count(out[len(frame):], []byte{0}) != len(out)-len(frame) {
			t.Errorf("%s: frame\n%x\nre-serialized\n%x", k, frame, buf.Bytes())
		}
	}
}
