// SPDX-License-Identifier: Apache-2.0
package speaker

// The lab for the tests against real routers: namespaces (internal/netlab), BIRD and FRR
// processes in them, and speakers in child processes.
//
// A speaker runs in a child process of the test binary started with
// `nsenter --net=/run/netns/GW` (TestMain's switch, XLB_BGP_CHILD): GoBGP opens its sockets
// from goroutines on any OS thread, so the whole process must be in the gateway's namespace;
// setns on one locked thread would leave the dialling goroutines in the host's namespace. A
// child process is also what graceful restart needs: it can be killed with SIGKILL.
// The parent drives the child with one JSON command per line on its stdin.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/internal/netlab"
)

const childEnv = "XLB_BGP_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(childMain(path))
	}
	os.Exit(m.Run())
}

// command is what the parent sends to a child speaker; reply is the answer.
type command struct {
	Op     string      // "routes", "peers", "stop-withdraw", "stop-keep"
	Routes []bgp.Route // for "routes"
}

type reply struct {
	Err   string
	Peers []bgp.PeerStatus
}

// childMain runs a speaker with the JSON bgp.Config in path until stdin closes.
func childMain(path string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := os.ReadFile(path)
	if err != nil {
		log.Error("read config", "err", err)
		return 1
	}
	var cfg bgp.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		log.Error("parse config", "err", err)
		return 1
	}
	s, err := New(cfg, log)
	if err != nil {
		log.Error("new", "err", err)
		return 1
	}
	if err := s.Start(context.Background()); err != nil {
		log.Error("start", "err", err)
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c command
		var r reply
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			r.Err = err.Error()
		} else {
			switch c.Op {
			case "routes":
				err = s.SetRoutes(c.Routes)
			case "peers":
				r.Peers = s.Peers()
			case "stop-withdraw", "stop-keep":
				mode := Withdraw
				if c.Op == "stop-keep" {
					mode = KeepRoutes
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = s.Stop(ctx, mode)
				cancel()
			default:
				err = fmt.Errorf("unknown op %q", c.Op)
			}
			if err != nil {
				r.Err = err.Error()
			}
		}
		if err := enc.Encode(r); err != nil {
			return 1
		}
	}
	_ = s.Stop(context.Background(), Withdraw)
	return 0
}

// requireLab skips (or, with CI=true, fails) unless the test can build namespaces and run bin.
func requireLab(t *testing.T, bins ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no real routers")
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range append([]string{"ip", "nsenter"}, bins...) {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs %v (make deps installs bird2 and frr)", missing)
	}
	t.Skipf("needs %v", missing)
}

// link joins router namespace r and gateway namespace g with a veth pair on subnet i:
// the router is 198.18.i.1 and 2001:db8:i::1, the gateway 198.18.i.2 and 2001:db8:i::2.
func link(t *testing.T, pfx string, r, g *netlab.NS, i int) (router, gw [2]netip.Addr) {
	t.Helper()
	rn, gn := fmt.Sprintf("%sr%d", pfx, i), fmt.Sprintf("%sg%d", pfx, i)
	netlab.Veth(t, r, rn, fmt.Sprintf("02:00:00:00:%02x:01", i), g, gn, fmt.Sprintf("02:00:00:00:%02x:02", i))
	r.MustIP(t, fmt.Sprintf("addr add 198.18.%d.1/24 dev %s", i, rn))
	r.MustIP(t, fmt.Sprintf("addr add 2001:db8:%d::1/64 dev %s nodad", i, rn))
	g.MustIP(t, fmt.Sprintf("addr add 198.18.%d.2/24 dev %s", i, gn))
	g.MustIP(t, fmt.Sprintf("addr add 2001:db8:%d::2/64 dev %s nodad", i, gn))
	router = [2]netip.Addr{netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", i)), netip.MustParseAddr(fmt.Sprintf("2001:db8:%d::1", i))}
	gw = [2]netip.Addr{netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", i)), netip.MustParseAddr(fmt.Sprintf("2001:db8:%d::2", i))}
	return router, gw
}

// daemon starts argv in namespace ns (in the foreground, output to log), and kills it when
// the test ends.
func daemon(t *testing.T, ns *netlab.NS, log string, argv ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, "--"}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s:\n%s", filepath.Base(log), b)
		}
	})
	return cmd
}

// bird starts BIRD 2 in ns with conf and returns its control socket.
func bird(t *testing.T, ns *netlab.NS, conf string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon(t, ns, filepath.Join(dir, "bird.log"), "bird", "-f", "-c", path,
		"-s", filepath.Join(dir, "bird.ctl"), "-P", filepath.Join(dir, "bird.pid"))
	return filepath.Join(dir, "bird.ctl")
}

