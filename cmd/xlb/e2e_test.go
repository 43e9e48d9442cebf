// SPDX-License-Identifier: Apache-2.0
package main

// End-to-end test of the daemon: the real `xlb run` process, in the gateway namespace of a
// three-namespace lab, balancing real HTTP traffic between real servers, driven only through its
// config file, signals and its HTTP endpoints.
//
//	client (c0) <-veth-> (gc) gateway (gb) <-veth-> (b0) backend
//	198.18.0.10/24        .0.1  xlb  1.1        198.18.1.10, .11, .12 /24
//
// The VIP 198.18.100.1 is configured on no interface: only the XDP program the daemon attaches
// to the gateway makes it reachable. The daemon is this test binary re-executed (TestMain), so
// no `go build` runs at test time. It needs root (namespaces, XDP, bpffs).

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// envDaemon, set to "1", makes the test binary run cli(os.Args[1:]) instead of the tests: that
// is how the test starts `xlb run` and `xlb cleanup`.
const envDaemon = "XLB_E2E_DAEMON"

func TestMain(m *testing.M) {
	if os.Getenv(envDaemon) == "1" {
		os.Exit(cli(os.Args[1:], os.Stderr))
	}
	if spec := os.Getenv(envAgentClient); spec != "" {
		os.Exit(agentClient(spec))
	}
	if addr := os.Getenv(envAgentHold); addr != "" {
		os.Exit(agentHold(addr))
	}
	os.Exit(m.Run())
}

// Interface names inside the lab namespaces.
const (
	labClientIf    = "c0"
	labGWClientIf  = "gc"
	labGWBackendIf = "gb"
	labBackendIf   = "b0"
)

var (
	labClient    = netip.MustParseAddr("198.18.0.10")
	labGWClient  = netip.MustParseAddr("198.18.0.1")
	labGWBackend = netip.MustParseAddr("198.18.1.1")
	labVIP       = netip.MustParseAddr("198.18.100.1")
	// labBackends: .10 and .11 are in the first config, .12 joins at the reload.
	labBackends = []netip.Addr{
		netip.MustParseAddr("198.18.1.10"),
		netip.MustParseAddr("198.18.1.11"),
		netip.MustParseAddr("198.18.1.12"),
	}
)

const (
	labVIPPort     = 80
	labBackendPort = 8080
	labListen      = "127.0.0.1:9610" // the daemon's HTTP server, on the gateway's loopback

	reqTimeout = 2 * time.Second // bound of one HTTP exchange
	// maxLatency bounds a successful request: TCP retransmits a lost SYN after 1s, so a slower
	// request lost a packet on the way (a SYN dropped for want of a backend, say).
	maxLatency   = 900 * time.Millisecond
	readyTimeout = 20 * time.Second // bound of a daemon start (BPF load, attach, first reconcile)
	pollTimeout  = 5 * time.Second  // bound of waiting for an effect (health, reload, log line)

	// The health check: interval 200ms, timeout 100ms, rise 1, fall 2.
	hcInterval = 200 * time.Millisecond
	hcTimeout  = 100 * time.Millisecond
	hcFall     = 2
)

