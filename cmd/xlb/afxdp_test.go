package main

import (
	"os"
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
	if counts := l.requests(t, 20); counts[labBackends[0]] != 20 {
		t.Errorf("after %s died, 20 requests went to %v, want all to %s", dead, counts, labBackends[0])
	}

	// SIGTERM: the daemon stops, and its program goes with it.
	d.signal(t, syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(pollTimeout):
		t.Fatalf("the daemon did not exit within %v of SIGTERM", pollTimeout)
	}
	if !strings.Contains(d.out.String(), "the AF_XDP datapath stopped with the process") {
		t.Errorf("the daemon's last words are not about the AF_XDP datapath:\n%s", d.out)
	}
	if n := l.gatewayXDP(t); n != 0 {
		t.Errorf("%d gateway interfaces still have an XDP program after the AF_XDP daemon stopped", n)
	}
}
