// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// birdBFD is BIRD's BFD protocol at the speaker's defaults: 300 ms both ways, × 3.
const birdBFD = `protocol bfd { interface "*" { min rx interval 300 ms; min tx interval 300 ms; multiplier 3; }; }`

// TestBIRDBFD: with BFD on the IPv4 session and not on the IPv6 one, a gateway that vanishes
// (its namespace's traffic dropped, its speaker frozen: nothing withdrawn, no TCP closed) loses
// its IPv4 route at the router within BFD's detection time and its IPv6 route only at the hold
// time; back, it is re-announced. Then the router vanishes, and the speaker sees its BFD
// session go down and resets the BGP session, counted and named in its status.
func TestBIRDBFD(t *testing.T) {
	requireLab(t, "bird", "nft")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	// BIRD waits `error wait time` (60 s by default) after a session failed before it takes a
	// connection again: 1 s here, as docs/bgp.md recommends for gateways' sessions.
	bird(t, r, birdConf("198.18.1.1", true, birdBFD,
		"protocol bgp gw1 from lb { neighbor 198.18.1.2 as 65001; bfd on; error wait time 1, 10; }",
		"protocol bgp gw1v6 from lb { neighbor 2001:db8:1::2 as 65001; error wait time 1, 10; }"))
	s := startSpeaker(t, g, "gw1", bgp.Config{RouterID: gw[0], ASN: 65001, GracefulRestart: 30 * time.Second,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000, BFD: bgp.BFD{Enabled: true}}, {Address: rt[1], ASN: 65000}}})
	testBFD(t, s, r, g, rt, gw)
}

// testBFD is TestBIRDBFD and TestFRRBFD once the router runs: speaker s in g peers with the
// router r at rt[0] with BFD and at rt[1] without.
func testBFD(t *testing.T, s *speaker, r, g *netlab.NS, rt, gw [2]netip.Addr) {
	s.waitUp(30 * time.Second)
	waitFor(t, 10*time.Second, "BFD up at the speaker", func() (bool, string) {
		ps := s.peers()
		return ps[0].BFD == "up" && ps[1].BFD == "", fmt.Sprint(ps)
	})
	s.announce(vip4+"/32", vip6+"/128")
	routeVia(t, r, vip4, 5*time.Second, gw[0])
	routeVia(t, r, vip6, 5*time.Second, gw[1])

	// The gateway vanishes.
	s.freeze()
	off := blackhole(t, g)
	start := time.Now()
	gone4 := routeVia(t, r, vip4, 5*time.Second)
	gone6 := routeVia(t, r, vip6, 15*time.Second) + gone4
	t.Logf("gateway gone: its route left the router's FIB %v after with BFD (300 ms × 3), %v after without (hold time 9 s)",
		gone4.Round(time.Millisecond), gone6.Round(time.Millisecond))
	// BFD's 0.9 s plus the router's reaction, well before the hold time: the hold timer did not
	// do it.
	if gone4 > 3*time.Second {
		t.Errorf("with BFD the route left %v after the gateway vanished: want about 1 s", gone4)
	}
	if gone6 < 5*time.Second {
		t.Errorf("without BFD the route left %v after the gateway vanished: before the hold time (9 s)?", gone6)
	}

	// It comes back.
	off()
	s.thaw()
	back := time.Now()
	routeVia(t, r, vip4, 20*time.Second, gw[0])
	t.Logf("gateway back: route re-announced %v after (%v since it vanished)", time.Since(back).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	routeVia(t, r, vip6, 20*time.Second, gw[1])
	waitFor(t, 10*time.Second, "BFD up again", func() (bool, string) {
		ps := s.peers()
		return ps[0].BFD == "up" && ps[0].Up, fmt.Sprint(ps)
	})

	// The router vanishes: the speaker's BFD session goes down and takes the session with it.
	before := s.peers()[0]
	off = blackhole(t, r)
	defer off()
	// (This is the session's third BFD down within a minute: dampening may suspend BFD now.)
	took := waitFor(t, 5*time.Second, "the speaker's BFD session down", func() (bool, string) {
		p := s.peers()[0]
		return (p.BFD == "down" || p.BFD == "suspended") && !p.Up, p.String()
	})
	p := s.peers()[0]
	t.Logf("router gone: the speaker's BFD session down and BGP session reset %v after: %v (bfd transitions %d)",
		took.Round(time.Millisecond), p, p.BFDTransitions)
	if p.BFDTransitions <= before.BFDTransitions || !strings.Contains(p.LastError, "bfd") {
		t.Errorf("after a BFD failure: %v, %d transitions (before: %d): want more transitions and the error named",
			p, p.BFDTransitions, before.BFDTransitions)
	}
	if q := s.peers()[1]; !q.Up {
		t.Logf("the session without BFD: %v (its hold timer has not expired yet)", q)
	}
}

// blackhole drops every packet into and out of namespace ns (nftables, before anything else:
// the namespace looks dead to its neighbours, its links up) until the returned function runs
// (or the test ends).
func blackhole(t *testing.T, ns *netlab.NS) func() {
	t.Helper()
	const rules = `table inet xlb_blackhole {
	chain in { type filter hook prerouting priority -400; policy drop; }
	chain out { type filter hook output priority -400; policy drop; }
}`
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("blackhole %s: %v: %s", ns.Name, err, out)
	}
	done := false
	off := func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "delete", "table", "inet", "xlb_blackhole").CombinedOutput(); err != nil {
			t.Errorf("lift the blackhole of %s: %v: %s", ns.Name, err, out)
		}
	}
	t.Cleanup(off)
	return off
}

