// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/internal/netlab"
)

const frrDir = "/usr/lib/frr"

// vip4b is a second VIP, for tests that need two routes.
const vip4b = "198.18.100.2"

// TestFRR: announce and withdraw a /32 to FRR (zebra + bgpd, run as user frr).
func TestFRR(t *testing.T) {
	r, g, rt, gw := frrSite(t)
	s := startSpeaker(t, g, "gw1", bgp.Config{RouterID: gw[0], ASN: 65001,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000}}})
	t.Logf("FRR session up in %v", s.waitUp(30*time.Second))
	s.announce(vip4 + "/32")
	t.Logf("announce → kernel route in %v", routeVia(t, r, vip4, 5*time.Second, gw[0]))
	s.announce()
	t.Logf("withdraw → gone from the kernel in %v", routeVia(t, r, vip4, 2*time.Second))
	s.announce(vip4 + "/32")
	routeVia(t, r, vip4, 2*time.Second, gw[0])
}

// frrSite is a router namespace running FRR with a passive session for the gateway namespace
// linked to it: the router's addresses rt, the gateway's gw.
func frrSite(t *testing.T) (r, g *netlab.NS, rt, gw [2]netip.Addr) {
	t.Helper()
	requireLab(t, "vtysh", frrDir+"/zebra", frrDir+"/bgpd")
	pfx := netlab.Prefix()
	r, g = netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw = link(t, pfx, r, g, 1)
	frr(t, r, fmt.Sprintf(`hostname rt
router bgp 65000
 bgp router-id 198.18.1.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor %s remote-as 65001
 neighbor %s timers 3 9
 neighbor %s passive
 address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
`, gw[0], gw[0], gw[0]))
	return r, g, rt, gw
}

// frr starts zebra and bgpd in ns as user frr, with their own directory and sockets.
func frr(t *testing.T, ns *netlab.NS, bgpdConf string) { frrDaemons(t, ns, bgpdConf, false) }

