// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

var famNames = [2]string{"IPv4", "IPv6"}

// TestSiteDirectReturn: through a gateway that DNATs and carries the VIP, a client's TCP
// connection and UDP exchange with a VIP complete with the VIP as the peer (the replies come
// from the node, not the gateway, rewritten by the egress program), while the Pod sees the
// client's own address; a datagram to a closed port comes back as the Pod's ICMP port
// unreachable about the VIP (the client's connected socket gets ECONNREFUSED). Without the
// programs nothing completes (the proof that the replies needed them).
func TestSiteDirectReturn(t *testing.T) {
	s := newSite(t)
	s.servePod(t)
	d := newDP(t, Options{})
	s.allowAll(t, d)

	// Not attached yet: the Pod's replies leave from its own address, and the client drops
	// them.
	if _, _, err := s.udpExchange(t, 0, 53); err == nil {
		t.Fatal("UDP exchange through the VIP completed without the programs attached")
	}
	s.attach(t, d)
	for fam := range 2 {
		t.Run(famNames[fam], func(t *testing.T) {
			c := s.dialTCP(t, fam)
			c.exchange(t)
			c.exchange(t)
			answer, local, err := s.udpExchange(t, fam, 53)
			if err != nil {
				t.Fatalf("UDP exchange: %v", err)
			}
			if answer != local {
				t.Errorf("UDP: the Pod saw the client as %q, want %q", answer, local)
			}
			if _, _, err := s.udpExchange(t, fam, 54); !isRefused(err) {
				t.Errorf("UDP to a closed port: %v, want connection refused (the Pod's ICMP error, rewritten)", err)
			}
		})
	}
	c := counters(t, d)
	// Per family: the SYN and the first datagrams carried (the stand-in gateway carries every
	// packet: no conntrack), replies and ICMP errors rewritten.
	if c["carrier_accepted"] < 8 || c["reply_rewritten"] < 6 || c["icmp_rewritten"] != 2 {
		t.Errorf("counters %v: want at least 8 carriers accepted, 6 replies rewritten, 2 ICMP errors", c)
	}
	for name, n := range c {
		if name != "carrier_accepted" && name != "reply_rewritten" && name != "icmp_rewritten" {
			t.Errorf("counter %s = %d, want 0", name, n)
		}
	}
	fs, err := d.Flows()
	must(t, err)
	var tcp4 bool
	for _, f := range fs {
		if f.Proto == datapath.TCP && f.VIP == netip.AddrPortFrom(siteVIP[0], 80) && f.Pod == netip.AddrPortFrom(sitePod[0], 8080) && f.Client.Addr() == siteClient[0] {
			tcp4 = true
		}
	}
	if !tcp4 {
		t.Errorf("flows %v: no IPv4 TCP flow of the client", fs)
	}
}

// TestSiteRestart: with pins, the programs keep rewriting while no agent runs; the next Load
// adopts the pinned links (its programs replace the old in them) and maps (the allowed pairs,
// the flows, the counters), and established connections carry on; Remove detaches everything.
func TestSiteRestart(t *testing.T) {
	s := newSite(t)
	s.servePod(t)
	pin := pinDir(t)
	d, err := Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	t.Cleanup(func() { d.Close() })
	s.allowAll(t, d)
	s.attach(t, d)
	conns := [2]*tcpConn{s.dialTCP(t, 0), s.dialTCP(t, 1)}
	for _, c := range conns {
		c.exchange(t)
	}
	before := counters(t, d)
	pairs, err := d.DSRServices()
	must(t, err)
	flowsBefore := flowStrings(t, d)
	if _, err := Load(Options{PinPath: pin, Flows: MinFlows}); err == nil {
		t.Fatal("a second Load took the pin directory another agent holds")
	}
	must(t, d.Close())

	// No agent: the pinned programs keep serving the connections.
	for _, c := range conns {
		c.exchange(t)
	}

	d2, err := Load(Options{PinPath: pin, Flows: MinFlows})
	must(t, err)
	t.Cleanup(func() { d2.Close() })
	if err := d2.Replaced(); err != nil {
		t.Errorf("Replaced: %v, want nil (everything adopted)", err)
	}
	if got := d2.Interfaces(); len(got) != 1 || got["n0"] != Both {
		t.Errorf("adopted interfaces %v, want n0 both", got)
	}
	pairs2, err := d2.DSRServices()
	must(t, err)
	if len(pairs2) != len(pairs) || len(pairs) != 2*len(siteMaps) {
		t.Errorf("adopted %d pairs, had %d (want %d)", len(pairs2), len(pairs), 2*len(siteMaps))
	}
	for p := range pairs {
		if !pairs2[p] {
			t.Errorf("pair %v not adopted", p)
		}
	}
	flowsAfter := flowStrings(t, d2)
	for _, f := range flowsBefore {
		found := false
		for _, g := range flowsAfter {
			found = found || f == g
		}
		if !found {
			t.Errorf("flow %s lost across the restart (now %q)", f, flowsAfter)
		}
	}
	// The pinned links run the new programs.
	for a, l := range d2.links {
		info, err := l.Info()
		must(t, err)
		pi, err := d2.Program(a.dir).Info()
		must(t, err)
		id, _ := pi.ID()
		if info.Program != id {
			t.Errorf("link %s runs program %d, the new one is %d", a, info.Program, id)
		}
	}
	for _, c := range conns {
		c.exchange(t)
	}
	after := counters(t, d2)
	if after["reply_rewritten"] <= before["reply_rewritten"] {
		t.Errorf("replies rewritten %d after the restart, %d before: the counters were not kept or nothing was rewritten", after["reply_rewritten"], before["reply_rewritten"])
	}

	// Remove: detached, unpinned; the connections' replies are no longer rewritten.
	must(t, d2.Remove())
	if HasPins(pin) {
		t.Error("pins left after Remove")
	}
	_ = conns[0].c.SetDeadline(time.Now().Add(time.Second))
	if _, err := conns[0].c.Write([]byte("x\n")); err == nil {
		buf := make([]byte, 64)
		if _, err := conns[0].c.Read(buf); err == nil {
			t.Error("a reply reached the client from the VIP after Remove")
		}
	}
}