// TestDaemonE2E runs the daemon end to end: balancing over healthy backends with the client's
// address preserved, health checks taking a dead backend out, SIGHUP adding a backend without
// moving established flows, a broken config rejected without harm, and a SIGKILLed daemon
// whose datapath keeps forwarding and whose successor adopts the pinned state.
func TestDaemonE2E(t *testing.T) {
	start := time.Now()
	l := newLab(t)
	step := func(name string) {
		t.Logf("--- %s (at %v)", name, time.Since(start).Round(time.Millisecond))
	}

	// 3. The daemon, with backends .10 and .11.
	step("start the daemon")
	l.writeConfig(t, labBackends[:2])
	d := l.startDaemon(t)
	// A SIGHUP during start-up (once the datapath load has begun: the pin directory exists)
	// must not end the daemon; it is handled as a reload once running.
	l.waitPinDir(t, d)
	d.signal(t, syscall.SIGHUP)
	l.waitReady(t, d)
	d.waitLog(t, "config reloaded")
	// Ready means every backend has its first verdict in the datapath: both are healthy now.
	m := l.metrics(t)
	for _, b := range labBackends[:2] {
		if v, ok := m.value("xlb_backend_healthy", "service", "web", "backend", b.String()); !ok || v != 1 {
			t.Fatalf("xlb_backend_healthy of %s is %v (found %v) once the daemon is ready, want 1 "+
				"(-1: ready before the first verdict; 0: the gateway's probes fail, see the daemon's log)", b, v, ok)
		}
	}

	// 5. Balanced over both backends, every request answered, the client's address preserved.
	step("balance over .10 and .11")
	counts := l.requests(t, 60)
	for _, b := range labBackends[:2] {
		if counts[b] < 12 {
			t.Errorf("backend %s answered %d of 60 requests, want a fair share (at least 12): %v", b, counts[b], counts)
		}
	}
	if n := counts[labBackends[2]]; n != 0 {
		t.Errorf("backend %s, not configured, answered %d requests", labBackends[2], n)
	}
	m = l.metrics(t)
	if v, ok := m.value("xlb_vip_packets_total", "vip", labVIP.String(), "port", "80"); !ok || v <= 0 {
		t.Errorf("xlb_vip_packets_total for %s:80 is %v (found %v), want > 0", labVIP, v, ok)
	}
	for _, b := range labBackends[:2] {
		if v, ok := m.value("xlb_backend_healthy", "service", "web", "backend", b.String()); !ok || v != 1 {
			t.Errorf("xlb_backend_healthy of %s is %v (found %v), want 1", b, v, ok)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 6. Backend .11 dies: within its fall threshold it takes no new requests, none fail after.
	step("kill backend .11")
	dead := labBackends[1]
	killed := time.Now()
	l.servers[dead].stop()
	// Out of service within (fall + 1) × interval (+10% jitter: the first failing probe may
	// come up to an interval after the kill) + the probe timeout, with a second of slack for
	// the reconcile on a loaded machine; the requests go on half a second longer.
	detect := time.Duration(hcFall+1)*hcInterval*11/10 + hcTimeout + time.Second
	settle := detect + 500*time.Millisecond
	var lastBad time.Time
	var failed, toDead int
	for time.Since(killed) < settle {
		r, err := l.request()
		switch {
		case err != nil:
			failed++
			lastBad = time.Now()
		case r.backend == dead:
			toDead++
			lastBad = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("after the kill: %d requests failed, %d answered by %s; last one %v after the kill",
		failed, toDead, dead, lastBad.Sub(killed).Round(time.Millisecond))
	if took := lastBad.Sub(killed); took > detect {
		t.Errorf("requests failed or reached %s until %v after it died, want none after %v",
			dead, took.Round(time.Millisecond), detect)
	}
	m = l.metrics(t)
	if v, ok := m.value("xlb_backend_healthy", "service", "web", "backend", dead.String()); !ok || v != 0 {
		t.Errorf("xlb_backend_healthy of the killed %s is %v (found %v) %v after the kill, want 0",
			dead, v, ok, time.Since(killed).Round(time.Millisecond))
	}
	if v, ok := m.value("xlb_backend_healthy", "service", "web", "backend", labBackends[0].String()); !ok || v != 1 {
		t.Errorf("xlb_backend_healthy of %s is %v (found %v), want 1", labBackends[0], v, ok)
	}
	counts = l.requests(t, 40)
	if counts[labBackends[0]] != 40 {
		t.Errorf("after %s died, 40 requests went to %v, want all to %s", dead, counts, labBackends[0])
	}
	if t.Failed() {
		t.FailNow()
	}

	// 7. .11 comes back and .12 is added with SIGHUP: .12 takes traffic, and established
	// keep-alive connections keep their backends across the reload.
	step("restore .11")
	l.servers[dead] = l.startServer(t, dead)
	l.waitHealthy(t, dead, 1)
	l.waitTraffic(t, dead)

	step("SIGHUP: add .12")
	// Several connections, so that the new Maglev table very likely moves some of them.
	keep := l.keepAlives(t, 8)
	l.writeConfig(t, labBackends)
	d.signal(t, syscall.SIGHUP)
	checkKeepAlives(t, keep, "right after the SIGHUP")
	d.waitLogN(t, "config reloaded", 2) // the first was the start-up SIGHUP's
	l.waitHealthy(t, labBackends[2], 1)
	l.waitTraffic(t, labBackends[2])
	checkKeepAlives(t, keep, "after the reload")
	counts = l.requests(t, 60)
	for _, b := range labBackends {
		if counts[b] < 5 {
			t.Errorf("backend %s answered %d of 60 requests after the reload, want a share (at least 5): %v", b, counts[b], counts)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 8. A broken config: logged as rejected, the daemon keeps serving the previous one.
	step("SIGHUP with a broken config")
	l.writeFile(t, "interfaces:\n  - name: gc\n    mode: sideways\nservices: [\n")
	d.signal(t, syscall.SIGHUP)
	line := d.waitLog(t, "rejected")
	if !strings.Contains(line, l.cfgPath) {
		t.Errorf("the rejection log line does not name the config file %s: %s", l.cfgPath, line)
	}
	if d.exitedNow() {
		t.Fatalf("the daemon exited after a broken config: %v", d.cmd.ProcessState)
	}
	// A config the parser takes but the health checker refuses (interval below its minimum).
	l.writeConfig(t, labBackends, "interval: 5ms, timeout: 1ms")
	d.signal(t, syscall.SIGHUP)
	line = d.waitLogN(t, "rejected", 2)
	if !strings.Contains(line, l.cfgPath) {
		t.Errorf("the rejection log line does not name the config file %s: %s", l.cfgPath, line)
	}
	m = l.metrics(t)
	if v, ok := m.value("xlb_config_reloads_total", "result", "rejected"); !ok || v != 2 {
		t.Errorf("xlb_config_reloads_total{result=rejected} is %v (found %v), want 2", v, ok)
	}
	for _, b := range labBackends {
		if v, ok := m.value("xlb_backend_healthy", "service", "web", "backend", b.String()); !ok || v != 1 {
			t.Errorf("after the rejected reload, xlb_backend_healthy of %s is %v (found %v), want 1", b, v, ok)
		}
	}
	if d.exitedNow() {
		t.Fatalf("the daemon exited after a broken config: %v", d.cmd.ProcessState)
	}
	l.waitReady(t, d)
	counts = l.requests(t, 60)
	for _, b := range labBackends {
		if counts[b] < 5 {
			t.Errorf("backend %s answered %d of 60 requests after the rejected reload, want a share (at least 5): %v", b, counts[b], counts)
		}
	}
	checkKeepAlives(t, keep, "after the rejected reload")
	if t.Failed() {
		t.FailNow()
	}

	// 9. SIGKILL during a stream of requests: forwarding never stops, and a new daemon adopts
	// the pinned state.
	step("SIGKILL the daemon under load, backend .12 down")
	l.writeConfig(t, labBackends) // the valid config again, for the restart
	// .12 goes down first and the daemon takes it out of service: the restarted daemon, which
	// has no verdict yet, must not put it back (it is in the datapath's backends, not its tables).
	down := labBackends[2]
	l.servers[down].stop()
	l.waitHealthy(t, down, 0)
	l.waitServing(t, 2) // the reconcile that follows the verdict
	load := l.startLoad(t, 5000, 30*time.Second)
	load.waitCount(t, 20)
	d.kill(t)
	killedAt := time.Now()
	if got := l.gatewayXDP(t); got != 2 {
		t.Errorf("%d of the gateway's 2 interfaces have an XDP program after the SIGKILL, want 2", got)
	}
	time.Sleep(500 * time.Millisecond) // forwarding with no daemon
	checkKeepAlives(t, keep, "with no daemon")
	checkShow(t, l.pinPath, labBackends[:2], down)

	step("restart the daemon")
	d2 := l.startDaemon(t)
	l.waitReady(t, d2)
	readyAt := time.Now()
	line = d2.waitLog(t, "adopted datapath state")
	if mm := regexp.MustCompile(`\bvips=(\d+)`).FindStringSubmatch(line); mm == nil {
		t.Errorf("the adoption log line has no vips count: %s", line)
	} else if n, _ := strconv.Atoi(mm[1]); n <= 0 {
		t.Errorf("the restarted daemon adopted %d VIPs, want > 0: %s", n, line)
	}
	time.Sleep(500 * time.Millisecond) // forwarding with the new daemon
	res := load.stop(t)
	var during, after int
	for _, at := range res.times {
		switch {
		case at.After(killedAt) && at.Before(readyAt):
			during++
		case at.After(readyAt):
			after++
		}
	}
	t.Logf("load: %d requests, %d failed; %d answered between the SIGKILL and the new daemon's readiness (%v), %d after; per backend %v",
		len(res.times)+len(res.errs), len(res.errs), during, readyAt.Sub(killedAt).Round(time.Millisecond), after, res.counts)
	for i, err := range res.errs {
		if i == 10 {
			t.Errorf("... and %d more failures", len(res.errs)-10)
			break
		}
		t.Errorf("request during the restart failed: %v", err)
	}
	if during == 0 || after == 0 {
		t.Errorf("the load sent %d requests while no daemon was ready and %d after, want some in both", during, after)
	}
	checkKeepAlives(t, keep, "after the restart")
	l.waitHealthy(t, down, 0)

	step("restore .12")
	l.servers[down] = l.startServer(t, down)
	for _, b := range labBackends {
		l.waitHealthy(t, b, 1)
	}
	l.waitTraffic(t, down)
	counts = l.requests(t, 60)
	for _, b := range labBackends {
		if counts[b] < 5 {
			t.Errorf("backend %s answered %d of 60 requests after the restart, want a share (at least 5): %v", b, counts[b], counts)
		}
	}
	if v, ok := l.metrics(t).value("xlb_vip_packets_total", "vip", labVIP.String(), "port", "80"); !ok || v <= 0 {
		t.Errorf("xlb_vip_packets_total for %s:80 after the restart is %v (found %v), want > 0", labVIP, v, ok)
	}
	step("done")
}

// lab is the topology with its backend servers, and the daemon's files.
type lab struct {
	client, gw, backend *netlab.NS
	pinPath             string // unique, under /sys/fs/bpf
	dir                 string // temporary files
	cfgPath             string // the daemon's config file
	servers             map[netip.Addr]*httpServer
	extra               string // appended to the config writeConfig writes (a bgp section)
	kind                string // datapath.kind writeConfig writes ("": the default, xdp)
}

// newLab builds the lab, removed when t ends: namespaces, links, addresses, routes, forwarding
// on the gateway, the lab settings veth needs, and a server per backend address. It starts no
// daemon, but registers the removal of whatever a daemon pins.
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the daemon's end-to-end test needs root (BPF, netns, bpffs)")
	}
	p := netlab.Prefix()
	l := &lab{
		client:  netlab.New(t, p+"c"),
		gw:      netlab.New(t, p+"g"),
		backend: netlab.New(t, p+"b"),
		pinPath: filepath.Join("/sys/fs/bpf", p),
		dir:     t.TempDir(),
		servers: map[netip.Addr]*httpServer{},
	}
	l.cfgPath = filepath.Join(l.dir, "xlb.yaml")
	// Runs after every daemon is killed (cleanups run last-registered first) and before the
	// namespaces go.
	t.Cleanup(func() { l.cleanupDatapath(t) })

	for _, ns := range []*netlab.NS{l.client, l.gw, l.backend} {
		ns.Sysctl(t, "net.ipv6.conf.default.accept_dad", "0")
	}
	netlab.Veth(t, l.client, labClientIf, "02:00:5e:00:00:10", l.gw, labGWClientIf, "02:00:5e:00:00:01")
	netlab.Veth(t, l.gw, labGWBackendIf, "02:00:5e:00:01:01", l.backend, labBackendIf, "02:00:5e:00:01:10")
	l.client.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", labClient, labClientIf))
	l.gw.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", labGWClient, labGWClientIf))
	l.gw.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", labGWBackend, labGWBackendIf))
	for _, b := range labBackends {
		l.backend.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", b, labBackendIf))
	}
	l.client.MustIP(t, fmt.Sprintf("route add 198.18.100.0/24 via %s", labGWClient))
	l.backend.MustIP(t, fmt.Sprintf("route add 198.18.0.0/24 via %s", labGWBackend))
	l.gw.Forwarding(t)
	netlab.PrepareEnds(t, netlab.End{NS: l.client, Ifname: labClientIf}, netlab.End{NS: l.backend, Ifname: labBackendIf})
	for _, b := range labBackends {
		l.servers[b] = l.startServer(t, b)
	}
	return l
}

// cleanupDatapath runs `xlb cleanup` for the lab's pin path inside the gateway namespace, then
// checks that nothing is left: no pins, no XDP program on the gateway.
func (l *lab) cleanupDatapath(t *testing.T) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.gw.Name, os.Args[0], "cleanup", "--pin-path", l.pinPath)
	cmd.Env = append(os.Environ(), envDaemon+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("xlb cleanup --pin-path %s: %v: %s", l.pinPath, err, out)
	}
	if _, err := os.Stat(l.pinPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin path %s still there after xlb cleanup (stat: %v); removing it", l.pinPath, err)
		_ = os.RemoveAll(l.pinPath)
	}
	if n := l.gatewayXDP(t); n != 0 {
		t.Errorf("%d gateway interfaces still have an XDP program after xlb cleanup", n)
	}
}

// gatewayXDP counts the gateway's interfaces (gc, gb) with an XDP program attached.
func (l *lab) gatewayXDP(t *testing.T) int {
	t.Helper()
	n := 0
	for _, ifname := range []string{labGWClientIf, labGWBackendIf} {
		out, err := exec.Command("ip", "-n", l.gw.Name, "-d", "link", "show", "dev", ifname).CombinedOutput()
		if err != nil {
			t.Errorf("ip link show %s in %s: %v: %s", ifname, l.gw.Name, err, out)
			continue
		}
		if bytes.Contains(out, []byte("prog/xdp")) {
			n++
		}
	}
	return n
}

// writeConfig writes the daemon's config with the given backends for service web.
// timing, if given, replaces the health check's interval and timeout.
func (l *lab) writeConfig(t *testing.T, backends []netip.Addr, timing ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `interfaces:
  - {name: %s, mode: native, role: client}
  - {name: %s, mode: native, role: cluster}
datapath:
  kind: %s
  pinPath: %s
  conntrackSize: 65536
  maglevSlots: %d
listen: %s
log: {format: text, level: info}
services:
  - name: web
    vips: [%s]
    ports:
      - {port: %d, protocol: TCP, targetPort: %d}
    backends:
`, labGWClientIf, labGWBackendIf, cmp.Or(l.kind, "xdp"), l.pinPath, 1<<20, labListen, labVIP, labVIPPort, labBackendPort)
	for _, a := range backends {
		fmt.Fprintf(&b, "      - {address: %s}\n", a)
	}
	tm := fmt.Sprintf("interval: %v, timeout: %v", hcInterval, hcTimeout)
	if len(timing) > 0 {
		tm = timing[0]
	}
	fmt.Fprintf(&b, "    healthCheck: {type: http, path: /healthz, %s, rise: 1, fall: %d}\n", tm, hcFall)
	b.WriteString(l.extra)
	l.writeFile(t, b.String())
}

// writeFile replaces the config file atomically (a reload never reads half a file).
func (l *lab) writeFile(t *testing.T, content string) {
	t.Helper()
	tmp := l.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.cfgPath); err != nil {
		t.Fatal(err)
	}
}

