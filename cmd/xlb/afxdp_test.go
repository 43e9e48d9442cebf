// SPDX-License-Identifier: Apache-2.0
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemonAFXDP runs `xlb run` with datapath.kind afxdp in the lab: the AF_XDP datapath
// balances over the backends with the clients' addresses intact, takes a dead backend out on its
// health check, exports its counters, and leaves nothing behind when it stops (it pins nothing).
func TestDaemonAFXDP(t *testing.T) {
	l := newLab(t)
	l.kind = "afxdp"
	l.writeConfig(t, labBackends[:2])

	// Pins of an XDP datapath (left by a plain SIGTERM, still forwarding) make it refuse to
	// start, and say what to do.
	if err := os.MkdirAll(l.pinPath, 0o700); err != nil {
		t.Fatal(err)
	}
	refused := l.startDaemon(t)
	refused.waitExit(t, "when it should refuse to start next to the XDP datapath's pins")
	if out := refused.out.String(); !strings.Contains(out, "xlb cleanup --pin-path "+l.pinPath) {
		t.Errorf("the refusal does not say how to clean up:\n%s", out)
	}
	if err := os.Remove(l.pinPath); err != nil {
		t.Fatal(err)
	}

	d := l.startDaemon(t)
	l.waitReady(t, d)
	d.waitLog(t, "ready")

	counts := l.requests(t, 40)
	for _, b := range labBackends[:2] {
		if counts[b] < 8 {
			t.Errorf("backend %s answered %d of 40 requests, want a fair share (at least 8): %v", b, counts[b], counts)
		}
	}
	m := l.metrics(t)
	if v, ok := m.value("xlb_datapath_packets_total", "reason", "nat_forward"); !ok || v < 40*3 {
		t.Errorf("xlb_datapath_packets_total{reason=nat_forward} is %v (found %v), want at least 3 packets per request", v, ok)
	}
	if v, ok := m.value("xlb_datapath_packets_total", "reason", "nat_reverse"); !ok || v < 40*2 {
		t.Errorf("xlb_datapath_packets_total{reason=nat_reverse} is %v (found %v), want the replies translated", v, ok)
	}
	fwd, _ := m.value("xlb_datapath_packets_total", "reason", "nat_forward")
	rev, _ := m.value("xlb_datapath_packets_total", "reason", "nat_reverse")
	if v, ok := m.value("xlb_datapath_packets_total", "reason", "steered_to_socket"); !ok || v < fwd+rev {
		t.Errorf("xlb_datapath_packets_total{reason=steered_to_socket} is %v (found %v), want at least the %v translated", v, ok, fwd+rev)
	}
	if v, ok := m.value("xlb_datapath_packets_total", "reason", "xsk_rx_ring_full"); !ok || v != 0 {
		t.Errorf("xlb_datapath_packets_total{reason=xsk_rx_ring_full} is %v (found %v), want 0", v, ok)
	}
	if v, ok := m.value("xlb_vip_new_flows_total", "vip", labVIP.String(), "port", "80"); !ok || v < 40 {
		t.Errorf("xlb_vip_new_flows_total is %v (found %v), want the 40 connections", v, ok)
	}
	if _, err := os.Stat(l.pinPath); err == nil {
		t.Errorf("the AF_XDP datapath pinned something under %s", l.pinPath)
	}
	if t.Failed() {
		t.FailNow()
	}

	// A backend that dies is taken out by its health check; every request then goes to the other.
	dead := labBackends[1]
	l.servers[dead].stop()
	l.waitHealthy(t, dead, 0)
	l.waitServing(t, 1)
	if counts := l.requests(t, 20); counts[labBackends[0]] != 20 {
		t.Errorf("after %s died, 20 requests went to %v, want all to %s", dead, counts, labBackends[0])
	}

	// SIGTERM: the daemon stops, and its program goes with it.
	d.signal(t, syscall.SIGTERM)
	d.waitExit(t, "of SIGTERM")
	if !strings.Contains(d.out.String(), "the AF_XDP datapath stopped with the process") {
		t.Errorf("the daemon's last words are not about the AF_XDP datapath:\n%s", d.out)
	}
	if n := l.gatewayXDP(t); n != 0 {
		t.Errorf("%d gateway interfaces still have an XDP program after the AF_XDP daemon stopped", n)
	}
}

// TestDaemonAFXDPWithdraws: with the AF_XDP datapath, which stops forwarding with the daemon,
// SIGTERM withdraws the VIP's route even when withdrawOnExit is false (keeping it for graceful
// restart would send the routers' traffic to a gateway that no longer forwards).
func TestDaemonAFXDPWithdraws(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatal("needs bird (make deps installs bird2)")
	}
	l := newLab(t)
	l.kind = "afxdp"
	r := l.startRouter(t)
	l.extra = fmt.Sprintf(`bgp:
  routerID: %s
  asn: 65001
  gracefulRestart: 30s
  withdrawOnExit: false
  peers:
    - {address: %s, asn: 65000, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
`, labGWRouter, labRouter)
	l.writeConfig(t, labBackends[:2])
	d := l.startDaemon(t)
	l.waitReady(t, d)
	vip := labVIP.String()
	waitRoute(t, r, vip, bgpUpTimeout, true)

	termed := time.Now()
	d.signal(t, syscall.SIGTERM)
	waitRoute(t, r, vip, 5*time.Second, false)
	t.Logf("withdrawn %v after SIGTERM", time.Since(termed).Round(time.Millisecond))
	d.waitExit(t, "of SIGTERM")
	if !strings.Contains(d.out.String(), "bgp stopped; routes withdrawn") {
		t.Errorf("the daemon did not log the withdrawal at exit:\n%s", d.out)
	}
}