// freeze stops the speaker process (SIGSTOP): its sessions stay open, silent; thaw resumes it.
func (s *speaker) freeze() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *speaker) thaw()   { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// TestBIRDBFDFlapping: over a link that drops half the BFD packets both ways, the BFD session
// flaps, and each flap resets the BGP session; after bgp.BFDFlapLimit downs the speaker
// suspends BFD for its hold-down, and the session then stays up on its hold timer. When the
// link is clean again and the hold-down is over, BFD comes back without resetting the session.
func TestBIRDBFDFlapping(t *testing.T) {
	requireLab(t, "bird", "nft")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	bird(t, r, birdConf("198.18.1.1", false, birdBFD,
		"protocol bgp gw1 from lb { neighbor 198.18.1.2 as 65001; bfd on; error wait time 1, 10; }"))
	testBFDFlapping(t, r, g, rt, gw)
}

// TestFRRBFDFlapping is TestBIRDBFDFlapping against FRR (bfdd).
func TestFRRBFDFlapping(t *testing.T) {
	requireLab(t, "vtysh", "nft", frrDir+"/zebra", frrDir+"/bgpd", frrDir+"/bfdd")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	frrPeer(t, r, gw[0], true)
	testBFDFlapping(t, r, g, rt, gw)
}

// testBFDFlapping is TestBIRDBFDFlapping and TestFRRBFDFlapping once the router runs.
func testBFDFlapping(t *testing.T, r, g *netlab.NS, rt, gw [2]netip.Addr) {
	// Long enough for the session's last reset (the router's BFD timing out once more) and its
	// return to fit in it, on a loaded machine.
	const holdDown = 20 * time.Second
	s := startSpeaker(t, g, "gw1", bgp.Config{RouterID: gw[0], ASN: 65001,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000, BFD: bgp.BFD{Enabled: true, HoldDown: holdDown}}}})
	s.waitUp(30 * time.Second)
	waitFor(t, 10*time.Second, "BFD up", func() (bool, string) {
		p := s.peers()[0]
		return p.BFD == "up", p.String()
	})
	s.announce(vip4 + "/32")
	routeVia(t, r, vip4, 5*time.Second, gw[0])

	clean := lossy(t, g, 50)
	took := waitFor(t, 90*time.Second, "BFD suspended", func() (bool, string) {
		p := s.peers()[0]
		return p.BFD == "suspended", p.String()
	})
	suspendedAt := time.Now()
	p := s.peers()[0]
	t.Logf("lossy link (50%% of BFD packets dropped both ways): BFD suspended after %v, %d transitions", took.Round(time.Millisecond), p.BFDTransitions)
	// The router's BFD times out once more (nothing is sent now) and resets the session — when
	// exactly depends on the router (FRR: up to ~2 s after the suspension, then GoBGP's 5 s idle
	// hold) — and after that the session stays, on its hold timer: wait until it has been up
	// and unchanged for 4 s, then require it to stay so until the hold-down ends.
	var since time.Time
	for stable := false; !stable; {
		if time.Since(suspendedAt) > holdDown-6*time.Second {
			t.Fatalf("the session never stayed up for 4 s while BFD was suspended: %v", s.peers()[0])
		}
		s.waitUp(30 * time.Second)
		since = s.peers()[0].Since
		time.Sleep(4 * time.Second)
		p := s.peers()[0]
		stable = p.Up && p.Since.Equal(since)
	}
	time.Sleep(time.Until(suspendedAt.Add(holdDown - time.Second)))
	if p := s.peers()[0]; !p.Up || !p.Since.Equal(since) || p.BFD != "suspended" {
		t.Errorf("BFD suspended, over the lossy link: %v since %v (was since %v), want the session up all along", p, p.Since, since)
	}
	routeVia(t, r, vip4, time.Second, gw[0])

	clean()
	waitFor(t, holdDown+10*time.Second, "BFD back up after the hold-down", func() (bool, string) {
		p := s.peers()[0]
		return p.BFD == "up", p.String()
	})
	if p := s.peers()[0]; !p.Up || !p.Since.Equal(since) {
		t.Errorf("BFD back: %v since %v, want the session kept since %v", p, p.Since, since)
	}
	t.Logf("link clean again: BFD up %v after the suspension, the BGP session kept", time.Since(suspendedAt).Round(time.Millisecond))
}

