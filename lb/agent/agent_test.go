// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// get serves a GET of path from h and returns the status and body.
func get(h http.Handler, path string) (int, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w.Code, w.Body.String()
}

// service is a Service model at cluster IP vip with one port and the endpoints at addrs.
func service(name, vip string, port, target uint16, proto datapath.Protocol, addrs ...string) lb.Service {
	s := lb.Service{Name: "default/" + name, VIPs: []netip.Addr{netip.MustParseAddr(vip)},
		Ports: []lb.Port{{Name: "p", Port: port, Protocol: proto, TargetPort: target}}}
	for _, a := range addrs {
		s.Backends = append(s.Backends, lb.Backend{Addr: netip.MustParseAddr(a), Weight: 1})
	}
	return s
}

// pass is the agent's pass over services (as kube.Agent makes it): their plan.
func pass(services ...lb.Service) kube.ClusterIPs {
	in := make([]lb.ConnectService, len(services))
	for i, s := range services {
		in[i] = lb.ConnectService{Service: s}
	}
	plan, _, _ := lb.PlanConnect(in)
	return kube.ClusterIPs{Plan: plan, Services: services}
}

// The metrics' help, as dashboards and docs/agent.md know them.
var wantHelp = []string{
	"# HELP xlb_agent_frontends Cluster IP frontends (address, port, protocol) balanced on this node.",
	"# HELP xlb_agent_socket_events_total Socket calls the programs acted on: connect (sent to an endpoint), refused (no endpoint serves), datagram (unconnected UDP sent to an endpoint), datagram_kept (of those, to the socket's earlier endpoint), revnat (cluster IP given back by recvmsg or getpeername), affinity_kept (a connection sent to its client's endpoint, sessionAffinity: ClientIP), no_slot (never, unless a map write failed), udp_closed (a connected UDP socket closed by the agent: its endpoint left the frontend).",
	"# HELP xlb_agent_scrape_errors Counters that could not be read during this scrape.",
}