// httpServer is a backend's HTTP server: "/" answers "<its address> <the client's address>",
// "/healthz" answers 200.
type httpServer struct {
	addr netip.Addr
	srv  *http.Server
	done chan struct{}
	once sync.Once
}

// startServer starts addr's server on addr:labBackendPort in the backend namespace; it stops
// when t ends, if not before.
func (l *lab) startServer(t *testing.T, addr netip.Addr) *httpServer {
	t.Helper()
	var ln net.Listener
	err := l.backend.Do(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(addr, labBackendPort).String())
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s:%d in %s: %v", addr, labBackendPort, l.backend.Name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", addr, r.RemoteAddr)
	})
	s := &httpServer{addr: addr, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop closes the listener and every connection, and waits for Serve to return.
func (s *httpServer) stop() {
	s.once.Do(func() {
		_ = s.srv.Close()
		<-s.done
	})
}

// reply is what a backend answered.
type reply struct {
	backend netip.Addr     // the backend that answered
	client  netip.AddrPort // the client address the backend saw
}

// dial connects from the client namespace to the VIP.
func (l *lab) dial() (net.Conn, error) {
	var c net.Conn
	err := l.client.Do(func() (err error) {
		d := net.Dialer{Timeout: reqTimeout}
		c, err = d.Dial("tcp4", netip.AddrPortFrom(labVIP, labVIPPort).String())
		return err
	})
	return c, err
}

// request sends one GET / on a new connection (Connection: close) and checks the answer: a 200
// from a backend that saw this connection's own address and port (the client's real address).
func (l *lab) request() (reply, error) {
	start := time.Now()
	c, err := l.dial()
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	r, err := exchange(c, bufio.NewReader(c), true)
	if took := time.Since(start); err == nil && took > maxLatency {
		return r, fmt.Errorf("request on %s to %s took %v: a packet was lost and retransmitted",
			c.LocalAddr(), r.backend, took.Round(time.Millisecond))
	}
	return r, err
}

// exchange sends GET / on c and reads the answer (see request).
func exchange(c net.Conn, br *bufio.Reader, closeConn bool) (reply, error) {
	if err := c.SetDeadline(time.Now().Add(reqTimeout)); err != nil {
		return reply{}, err
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+netip.AddrPortFrom(labVIP, labVIPPort).String()+"/", nil)
	req.Close = closeConn
	if err := req.Write(c); err != nil {
		return reply{}, fmt.Errorf("send a request on %s: %w", c.LocalAddr(), err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return reply{}, fmt.Errorf("read the response on %s: %w", c.LocalAddr(), err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return reply{}, fmt.Errorf("read the body on %s: %w", c.LocalAddr(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return reply{}, fmt.Errorf("status %s on %s: %q", resp.Status, c.LocalAddr(), body)
	}
	be, cl, _ := strings.Cut(strings.TrimSpace(string(body)), " ")
	var r reply
	if r.backend, err = netip.ParseAddr(be); err != nil {
		return reply{}, fmt.Errorf("answer %q on %s: %w", body, c.LocalAddr(), err)
	}
	if r.client, err = netip.ParseAddrPort(cl); err != nil {
		return reply{}, fmt.Errorf("answer %q on %s: %w", body, c.LocalAddr(), err)
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	if want := netip.AddrPortFrom(local.Addr().Unmap(), local.Port()); r.client != want {
		return r, fmt.Errorf("backend %s saw the client as %s, want %s", r.backend, r.client, want)
	}
	if r.client.Addr() != labClient {
		return r, fmt.Errorf("backend %s saw the client as %s, want the client's address %s", r.backend, r.client, labClient)
	}
	return r, nil
}

// requests sends n requests, each on a new connection, all of which must succeed, and counts
// the answers per backend.
func (l *lab) requests(t *testing.T, n int) map[netip.Addr]int {
	t.Helper()
	counts := map[netip.Addr]int{}
	failed := 0
	for i := range n {
		r, err := l.request()
		if err != nil {
			t.Errorf("request %d of %d: %v", i+1, n, err)
			if failed++; failed == 3 {
				t.Fatalf("giving up after %d failed requests", failed)
			}
			continue
		}
		counts[r.backend]++
	}
	t.Logf("%d requests: %v", n, counts)
	return counts
}

// waitTraffic sends requests until backend answers one; the others must all succeed too.
func (l *lab) waitTraffic(t *testing.T, backend netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	n := 0
	for time.Now().Before(deadline) {
		n++
		r, err := l.request()
		if err != nil {
			t.Errorf("request %d while waiting for %s to get traffic: %v", n, backend, err)
		} else if r.backend == backend {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("backend %s got none of %d requests in %v", backend, n, pollTimeout)
}

// keepAlive is an HTTP/1.1 connection that stays open, and the backend that answered on it.
type keepAlive struct {
	c       net.Conn
	br      *bufio.Reader
	backend netip.Addr
}

// keepAlives opens n keep-alive connections to the VIP and sends a first request on each.
func (l *lab) keepAlives(t *testing.T, n int) []*keepAlive {
	t.Helper()
	var out []*keepAlive
	for range n {
		c, err := l.dial()
		if err != nil {
			t.Fatalf("open a keep-alive connection: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		k := &keepAlive{c: c, br: bufio.NewReader(c)}
		r, err := exchange(c, k.br, false)
		if err != nil {
			t.Fatalf("first request on keep-alive connection %s: %v", c.LocalAddr(), err)
		}
		k.backend = r.backend
		out = append(out, k)
	}
	var b strings.Builder
	for _, k := range out {
		fmt.Fprintf(&b, " %s->%s", k.c.LocalAddr(), k.backend)
	}
	t.Logf("keep-alive connections:%s", b.String())
	return out
}

// checkKeepAlives sends a request on every keep-alive connection and checks that its backend
// answered.
func checkKeepAlives(t *testing.T, ks []*keepAlive, when string) {
	t.Helper()
	for _, k := range ks {
		r, err := exchange(k.c, k.br, false)
		if err != nil {
			t.Errorf("%s: keep-alive connection %s (to %s): %v", when, k.c.LocalAddr(), k.backend, err)
			continue
		}
		if r.backend != k.backend {
			t.Errorf("%s: keep-alive connection %s moved from backend %s to %s", when, k.c.LocalAddr(), k.backend, r.backend)
		}
	}
}

// load sends requests on new connections, one after another, until stopped or bounded.
type load struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	res   loadResult
}

type loadResult struct {
	times  []time.Time // when each successful request completed
	errs   []error
	counts map[netip.Addr]int
}

// startLoad starts sending requests, at most max of them and for at most d.
func (l *lab) startLoad(t *testing.T, max int, d time.Duration) *load {
	t.Helper()
	ld := &load{stopc: make(chan struct{}), done: make(chan struct{}), res: loadResult{counts: map[netip.Addr]int{}}}
	end := time.Now().Add(d)
	go func() {
		defer close(ld.done)
		for i := 0; i < max && time.Now().Before(end); i++ {
			select {
			case <-ld.stopc:
				return
			default:
			}
			r, err := l.request()
			ld.mu.Lock()
			if err != nil {
				ld.res.errs = append(ld.res.errs, fmt.Errorf("at %s: %w", time.Now().Format("15:04:05.000"), err))
			} else {
				ld.res.times = append(ld.res.times, time.Now())
				ld.res.counts[r.backend]++
			}
			ld.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { ld.stop(t) })
	return ld
}

// waitCount waits until n requests succeeded.
func (ld *load) waitCount(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for time.Now().Before(deadline) {
		ld.mu.Lock()
		got, bad := len(ld.res.times), len(ld.res.errs)
		ld.mu.Unlock()
		if got >= n {
			return
		}
		if bad > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res := ld.stop(t)
	t.Fatalf("the load did not reach %d successful requests: %d ok, errors %v", n, len(res.times), res.errs)
}

// stop stops the load, waits for it and returns what it saw.
func (ld *load) stop(t *testing.T) loadResult {
	t.Helper()
	select {
	case <-ld.stopc:
	default:
		close(ld.stopc)
	}
	select {
	case <-ld.done:
	case <-time.After(2 * reqTimeout):
		t.Errorf("the load did not stop within %v", 2*reqTimeout)
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.res
}

// daemonProc is a running `xlb run`.
type daemonProc struct {
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{}
	once   sync.Once
}

// logBuffer collects the daemon's stderr.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDaemon starts `xlb run --config` inside the gateway's network namespace, in the host's
// mount namespace (not `ip netns exec`, which remounts /sys and would hide the pins). It is
// killed when t ends, if still running.
func (l *lab) startDaemon(t *testing.T) *daemonProc {
	t.Helper()
	p := &daemonProc{out: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command("nsenter", "--net=/run/netns/"+l.gw.Name, os.Args[0], "run", "--config", l.cfgPath)
	p.cmd.Env = append(os.Environ(), envDaemon+"=1")
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	// nsenter execs the daemon (no --fork), so the pid is the daemon's; and it dies with us.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the daemon: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if t.Failed() && !p.exitedNow() {
			if code, body, err := l.httpGet("/metrics"); err == nil && code == http.StatusOK {
				var b strings.Builder
				for _, line := range strings.Split(body, "\n") {
					if strings.HasPrefix(line, "xlb_datapath_packets_total{") && !strings.HasSuffix(line, " 0") {
						b.WriteString(" " + strings.TrimPrefix(line, "xlb_datapath_packets_total"))
					}
				}
				t.Logf("datapath counters:%s", b.String())
			}
		}
		p.kill(t)
		if t.Failed() || testing.Verbose() {
			t.Logf("daemon %d output:\n%s", p.cmd.Process.Pid, p.out)
		}
	})
	return p
}

// kill SIGKILLs the daemon (a crash: no cleanup) and waits until it is gone.
func (p *daemonProc) kill(t *testing.T) {
	t.Helper()
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(pollTimeout):
			t.Errorf("daemon %d still running %v after SIGKILL", p.cmd.Process.Pid, pollTimeout)
		}
	})
}

func (p *daemonProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to the daemon: %v", sig, err)
	}
}

// waitExit waits until the daemon has exited; after pollTimeout the test fails with what it
// waited for.
func (p *daemonProc) waitExit(t *testing.T, after string) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(pollTimeout):
		t.Fatalf("the daemon did not exit within %v %s", pollTimeout, after)
	}
}

func (p *daemonProc) exitedNow() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitLog waits for a line of the daemon's output that contains s, and returns it.
func (p *daemonProc) waitLog(t *testing.T, s string) string {
	t.Helper()
	return p.waitLogN(t, s, 1)
}

// waitLogN waits for the n-th line of the daemon's output that contains s, and returns it.
func (p *daemonProc) waitLogN(t *testing.T, s string, n int) string {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		seen := 0
		for _, line := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(line, s) {
				if seen++; seen == n {
					return line
				}
			}
		}
		if p.exitedNow() {
			t.Fatalf("the daemon exited (%v) without logging %q (%d times)", p.cmd.ProcessState, s, n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not log %q (%d times) within %v", s, n, pollTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpGet fetches path from the daemon's HTTP server, from inside the gateway namespace.
func (l *lab) httpGet(path string) (int, string, error) {
	return l.gw.HTTPGet(labListen, path, reqTimeout)
}

// waitPinDir waits until the daemon has created its pin directory.
func (l *lab) waitPinDir(t *testing.T, p *daemonProc) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(l.pinPath); err == nil {
			return
		}
		if p.exitedNow() {
			t.Fatalf("the daemon exited (%v) before it made its pin directory", p.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon made no pin directory %s within %v", l.pinPath, readyTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReady polls /readyz until it answers 200.
func (l *lab) waitReady(t *testing.T, p *daemonProc) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		if p.exitedNow() {
			t.Fatalf("the daemon exited (%v) before it was ready", p.cmd.ProcessState)
		}
		code, body, err := l.httpGet("/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %q %v", code, body, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the daemon was not ready within %v: /readyz: %s", readyTimeout, last)
}

// metricSet is a scrape of /metrics.
type metricSet string

func (l *lab) metrics(t *testing.T) metricSet {
	t.Helper()
	code, body, err := l.httpGet("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape /metrics: %d %v: %.2000s", code, err, body)
	}
	return metricSet(body)
}

// value returns the value of the sample of name whose labels include the given label pairs.
func (m metricSet) value(name string, labels ...string) (float64, bool) {
lines:
	for _, line := range strings.Split(string(m), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		ls, v, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+ls+",", fmt.Sprintf(",%s=%q,", labels[i], labels[i+1])) {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	}
	return 0, false
}

// waitServing waits until xlb_frontend_serving_backends of service web shows n: the reconcile
// that follows a health verdict has reached the datapath (xlb_backend_healthy changes first).
func (l *lab) waitServing(t *testing.T, n float64) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	var v float64
	var ok bool
	for time.Now().Before(deadline) {
		if v, ok = l.metrics(t).value("xlb_frontend_serving_backends", "service", "web"); ok && v == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("xlb_frontend_serving_backends of web is %v (found %v) after %v, want %v", v, ok, pollTimeout, n)
}

// waitHealthy waits until xlb_backend_healthy of backend shows want.
func (l *lab) waitHealthy(t *testing.T, backend netip.Addr, want float64) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	var v float64
	var ok bool
	for time.Now().Before(deadline) {
		if v, ok = l.metrics(t).value("xlb_backend_healthy", "service", "web", "backend", backend.String()); ok && v == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("xlb_backend_healthy of %s is %v (found %v) after %v, want %v", backend, v, ok, pollTimeout, want)
}
