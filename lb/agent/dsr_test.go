// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// dsrPair is the TCP pair of frontend vip and endpoint ep.
func dsrPair(vip, ep string) datapath.DSRService {
	f := netip.MustParseAddrPort(vip)
	return datapath.DSRService{Frontend: datapath.Frontend{Addr: f.Addr(), Port: f.Port(), Proto: datapath.TCP}, Endpoint: netip.MustParseAddrPort(ep)}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// waitFor polls cond every 10 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDSRSide: the side adopts the pairs an earlier agent left and attaches both programs to
// the uplinks; a pass applies the pairs, detaches what an earlier agent attached elsewhere,
// and attaches the egress program to the interfaces toward the node's Pods (never twice to an
// uplink); the rescan follows Pods that come and go; a failed route look-up detaches nothing;
// an interface toward a Pod that cannot be attached is logged once and retried, an uplink's
// failure is the pass's error; without the hairpin only the uplinks are attached.
func TestDSRSide(t *testing.T) {
	log, logs := newLogs(t)
	dp := newFakeDSR()
	a, b, c := dsrPair("198.18.100.1:80", "198.18.4.2:8080"), dsrPair("198.18.100.1:80", "198.18.4.3:8080"), dsrPair("198.18.100.2:443", "198.18.5.7:8443")
	dp.pairs[a], dp.pairs[b] = true, true
	dp.ifs["n0"], dp.ifs["old0"], dp.ifs["veth9"] = datapath.DSRBoth, datapath.DSRBoth, datapath.DSREgress
	routes := &fakeRoutes{table: map[netip.Prefix][]string{}}
	routes.set("198.18.4.3/32", "v0")
	routes.set("198.18.5.0/24", "v1", "v2")
	routes.set("198.18.9.9/32", "n0") // a host-network endpoint: its route is the uplink's
	d, err := newDSRSide(DSROptions{Datapath: dp, Uplinks: []string{"n0", "n1"}, Routes: routes, Rescan: 10 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	if ops := dp.takeOps(); !slices.Equal(ops, []string{"attach n1 both"}) {
		t.Errorf("at start: %q, want n1 attached both ways (n0 adopted)", ops)
	}
	if d.rec.Pairs() != 2 {
		t.Errorf("adopted %d pairs, want 2", d.rec.Pairs())
	}
	targets := prefixes("198.18.4.3/32", "198.18.5.0/24", "198.18.9.9/32")
	if err := d.apply(map[datapath.DSRService]bool{b: true, c: true}, targets); err != nil {
		t.Fatal(err)
	}
	if got, want := dp.held(), []string{"198.18.100.1:80/TCP -> 198.18.4.3:8080", "198.18.100.2:443/TCP -> 198.18.5.7:8443"}; !slices.Equal(got, want) {
		t.Errorf("pairs %q, want %q", got, want)
	}
	want := []string{"detach old0 both", "detach veth9 egress", "attach v0 egress", "attach v1 egress", "attach v2 egress"}
	if ops := dp.takeOps(); !slices.Equal(ops, want) {
		t.Errorf("first pass: %q, want %q", ops, want)
	}
	if logs.count(`interfaces=3 added="[v0 v1 v2]"`) != 1 {
		t.Error("the interfaces toward the Pods are not logged")
	}
	if !d.applied.Load() {
		t.Error("not applied after a pass")
	}

	// The rescan: the Pod behind v2 goes, one behind v3 comes.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.rescanLoop(ctx) }()
	defer func() { cancel(); <-done }()
	routes.set("198.18.5.0/24", "v1", "v3")
	waitFor(t, "the rescan attaches v3 and detaches v2", func() bool {
		ifs := dp.Interfaces()
		return ifs["v3"] == datapath.DSREgress && ifs["v2"] == 0
	})
	// A failed look-up detaches nothing, and is logged once.
	routes.mu.Lock()
	routes.err = errors.New("netlink: no luck")
	routes.mu.Unlock()
	waitFor(t, "the failed look-up logged", func() bool { return logs.count("netlink: no luck") == 1 })
	time.Sleep(50 * time.Millisecond)
	if ifs := dp.Interfaces(); ifs["v1"] != datapath.DSREgress || ifs["v3"] != datapath.DSREgress || logs.count("netlink: no luck") != 1 {
		t.Errorf("after failed look-ups: %v, logged %d times", ifs, logs.count("netlink: no luck"))
	}
	routes.mu.Lock()
	routes.err = nil
	routes.mu.Unlock()
	// A Pod's interface that cannot be attached (gone between look-up and attach): logged once,
	// not the pass's error, retried.
	dp.mu.Lock()
	dp.failAttach["v1"] = true
	dp.mu.Unlock()
	dp.Detach("v1", datapath.DSREgress)
	if err := d.apply(map[datapath.DSRService]bool{b: true, c: true}, targets); err != nil {
		t.Errorf("a pass with a Pod's interface failing: %v, want no error", err)
	}
	waitFor(t, "the failed attach logged", func() bool { return logs.count("attach to v1: no such network interface") == 1 })
	dp.mu.Lock()
	delete(dp.failAttach, "v1")
	dp.mu.Unlock()
	waitFor(t, "v1 attached again by the rescan", func() bool { return dp.Interfaces()["v1"] == datapath.DSREgress })
	// An uplink that cannot be attached, a pair refused: the pass's error (retried).
	dp.mu.Lock()
	dp.failAttach["n1"] = true
	dp.mu.Unlock()
	dp.Detach("n1", datapath.DSRBoth)
	if err := d.apply(map[datapath.DSRService]bool{b: true, c: true}, targets); err == nil || !strings.Contains(err.Error(), "n1") {
		t.Errorf("a pass with an uplink failing: %v, want its error", err)
	}
	dp.mu.Lock()
	delete(dp.failAttach, "n1")
	dp.failPair[a] = true
	dp.mu.Unlock()
	if err := d.apply(map[datapath.DSRService]bool{a: true}, targets); !errors.Is(err, errRefused) {
		t.Errorf("a pass with a pair refused: %v, want its error", err)
	}
	cancel()
	<-done

	s := d.stats()
	if s.pairs != 0 || s.interfaces[datapath.DSRBoth] != 2 || s.interfaces[datapath.DSREgress] != 3 || s.err != nil {
		t.Errorf("stats %+v: want 0 pairs (b, c deleted, a refused), 2 uplinks, 3 interfaces toward Pods", s)
	}
	d.stop(false)
	if !dp.closed || dp.removed {
		t.Errorf("stop(false): closed %v removed %v", dp.closed, dp.removed)
	}
	d.stop(true)
	if !dp.removed {
		t.Error("stop(true) did not remove")
	}

	// Without the hairpin: the uplinks only.
	dp = newFakeDSR()
	dp.ifs["veth9"] = datapath.DSREgress
	d, err = newDSRSide(DSROptions{Datapath: dp, Uplinks: []string{"n0"}, Routes: routes, NoHairpin: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.apply(nil, targets); err != nil {
		t.Fatal(err)
	}
	if ops := dp.takeOps(); !slices.Equal(ops, []string{"attach n0 both", "detach veth9 egress"}) {
		t.Errorf("without the hairpin: %q", ops)
	}
	if _, err := newDSRSide(DSROptions{Datapath: dp}, log); err == nil {
		t.Error("a side without uplinks started")
	}
}

// TestLocalTargets: the addresses of the local backends, each once, in order.
func TestLocalTargets(t *testing.T) {
	s1 := service("a", "198.18.100.1", 80, 8080, datapath.TCP, "198.18.4.3", "198.18.4.2", "198.18.6.1")
	s2 := service("b", "2001:db8:100::1", 80, 8080, datapath.TCP, "2001:db8:4::2", "198.18.4.2")
	for i := range s1.Backends {
		s1.Backends[i].Node = "n1"
	}
	s1.Backends[2].Node = "n2"
	s2.Backends[0].Node, s2.Backends[1].Node = "n1", "n1"
	got := localTargets([]lb.Service{s1, s2}, func(b lb.Backend) bool { return b.Node == "n1" })
	want := prefixes("198.18.4.2/32", "198.18.4.3/32", "2001:db8:4::2/128")
	if !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// TestPodInterfaces: the interfaces toward the node's Pods, from the routes and links: the
// longest route of an address, every route inside a Pod CIDR and the CIDR's own, a bridge's
// ports for the bridge; routes through a gateway, non-Ethernet links and unknown ones left out.
func TestPodInterfaces(t *testing.T) {
	links := map[int]linkInfo{
		1: {name: "lo"},
		2: {name: "eth0", ethernet: true},
		3: {name: "cali1", ethernet: true},
		4: {name: "cali2", ethernet: true},
		5: {name: "cni0", ethernet: true, bridge: true},
		6: {name: "veth1", ethernet: true, master: 5},
		7: {name: "veth2", ethernet: true, master: 5},
		8: {name: "wg0"},
		9: {name: "cali6", ethernet: true},
	}
	r := func(p string, idx int) directRoute { return directRoute{dst: netip.MustParsePrefix(p), ifindex: idx} }
	routes := []directRoute{
		r("198.18.1.0/24", 2),     // the node's uplink subnet
		r("198.18.4.2/32", 3),     // Calico-style: a route per Pod
		r("198.18.4.3/32", 4),     //
		r("198.18.6.0/24", 5),     // a bridge CNI's Pod CIDR
		r("198.18.7.0/24", 8),     // a tunnel
		r("198.18.4.9/32", 42),    // a link gone meanwhile
		r("2001:db8:4::2/128", 9), //
	}
	for _, c := range []struct {
		targets []netip.Prefix
		want    []string
	}{
		{prefixes("198.18.4.2/32"), []string{"cali1"}},
		{prefixes("198.18.4.0/24"), []string{"cali1", "cali2"}},
		{prefixes("198.18.6.5/32"), []string{"veth1", "veth2"}},
		{prefixes("198.18.6.0/24", "198.18.4.3/32", "2001:db8:4::/64"), []string{"cali2", "cali6", "veth1", "veth2"}},
		{prefixes("198.18.1.7/32"), []string{"eth0"}},
		{prefixes("198.18.7.1/32", "198.18.4.9/32", "198.18.200.1/32"), nil},
		{nil, nil},
	} {
		if got := podInterfaces(c.targets, routes, links); !slices.Equal(got, c.want) {
			t.Errorf("%v: %q, want %q", c.targets, got, c.want)
		}
	}
}

// fileConfig is a gateway config with web (VIP .1, backends on n1 and n2, one of n1's marked
// dsr: false) and, with more, dns (VIP .2, a backend on n1).
func fileConfig(more bool) string {
	s := `interfaces: [{name: ext0, role: both}]
datapath: {forwarding: dsr}
services:
  - name: web
    vips: [198.18.100.1]
    ports: [{port: 80, targetPort: 8080}]
    backends:
      - {address: 198.18.4.2, node: n1}
      - {address: 198.18.4.3, node: n1, dsr: false}
      - {address: 198.18.4.9, node: n2}
`
	if more {
		s += `  - name: dns
    vips: [198.18.100.2]
    ports: [{port: 53, protocol: UDP, targetPort: 5353}]
    backends: [{address: 198.18.4.2, node: n1}]
`
	}
	return s
}

// TestRunFile runs the agent in file mode (no apiserver, no socket load balancer): the pairs
// of the file's backends on its node marked dsr, the interfaces toward every backend on the
// node, /healthz and /metrics; SIGHUP applies a changed file, keeps the last good pairs over a
// bad one; at exit the pinned datapath is closed, with Cleanup removed.
func TestRunFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "xlb.yaml")
	if err := os.WriteFile(path, []byte(fileConfig(false)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cleanup := range []bool{false, true} {
		log, logs := newLogs(t)
		dp := newFakeDSR()
		dp.counters["carrier_accepted"], dp.counters["reply_rewritten"] = 3, 5
		routes := &fakeRoutes{table: map[netip.Prefix][]string{}}
		routes.set("198.18.4.2/32", "v0")
		routes.set("198.18.4.3/32", "v1")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		reload := make(chan os.Signal, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{Node: "n1", ConfigPath: path, Reload: reload, Listener: ln, Cleanup: cleanup, Log: log,
				DSR: &DSROptions{Datapath: dp, Uplinks: []string{"n0"}, PinPath: "/sys/fs/bpf/test", Routes: routes}})
		}()
		httpGet := func(p string) (int, string) {
			resp, err := http.Get("http://" + ln.Addr().String() + p)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			return resp.StatusCode, b.String()
		}
		web := "198.18.100.1:80/TCP -> 198.18.4.2:8080"
		waitFor(t, "web's pair of n1", func() bool { return slices.Equal(dp.held(), []string{web}) })
		if ifs := dp.Interfaces(); ifs["n0"] != datapath.DSRBoth || ifs["v0"] != datapath.DSREgress || ifs["v1"] != datapath.DSREgress || len(ifs) != 3 {
			t.Errorf("interfaces %v: want n0 both, v0 and v1 (both backends on n1, dsr or not) egress", ifs)
		}
		if code, _ := httpGet("/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d", code)
		}
		_, body := httpGet("/metrics")
		for _, want := range []string{"xlb_agent_dsr_pairs 1", `xlb_agent_dsr_packets_total{counter="carrier_accepted"} 3`,
			`xlb_agent_dsr_packets_total{counter="reply_rewritten"} 5`, `xlb_agent_dsr_interfaces{direction="both"} 1`,
			`xlb_agent_dsr_interfaces{direction="egress"} 2`, "xlb_agent_scrape_errors 0"} {
			if !strings.Contains(body, want+"\n") {
				t.Errorf("/metrics lacks %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "xlb_agent_frontends") {
			t.Errorf("file mode exports the socket load balancer's metrics:\n%s", body)
		}
		// A bad file: logged, the pairs stay.
		if err := os.WriteFile(path, []byte("interfaces: []\nservices: 7\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		reload <- syscall.SIGHUP
		waitFor(t, "the bad file rejected", func() bool { return logs.count("config reload rejected; still serving the previous pairs") == 1 })
		if !slices.Equal(dp.held(), []string{web}) {
			t.Errorf("after a bad file: %q", dp.held())
		}
		// A good one: dns's pair joins.
		if err := os.WriteFile(path, []byte(fileConfig(true)), 0o600); err != nil {
			t.Fatal(err)
		}
		reload <- syscall.SIGHUP
		waitFor(t, "dns's pair after the reload", func() bool {
			return slices.Equal(dp.held(), []string{web, "198.18.100.2:53/UDP -> 198.18.4.2:5353"})
		})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if dp.closed == cleanup || dp.removed != cleanup {
			t.Errorf("at exit with cleanup %v: closed %v removed %v", cleanup, dp.closed, dp.removed)
		}
		if err := os.WriteFile(path, []byte(fileConfig(false)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A file that cannot be read keeps the agent from starting, and the datapath is stopped.
	dp := newFakeDSR()
	err := Run(context.Background(), Options{Node: "n1", ConfigPath: filepath.Join(dir, "absent.yaml"),
		DSR: &DSROptions{Datapath: dp, Uplinks: []string{"n0"}, PinPath: "/sys/fs/bpf/test", Routes: &fakeRoutes{}}})
	if !errors.Is(err, os.ErrNotExist) || !dp.closed {
		t.Errorf("Run with no file: %v, datapath closed %v", err, dp.closed)
	}
	// File mode needs DSR and runs no socket load balancer.
	sock := newFakeSocketLB()
	if err := Run(context.Background(), Options{Node: "n1", ConfigPath: path, Datapath: sock}); err == nil || !sock.closedDP && !sock.removed {
		t.Errorf("file mode with a socket load balancer: %v", err)
	}
}
