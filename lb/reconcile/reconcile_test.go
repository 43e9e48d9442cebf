// SPDX-License-Identifier: Apache-2.0
package reconcile_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/conformance"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// balancer is the pure-Go gateway datapath the reconciler's tests drive: no kernel, no root.
func balancer(t testing.TB, s datapath.Settings) *forward.Balancer {
	t.Helper()
	b, err := forward.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGatewayConformance runs the reconciler scenarios against the pure-Go balancer. A new
// process finds the same state: the balancer itself.
func TestGatewayConformance(t *testing.T) {
	conformance.RunGateway(t, conformance.Gateway{
		New:    func(t *testing.T) datapath.Services { return balancer(t, datapath.Settings{Seed: 7}) },
		Reopen: func(_ *testing.T, dp datapath.Services) datapath.Services { return dp },
	})
}

// TestPlannedTrafficFlows: after Apply, a new connection to the VIP goes to the backend the
// plan's table names for the flow's slot, as the datapath decides it (forward.Balancer: the
// decision the AF_XDP engine runs and the parity tests hold to the XDP program).
func TestPlannedTrafficFlows(t *testing.T) {
	b := balancer(t, datapath.Settings{Seed: 7})
	r, err := reconcile.New(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	bes := []string{"198.18.1.10", "198.18.1.11", "198.18.1.12"}
	d := conformance.Plan(t, conformance.Web(bes...))
	if _, err := r.Apply(d); err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.1"), 80)
	fp := d.Frontends[datapath.Frontend{Addr: vip.Addr(), Port: 80, Proto: datapath.TCP}]
	client := netip.MustParseAddr("198.18.0.10")
	seen := map[string]bool{}
	for port := uint16(40000); port < 40060; port++ {
		want := fp.Backends[fp.Table[datapath.FlowHash(7, client, port, 80, datapath.TCP, false)%uint32(len(fp.Table))]].Key
		p := forward.PacketOf(netip.AddrPortFrom(client, port), vip, datapath.TCP)
		p.Role = datapath.RoleClient
		p.TCPFlags = forward.TCPSYN
		dec := b.Forward(&p, time.Second)
		got := netip.AddrPortFrom(forward.AddrOf(dec.Addr, false), dec.Port)
		if dec.Action != forward.ToBackend || got != want {
			t.Fatalf("flow from port %d: action %d to %s, plan says %s", port, dec.Action, got, want)
		}
		seen[want.String()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("60 flows reached only %v", seen)
	}
}

// TestPlannedDSR: in the DSR mode a capable backend is written DSR, so a flow's first packet
// carries the frontend and the next ones do not; it has no reverse NAT entry, so the gateway
// leaves a packet from it alone (its node translated it), while the excluded backend keeps
// its entry and gets no new flows. Switching the site back to the return-path mode clears the
// flag and writes the entries.
//
// (The handshake's ACK is carried too: the flow opens in conntrack with it.)
func TestPlannedDSR(t *testing.T) {
	b := balancer(t, datapath.Settings{Seed: 7})
	r, err := reconcile.New(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := conformance.Web("198.18.1.10", "198.18.1.11")
	s.Backends[0].DSR = true
	plan := func(fw lb.Forwarding) *lb.Desired {
		d, errs := lb.Plan([]lb.Service{s}, lb.PlanOptions{Seed: 7, TableSize: 251, Forwarding: fw})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if _, err := r.Apply(d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	plan(lb.Forwarding{Mode: datapath.DSR})
	vip := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.1"), 80)
	client := netip.MustParseAddr("198.18.0.10")
	for port := uint16(40000); port < 40020; port++ {
		p := forward.PacketOf(netip.AddrPortFrom(client, port), vip, datapath.TCP)
		p.Role = datapath.RoleClient
		p.TCPFlags = forward.TCPSYN
		dec := b.Forward(&p, time.Second)
		if got := forward.AddrOf(dec.Addr, false); dec.Action != forward.ToBackend || got != netip.MustParseAddr("198.18.1.10") ||
			!dec.Carry || dec.CarryPort != 80 {
			t.Fatalf("first packet of port %d: %+v, want carried to the DSR backend", port, dec)
		}
		p.TCPFlags = forward.TCPACK // completes the handshake: the flow opens in conntrack
		if dec := b.Forward(&p, time.Second); dec.Action != forward.ToBackend || !dec.Carry || !dec.HandshakeHit {
			t.Fatalf("handshake ACK of port %d: %+v, want carried", port, dec)
		}
		if dec := b.Forward(&p, time.Second); dec.Action != forward.ToBackend || dec.Carry {
			t.Fatalf("established packet of port %d: %+v, want plain DNAT", port, dec)
		}
	}
	reply := func(from string) forward.Decision {
		p := forward.PacketOf(netip.MustParseAddrPort(from), netip.AddrPortFrom(client, 40000), datapath.TCP)
		p.Role = datapath.RoleCluster
		p.TCPFlags = forward.TCPACK
		return b.Reply(&p, time.Second)
	}
	if d := reply("198.18.1.10:8080"); d.Action != forward.NotOurs {
		t.Errorf("packet from the DSR backend: %+v, want it left alone", d)
	}
	if d := reply("198.18.1.11:8080"); d.Action != forward.ToClient {
		t.Errorf("reply of the excluded backend: %+v, want translated", d)
	}
	plan(lb.Forwarding{})
	p := forward.PacketOf(netip.AddrPortFrom(client, 41000), vip, datapath.TCP)
	p.Role = datapath.RoleClient
	p.TCPFlags = forward.TCPSYN
	if dec := b.Forward(&p, time.Second); dec.Action != forward.ToBackend || dec.Carry {
		t.Errorf("return-path mode: %+v, want no carrier", dec)
	}
	if d := reply("198.18.1.10:8080"); d.Action != forward.ToClient {
		t.Errorf("return-path mode, reply of the former DSR backend: %+v, want translated", d)
	}
}

// BenchmarkReconcile10kServices plans and applies 10,000 services with 10 backends each into the
// pure-Go balancer: the reconciler's own cost (bench/ctlplane measures the whole path into the
// XDP datapath's maps). Then it applies the same plan again (nothing to write) and one changed
// service.
func BenchmarkReconcile10kServices(b *testing.B) {
	svcs := conformance.Services(10000, 10)
	opts := lb.PlanOptions{Seed: 1, TableSize: 1021}
	for range b.N {
		dp := balancer(b, datapath.Settings{ConntrackSize: 4096})
		r, err := reconcile.New(dp, nil)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		d, errs := lb.Plan(svcs, opts)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		planned := time.Since(start)
		if _, err := r.Apply(d); err != nil {
			b.Fatal(err)
		}
		full := time.Since(start)
		start = time.Now()
		if res, err := r.Apply(d); err != nil || res.Changes() != 0 {
			b.Fatalf("second apply: %+v %v", res, err)
		}
		noop := time.Since(start)
		svcs[0].Backends[0].State = lb.Draining
		start = time.Now()
		d2, _ := lb.Plan(svcs, opts)
		if res, err := r.Apply(d2); err != nil || res.TablesWritten != 1 {
			b.Fatalf("one changed service: %+v %v", res, err)
		}
		one := time.Since(start)
		svcs[0].Backends[0].State = lb.Active
		b.ReportMetric(planned.Seconds(), "plan-s")
		b.ReportMetric(full.Seconds(), "plan+apply-s")
		b.ReportMetric(noop.Seconds(), "noop-apply-s")
		b.ReportMetric(one.Seconds(), "replan+apply-one-s")
	}
}
