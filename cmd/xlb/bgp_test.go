// SPDX-License-Identifier: Apache-2.0
package main

// The daemon's BGP speaker against a real router: BIRD 2 in a fourth namespace, peered with
// the daemon in the gateway namespace of the end-to-end lab.
//
//	router (r0) 198.18.2.1/24 <-veth-> (gr) 198.18.2.2/24 gateway (xlb, GoBGP)

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

const (
	labRouterIf   = "r0"
	labGWRouterIf = "gr"
	labRouter     = "198.18.2.1"
	labGWRouter   = "198.18.2.2"
	bgpUpTimeout  = 20 * time.Second // session up (BIRD connect retry, GoBGP's 1 s retry) and first announce
)

// TestDaemonBGP: the daemon announces the VIP to BIRD once ready, withdraws it when every
// backend fails its health check, announces it again when one recovers, exports the session
// state, and withdraws on SIGTERM (withdrawOnExit defaults to true).
func TestDaemonBGP(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs bird (make deps installs bird2)")
		}
		t.Skip("needs bird (bird2)")
	}
	start := time.Now()
	step := func(name string) { t.Logf("--- %s (at %v)", name, time.Since(start).Round(time.Millisecond)) }
	l := newLab(t)
	r := l.startRouter(t)

	step("start the daemon with bgp")
	l.extra = fmt.Sprintf(`bgp:
  routerID: %s
  asn: 65001
  peers:
    - {address: %s, asn: 65000, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s}
`, labGWRouter, labRouter)
	l.writeConfig(t, labBackends[:2])
	d := l.startDaemon(t)
	l.waitReady(t, d)
	ready := time.Now()
	vip := labVIP.String()
	waitRoute(t, r, vip, bgpUpTimeout, true)
	t.Logf("VIP /32 in the router's FIB %v after ready: %s", time.Since(ready).Round(time.Millisecond), routerRoute(t, r, vip))
	if out := routerRoute(t, r, vip); !strings.Contains(out, "via "+labGWRouter+" ") {
		t.Errorf("route to the VIP: %q, want via %s", out, labGWRouter)
	}
	d.waitLog(t, "bgp session up")
	if v, ok := l.metrics(t).value("xlb_bgp_session_up", "peer", labRouter); !ok || v != 1 {
		t.Errorf("xlb_bgp_session_up{peer=%q} is %v (found %v), want 1", labRouter, v, ok)
	}
	if m := l.metrics(t); !strings.Contains(string(m), "\nxlb_bgp_announced_prefixes 1\n") {
		t.Errorf("xlb_bgp_announced_prefixes is not 1")
	}

	step("every backend fails: the VIP is withdrawn")
	// Detection, (fall + 1) intervals with their jitter (the first failing probe may come up to
	// an interval after the stop) and the probe timeout, then 2 s for the reconcile, the
	// withdrawal and the router on a loaded machine.
	bound := time.Duration(hcFall+1)*hcInterval*11/10 + hcTimeout + 2*time.Second
	stopped := time.Now()
	for _, b := range labBackends[:2] {
		l.servers[b].stop()
	}
	waitRoute(t, r, vip, bound, false)
	t.Logf("withdrawn from the router's FIB %v after the backends stopped (bound %v)",
		time.Since(stopped).Round(time.Millisecond), bound)
	d.waitLog(t, "bgp: withdrawing VIP")

	step("one backend recovers: the VIP is announced again")
	restarted := time.Now()
	l.servers[labBackends[0]] = l.startServer(t, labBackends[0])
	waitRoute(t, r, vip, hcInterval*11/10+hcTimeout+2*time.Second, true)
	t.Logf("announced again %v after a backend came back (rise 1, interval %v)",
		time.Since(restarted).Round(time.Millisecond), hcInterval)

	step("SIGTERM: withdrawOnExit (default true) withdraws")
	termed := time.Now()
	d.signal(t, syscall.SIGTERM)
	waitRoute(t, r, vip, 5*time.Second, false)
	t.Logf("withdrawn %v after SIGTERM", time.Since(termed).Round(time.Millisecond))
	d.waitExit(t, "of SIGTERM")
	t.Logf("the daemon exited %v after SIGTERM (withdrawing first)", time.Since(termed).Round(time.Millisecond))
	if !strings.Contains(d.out.String(), "bgp stopped; routes withdrawn") {
		t.Errorf("the daemon did not log the withdrawal at exit")
	}
	step("done")
}

// startRouter adds a router namespace linked to the gateway (labRouter <-> labGWRouter)
// running BIRD with one passive session to the gateway's xlb (AS 65001), and returns it.
func (l *lab) startRouter(t *testing.T) *netlab.NS {
	t.Helper()
	r := netlab.New(t, netlab.Prefix()+"r")
	netlab.Veth(t, r, labRouterIf, "02:00:5e:00:02:01", l.gw, labGWRouterIf, "02:00:5e:00:02:02")
	r.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", labRouter, labRouterIf))
	l.gw.MustIP(t, fmt.Sprintf("addr add %s/24 dev %s", labGWRouter, labGWRouterIf))
	startBIRD(t, r, labRouter, fmt.Sprintf("protocol bgp xlb from lb { neighbor %s as 65001; }\n", labGWRouter))
	return r
}

// startBIRD runs BIRD 2 in ns as a router (AS 65000) that installs what it learns into the
// kernel, equal paths merged (as bgp/speaker/lab_test.go's birdConf); protocols are its `protocol bgp
// NAME from lb {...}` lines (passive, the timers of the bgp tests). It is killed when t ends.
// It returns the path of BIRD's control socket (for birdc).
func startBIRD(t *testing.T, ns *netlab.NS, routerID, protocols string) string {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`router id %s;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; merge paths yes limit 16; learn off; }
protocol kernel { ipv6 { import none; export all; }; merge paths yes limit 16; learn off; }
template bgp lb {
  local as 65000; hold time 9; keepalive time 3; connect retry time 1; passive on;
  ipv4 { import all; export none; };
  ipv6 { import all; export none; };
}
%s`, routerID, protocols)
	path := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "bird.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns.Name, "--", "bird", "-f", "-c", path,
		"-s", filepath.Join(dir, "bird.ctl"), "-P", filepath.Join(dir, "bird.pid"))
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bird: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("bird log:\n%s", b)
		}
	})
	// Running once its control socket exists; a config error ends it at once.
	deadline := time.Now().Add(pollTimeout)
	for {
		if _, err := os.Stat(filepath.Join(dir, "bird.ctl")); err == nil {
			return filepath.Join(dir, "bird.ctl")
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("bird exited: %s", b)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("bird made no control socket within %v", pollTimeout)
		}
	}
}

// routerRoute returns `ip -n NS route show ADDR`, trimmed.
func routerRoute(t *testing.T, ns *netlab.NS, addr string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "route", "show", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show %s in %s: %v: %s", addr, ns.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitRoute polls ns's kernel table every 10 ms until a route to addr is there (present) or
// gone (!present), failing the test after within.
func waitRoute(t *testing.T, ns *netlab.NS, addr string, within time.Duration, present bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := routerRoute(t, ns, addr)
		if (out != "") == present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("route to %s in %s: want present=%v within %v; last seen %q", addr, ns.Name, present, within, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