// birdConf is a BIRD router (AS 65000) that installs what it learns into the kernel, merging
// equal paths into one multipath route; protocols are the per-neighbour `protocol bgp` lines.
func birdConf(routerID string, gr bool, protocols ...string) string {
	grLine := ""
	if gr {
		grLine = "graceful restart on;"
	}
	return fmt.Sprintf(`router id %s;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; merge paths yes limit 16; learn off; }
protocol kernel { ipv6 { import none; export all; }; merge paths yes limit 16; learn off; }
template bgp lb {
  local as 65000; hold time 9; keepalive time 3; connect retry time 1; passive on; %s
  ipv4 { import all; export none; };
  ipv6 { import all; export none; };
}
%s
`, routerID, grLine, strings.Join(protocols, "\n"))
}

// speaker is a child process running a Speaker in a gateway namespace.
type speaker struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startSpeaker starts a speaker with cfg in namespace ns; it is killed when the test ends.
func startSpeaker(t *testing.T, ns *netlab.NS, name string, cfg bgp.Config) *speaker {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, name+".log")
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns.Name, "--", exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = lf
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start speaker %s: %v", name, err)
	}
	s := &speaker{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	s.out.Buffer(nil, 1<<20)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("speaker %s log:\n%s", name, b)
		}
	})
	return s
}

// do sends one command and returns the reply (bounded: 10 s).
func (s *speaker) do(c command) reply {
	s.t.Helper()
	b, _ := json.Marshal(c)
	done := make(chan reply, 1)
	go func() {
		var r reply
		if _, err := s.in.Write(append(b, '\n')); err != nil {
			r.Err = "write: " + err.Error()
		} else if !s.out.Scan() {
			r.Err = fmt.Sprintf("speaker exited: %v", s.out.Err())
		} else if err := json.Unmarshal(s.out.Bytes(), &r); err != nil {
			r.Err = "reply: " + err.Error()
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		s.t.Fatalf("speaker: no reply to %s within 10s", c.Op)
		return reply{}
	}
}

// announce makes prefixes the speaker's routes.
func (s *speaker) announce(prefixes ...string) {
	s.t.Helper()
	var rs []bgp.Route
	for _, p := range prefixes {
		rs = append(rs, bgp.Route{Prefix: netip.MustParsePrefix(p)})
	}
	if r := s.do(command{Op: "routes", Routes: rs}); r.Err != "" {
		s.t.Fatalf("SetRoutes(%v): %s", prefixes, r.Err)
	}
}

func (s *speaker) peers() []bgp.PeerStatus {
	s.t.Helper()
	r := s.do(command{Op: "peers"})
	if r.Err != "" {
		s.t.Fatalf("Peers(): %s", r.Err)
	}
	return r.Peers
}

// waitUp waits until every peer of the speaker is established and returns how long it took.
func (s *speaker) waitUp(within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	waitFor(s.t, within, "sessions established", func() (bool, string) {
		ps := s.peers()
		for _, p := range ps {
			if !p.Up {
				return false, fmt.Sprint(ps)
			}
		}
		return len(ps) > 0, fmt.Sprint(ps)
	})
	return time.Since(start)
}

// stopWithdraw has the speaker Stop(Withdraw) and returns how long the call took.
func (s *speaker) stopWithdraw() time.Duration {
	s.t.Helper()
	start := time.Now()
	if rep := s.do(command{Op: "stop-withdraw"}); rep.Err != "" {
		s.t.Fatalf("Stop(Withdraw): %s", rep.Err)
	}
	return time.Since(start)
}

// kill sends SIGKILL to the speaker process and reaps it.
func (s *speaker) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// waitFor polls cond every 10 ms until it holds, failing the test after within (the message
// names what was awaited and the last state seen). It returns how long it waited.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v; last seen: %s", what, within, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kernelRoute returns `ip -n NS [-6] route show ADDR` in ns, trimmed.
func kernelRoute(t *testing.T, ns *netlab.NS, addr string) string {
	t.Helper()
	args := []string{"-n", ns.Name}
	if strings.Contains(addr, ":") {
		args = append(args, "-6")
	}
	out, err := exec.Command("ip", append(args, "route", "show", addr)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show %s in %s: %v: %s", addr, ns.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// routeVia waits until ns's kernel has a route to addr via exactly the given next hops (none:
// no route) and returns how long that took.
func routeVia(t *testing.T, ns *netlab.NS, addr string, within time.Duration, via ...netip.Addr) time.Duration {
	t.Helper()
	return waitFor(t, within, fmt.Sprintf("route %s in %s via %v", addr, ns.Name, via), func() (bool, string) {
		out := kernelRoute(t, ns, addr)
		if len(via) == 0 {
			return out == "", out
		}
		if out == "" || strings.Count(out, "via ") != len(via) {
			return false, out
		}
		for _, v := range via {
			if !strings.Contains(out, "via "+v.String()+" ") && !strings.Contains(out, "via inet6 "+v.String()+" ") {
				return false, out
			}
		}
		return true, out
	})
}