// lossy drops pct per cent of the BFD packets into and out of namespace ns, at random, until the
// returned function runs (or the test ends).
func lossy(t *testing.T, ns *netlab.NS, pct int) func() {
	t.Helper()
	rules := fmt.Sprintf(`table inet xlb_lossy {
	chain in { type filter hook prerouting priority -400; udp dport 3784 numgen random mod 100 < %d drop; }
	chain out { type filter hook output priority -400; udp dport 3784 numgen random mod 100 < %d drop; }
}`, pct, pct)
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lossy link in %s: %v: %s", ns.Name, err, out)
	}
	done := false
	off := func() {
		if !done {
			done = true
			_ = exec.Command("ip", "netns", "exec", ns.Name, "nft", "delete", "table", "inet", "xlb_lossy").Run()
		}
	}
	t.Cleanup(off)
	return off
}

// TestBIRDRepeer: the router disables a gateway's session and enables it again, three times:
// each time the route is back within a few seconds of the enable, the same every time (GoBGP
// alone waits a 5 s idle hold before reconnecting after any session but its first).
func TestBIRDRepeer(t *testing.T) {
	requireLab(t, "bird", "birdc")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	ctl := bird(t, r, birdConf("198.18.1.1", false,
		"protocol bgp gw1 from lb { neighbor 198.18.1.2 as 65001; }"))
	birdc := func(arg string) func() {
		return func() {
			t.Helper()
			if out, err := exec.Command("birdc", "-s", ctl, arg, "gw1").CombinedOutput(); err != nil {
				t.Fatalf("birdc %s gw1: %v: %s", arg, err, out)
			}
		}
	}
	testRepeer(t, r, g, rt, gw, 3, birdc("disable"), birdc("enable"))
}

// testRepeer runs a speaker in g peering with the router r at rt[0] and has the router take
// its session down (down) and up again (up) n times, each after a steady session: the route
// must be back at the router within about the connect retry of each up.
func testRepeer(t *testing.T, r, g *netlab.NS, rt, gw [2]netip.Addr, n int, down, up func()) {
	s := startSpeaker(t, g, "gw1", bgp.Config{RouterID: gw[0], ASN: 65001,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000}}})
	s.waitUp(30 * time.Second)
	s.announce(vip4 + "/32")
	routeVia(t, r, vip4, 5*time.Second, gw[0])
	var backs []string
	for i := range n {
		time.Sleep(steadyUptime + time.Second) // a steady session, as a router's operator would find it
		down()
		routeVia(t, r, vip4, 5*time.Second)
		time.Sleep(time.Second)
		up()
		back := routeVia(t, r, vip4, 20*time.Second, gw[0])
		backs = append(backs, back.Round(time.Millisecond).String())
		if back > 4*time.Second {
			t.Errorf("re-peering %d: route back %v after the session was enabled, want within about the connect retry (1 s)", i, back)
		}
	}
	t.Logf("the router took the session down and up %d times: the route back %v after each", n, backs)
}