// frrDaemons is frr, with bfdd (started after zebra, before bgpd) when bfd is set; it returns
// the daemons' directory (vtysh --vty_socket).
func frrDaemons(t *testing.T, ns *netlab.NS, bgpdConf string, bfd bool) string {
	t.Helper()
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatalf("user frr: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "xlb-bgp-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeFile(t, dir+"/zebra.conf", "hostname rt\n")
	writeFile(t, dir+"/bgpd.conf", bgpdConf)
	writeFile(t, dir+"/bfdd.conf", "hostname rt\n")
	for _, p := range []string{dir, dir + "/zebra.conf", dir + "/bgpd.conf", dir + "/bfdd.conf"} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	common := []string{"-u", "frr", "-g", "frr", "-z", dir + "/zserv.api", "--vty_socket", dir}
	daemon(t, ns, dir+"/zebra.log", append([]string{frrDir + "/zebra", "-i", dir + "/zebra.pid",
		"-f", dir + "/zebra.conf"}, common...)...)
	waitFor(t, 10*time.Second, "zebra's socket", func() (bool, string) {
		_, err := os.Stat(dir + "/zserv.api")
		return err == nil, fmt.Sprint(err)
	})
	if bfd {
		daemon(t, ns, dir+"/bfdd.log", append([]string{frrDir + "/bfdd", "-i", dir + "/bfdd.pid",
			"-f", dir + "/bfdd.conf"}, common...)...)
		waitFor(t, 10*time.Second, "bfdd's socket", func() (bool, string) {
			_, err := os.Stat(dir + "/bfdd.vty")
			return err == nil, fmt.Sprint(err)
		})
	}
	daemon(t, ns, dir+"/bgpd.log", append([]string{frrDir + "/bgpd", "-i", dir + "/bgpd.pid",
		"-f", dir + "/bgpd.conf"}, common...)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("vtysh", "--vty_socket", dir, "-c", "show bgp summary").CombinedOutput()
			t.Logf("show bgp summary:\n%s", out)
			if bfd {
				out, _ := exec.Command("vtysh", "--vty_socket", dir, "-c", "show bfd peers").CombinedOutput()
				t.Logf("show bfd peers:\n%s", out)
			}
		}
	})
	return dir
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(filepath.Clean(path), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFRRGracefulRestart: FRR, as a graceful-restart helper (its default), keeps a killed
// speaker's route in its FIB for the restart time the speaker advertised, and a new speaker
// takes it over: the route never leaves the FIB, up to a second after the new session's
// End-of-RIB, when FRR drops the stale paths that were not re-announced. Stop(Withdraw) still
// takes it away at once.
func TestFRRGracefulRestart(t *testing.T) {
	r, g, rt, gw := frrSite(t)
	cfg := bgp.Config{RouterID: gw[0], ASN: 65001, GracefulRestart: 30 * time.Second,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000}}}

	s := startSpeaker(t, g, "gw1-a", cfg)
	s.waitUp(30 * time.Second)
	s.announce(vip4 + "/32")
	routeVia(t, r, vip4, 5*time.Second, gw[0])
	// From the kill until a second after the new session's End-of-RIB, the route must never
	// leave the FIB: polled every 10 ms. The new speaker announces a second route too; once
	// that one is in, FRR has had the End-of-RIB.
	missing, polls := 0, 0
	pollUntil := func(done func() bool) {
		for !done() {
			polls++
			if kernelRoute(t, r, vip4) == "" {
				missing++
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.kill()
	killed := time.Now()
	pollUntil(func() bool { return time.Since(killed) > 2*time.Second })
	s = startSpeaker(t, g, "gw1-b", cfg)
	s.announce(vip4+"/32", vip4b+"/32")
	pollUntil(func() bool { return kernelRoute(t, r, vip4b) != "" || time.Since(killed) > 30*time.Second })
	eor := time.Now()
	pollUntil(func() bool { return time.Since(eor) > time.Second })
	t.Logf("restarted speaker's second route in %v after the kill; route missing in %d of %d polls",
		eor.Sub(killed).Round(time.Millisecond), missing, polls)
	if missing > 0 || kernelRoute(t, r, vip4b) == "" {
		t.Fatalf("route missing in %d of %d polls from the kill to after the End-of-RIB (second route in: %v), despite graceful restart",
			missing, polls, kernelRoute(t, r, vip4b) != "")
	}
	routeVia(t, r, vip4, time.Second, gw[0])

	took := s.stopWithdraw()
	t.Logf("Stop(Withdraw) with graceful restart returned in %v; route gone from the kernel %v after it",
		took.Round(time.Millisecond), routeVia(t, r, vip4, 2*time.Second).Round(time.Millisecond))
}

// TestFRRBFD is TestBIRDBFD against FRR (bgpd with bfdd, its default timers: 300 ms × 3).
func TestFRRBFD(t *testing.T) {
	requireLab(t, "vtysh", "nft", frrDir+"/zebra", frrDir+"/bgpd", frrDir+"/bfdd")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	frrDaemons(t, r, fmt.Sprintf(`hostname rt
router bgp 65000
 bgp router-id 198.18.1.1
 no bgp ebgp-requires-policy
 neighbor %s remote-as 65001
 neighbor %s timers 3 9
 neighbor %s timers connect 1
 neighbor %s passive
 neighbor %s bfd
 neighbor %s remote-as 65001
 neighbor %s timers 3 9
 neighbor %s timers connect 1
 neighbor %s passive
 address-family ipv6 unicast
  neighbor %s activate
 exit-address-family
`, gw[0], gw[0], gw[0], gw[0], gw[0], gw[1], gw[1], gw[1], gw[1], gw[1]), true)
	s := startSpeaker(t, g, "gw1", bgp.Config{RouterID: gw[0], ASN: 65001, GracefulRestart: 30 * time.Second,
		Peers: []bgp.Peer{{Address: rt[0], ASN: 65000, BFD: bgp.BFD{Enabled: true}}, {Address: rt[1], ASN: 65000}}})
	testBFD(t, s, r, g, rt, gw)
}

// TestFRRRepeer is TestBIRDRepeer against FRR (neighbor shutdown, then no neighbor shutdown),
// twice.
func TestFRRRepeer(t *testing.T) {
	requireLab(t, "vtysh", frrDir+"/zebra", frrDir+"/bgpd")
	pfx := netlab.Prefix()
	r, g := netlab.New(t, pfx+"rt"), netlab.New(t, pfx+"g1")
	rt, gw := link(t, pfx, r, g, 1)
	dir := frrPeer(t, r, gw[0], false)
	vtysh := func(cmd string) func() {
		return func() {
			t.Helper()
			out, err := exec.Command("vtysh", "--vty_socket", dir, "-c", "configure terminal", "-c", "router bgp 65000",
				"-c", cmd).CombinedOutput()
			if err != nil {
				t.Fatalf("vtysh %s: %v: %s", cmd, err, out)
			}
		}
	}
	testRepeer(t, r, g, rt, gw, 2, vtysh("neighbor "+gw[0].String()+" shutdown"), vtysh("no neighbor "+gw[0].String()+" shutdown"))
}

// frrPeer runs FRR in r with one passive eBGP neighbour, the gateway at gw (AS 65001, timers
// 3/9, connect retry 1 s), with BFD (bfdd running) when bfd is set; it returns the daemons'
// directory.
func frrPeer(t *testing.T, r *netlab.NS, gw netip.Addr, bfd bool) string {
	t.Helper()
	conf := fmt.Sprintf(`hostname rt
router bgp 65000
 bgp router-id 198.18.1.1
 no bgp ebgp-requires-policy
 neighbor %[1]s remote-as 65001
 neighbor %[1]s timers 3 9
 neighbor %[1]s timers connect 1
 neighbor %[1]s passive
`, gw)
	if bfd {
		conf += fmt.Sprintf(" neighbor %s bfd\n", gw)
	}
	return frrDaemons(t, r, conf, bfd)
}