// TestApply: each plan is applied through the reconciler; /healthz answers once a plan is applied; the connected UDP sockets of a UDP
// frontend that lost an endpoint are closed in NetnsDir and counted (udp_closed), unless the
// datapath cannot; /metrics exports the datapath's counters under today's names.
func TestApply(t *testing.T) {
	log, logs := newLogs(t)
	dp := newFakeSocketLB()
	a, err := newAgent(Options{Node: "n1", Client: &kubernetes.Clientset{}, Datapath: dp, PinPath: "/sys/fs/bpf/test", NetnsDir: "/run/netns-test", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.handler()
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(h, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "cluster IPs not applied yet") {
		t.Errorf("/healthz before any plan: %d %q, want 503", code, body)
	}
	web := service("web", "198.18.96.1", 80, 8080, datapath.TCP, "198.18.1.10")
	dns := service("dns", "198.18.96.10", 53, 5353, datapath.UDP, "198.18.1.20", "198.18.1.21", "198.18.1.22")
	all := service("all", "198.18.96.20", 0, 0, datapath.TCP, "198.18.1.30") // all ports: cannot be balanced at connect
	dnsFront := datapath.Frontend{Addr: netip.MustParseAddr("198.18.96.10"), Port: 53, Proto: datapath.UDP}

	for range 2 {
		if err := a.apply(pass(web, dns, all)); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.count(`msg="cluster IPs applied" frontends=2 added=2 updated=0 removed=0`); n != 1 {
		t.Errorf("%d applies logged, want the first only (the second changed nothing)", n)
	}
	if got := dp.held[dnsFront].Endpoints; len(got) != 3 {
		t.Errorf("the datapath holds dns with %v", got)
	}
	if code, body := get(h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz after a plan: %d %q, want 200 ok", code, body)
	}
	if len(dp.closeCalls) != 0 {
		t.Errorf("sockets closed with no endpoint lost: %v", dp.closeCalls)
	}

	// dns loses .22: two sockets closed, one could not be.
	sock := func(ep string, err error) datapath.ClosedSocket {
		return datapath.ClosedSocket{Netns: "/run/netns-test/pod", Endpoint: netip.MustParseAddrPort(ep), Frontend: netip.MustParseAddrPort("198.18.96.10:53"), Err: err}
	}
	dp.closed = []datapath.ClosedSocket{sock("198.18.1.22:5353", nil), sock("198.18.1.22:5353", nil), sock("198.18.1.22:5353", errors.New("EBUSY"))}
	dns = service("dns", "198.18.96.10", 53, 5353, datapath.UDP, "198.18.1.20", "198.18.1.21")
	if err := a.apply(pass(web, dns)); err != nil {
		t.Fatal(err)
	}
	if len(dp.closeCalls) != 1 || dp.closeCalls[0] != "/run/netns-test" {
		t.Errorf("CloseLostUDP calls %q, want one with the NetnsDir", dp.closeCalls)
	}
	if logs.count(`msg="closed a connected UDP socket: its endpoint left the frontend" netns=/run/netns-test/pod endpoint=198.18.1.22:5353 frontend=198.18.96.10:53`) != 2 ||
		logs.count(`msg="could not close a connected UDP socket of a removed endpoint"`) != 1 {
		t.Error("the closed sockets are not logged each")
	}
	dp.counters = datapath.SocketCounters{Connects: 7, Refused: 1, Datagrams: 5, DatagramsKept: 4, Revnat: 9, NoSlot: 0, AffinityKept: 2}
	code, body := get(h, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range append(wantHelp, "xlb_agent_frontends 2", "xlb_agent_scrape_errors 0",
		`xlb_agent_socket_events_total{event="connect"} 7`, `xlb_agent_socket_events_total{event="refused"} 1`,
		`xlb_agent_socket_events_total{event="datagram"} 5`, `xlb_agent_socket_events_total{event="datagram_kept"} 4`,
		`xlb_agent_socket_events_total{event="revnat"} 9`, `xlb_agent_socket_events_total{event="no_slot"} 0`,
		`xlb_agent_socket_events_total{event="affinity_kept"} 2`, `xlb_agent_socket_events_total{event="udp_closed"} 2`) {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}

	// A datapath that cannot close sockets at all is quiet about it (said at load); another
	// failure is a warning, and what was closed anyway counts.
	dp.closed, dp.closeErr = nil, fmt.Errorf("socklb: no UDP socket iterator: %w", datapath.ErrUnsupported)
	dns = service("dns", "198.18.96.10", 53, 5353, datapath.UDP, "198.18.1.20")
	if err := a.apply(pass(web, dns)); err != nil {
		t.Fatal(err)
	}
	if len(dp.closeCalls) != 2 || logs.count("closing connected UDP sockets of removed endpoints") != 0 {
		t.Errorf("without socket closing: %d calls, log:\n%s", len(dp.closeCalls), logs)
	}
	dp.closed, dp.closeErr = []datapath.ClosedSocket{sock("198.18.1.20:5353", nil)}, errors.New("socklb: list network namespaces in /run/netns-test: permission denied")
	dns = service("dns", "198.18.96.10", 53, 5353, datapath.UDP, "198.18.1.21")
	if err := a.apply(pass(web, dns)); err != nil {
		t.Fatal(err)
	}
	if logs.count(`msg="closing connected UDP sockets of removed endpoints" err="socklb: list network namespaces`) != 1 {
		t.Error("a failure to close sockets is not logged")
	}
	// A TCP frontend that loses an endpoint closes nothing.
	web = service("web", "198.18.96.1", 80, 8080, datapath.TCP)
	if err := a.apply(pass(web, dns)); err != nil {
		t.Fatal(err)
	}
	if len(dp.closeCalls) != 3 {
		t.Errorf("CloseLostUDP called %d times, want 3 (a TCP frontend's change closes nothing)", len(dp.closeCalls))
	}

	// A write that fails is Apply's error (the agent retries it); the agent stays healthy.
	dp.fail[dnsFront] = true
	dns = service("dns", "198.18.96.10", 53, 5353, datapath.UDP, "198.18.1.21", "198.18.1.22")
	if err := a.apply(pass(web, dns)); !errors.Is(err, errRefused) {
		t.Errorf("apply with a write refused: %v, want the datapath's error", err)
	}
	if code, _ := get(h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after a failed write: %d, want 200", code)
	}
	dp.countersErr = errors.New("stats map gone")
	_, body = get(h, "/metrics")
	if !strings.Contains(body, "xlb_agent_scrape_errors 1\n") || !strings.Contains(body, "xlb_agent_frontends 2\n") || strings.Contains(body, "xlb_agent_socket_events_total{") {
		t.Errorf("/metrics with the counters unreadable:\n%s", body)
	}
	dp.countersErr = nil
	if _, body = get(h, "/metrics"); !strings.Contains(body, `xlb_agent_socket_events_total{event="udp_closed"} 3`+"\n") {
		t.Errorf("udp_closed after 2 + 1 closed sockets:\n%s", body)
	}
}

// TestRunStops: whatever keeps Run from starting, it stops the datapath it was given: Close
// with a pin path (balancing stays), Remove without one or with Cleanup; and it closes the
// listener.
func TestRunStops(t *testing.T) {
	client := &kubernetes.Clientset{}
	for _, c := range []struct {
		name    string
		opts    Options
		want    string // the error
		removed bool
		logged  string
	}{
		{"no client, pinned", Options{Node: "n1", PinPath: "/sys/fs/bpf/test"}, "no kubernetes client", false, "cluster IPs stay balanced as last applied"},
		{"no client, not pinned", Options{Node: "n1"}, "no kubernetes client", true, "cluster IPs are no longer balanced on this node"},
		{"no node, cleanup", Options{Client: client, PinPath: "/sys/fs/bpf/test", Cleanup: true}, "no node name", true, "cluster IPs are no longer balanced on this node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log, logs := newLogs(t)
			dp := newFakeSocketLB()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			c.opts.Datapath, c.opts.Listener, c.opts.Log = dp, ln, log
			err = Run(context.Background(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run: %v, want %q", err, c.want)
			}
			if dp.removed != c.removed || dp.closedDP == c.removed {
				t.Errorf("datapath removed %v, closed %v; want removed %v", dp.removed, dp.closedDP, c.removed)
			}
			if logs.count(c.logged) != 1 {
				t.Errorf("log lacks %q", c.logged)
			}
			if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("the listener after Run: %v, want it closed", err)
			}
		})
	}
	if err := Run(context.Background(), Options{Node: "n1", Client: client}); err == nil {
		t.Error("Run without a datapath: no error")
	}
}
