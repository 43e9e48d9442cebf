// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// Routing is how the router learns the VIPs.
type Routing int

const (
	// Static: the lab sets the router's multipath routes to the VIP prefixes itself (RouteVia,
	// RemoveFromRoute, AddToRoute). The zero value.
	Static Routing = iota
	// BIRD: the router runs BIRD 2, peered over BGP (an IPv4 and an IPv6 session) with each
	// gateway's xlb, and installs what it learns into its kernel with ECMP (merge paths). The
	// VIPs are the /32 and /128 host routes xlb announces.
	BIRD
	// FRR: the router runs FRR (zebra and bgpd, as user frr), peered like BIRD (an IPv4 and an
	// IPv6 session per gateway) and installing the learned routes into its kernel with ECMP
	// (maximum-paths 16, as-path multipath-relax: each gateway has its own AS).
	FRR
)

func (r Routing) String() string {
	switch r {
	case Static:
		return "static"
	case BIRD:
		return "bird"
	case FRR:
		return "frr"
	}
	return fmt.Sprintf("Routing(%d)", int(r))
}

// BGP reports whether the router learns the VIPs over BGP (BIRD or FRR).
func (r Routing) BGP() bool { return r == BIRD || r == FRR }

// KernelProto is the protocol the router's kernel routes learned over BGP show
// (`ip route`'s "proto"): "bird" or "bgp" (FRR); "" for Static.
func (r Routing) KernelProto() string {
	switch r {
	case BIRD:
		return "bird"
	case FRR:
		return "bgp"
	}
	return ""
}

// ParseRouting parses "static", "bird" or "frr".
func ParseRouting(s string) (Routing, error) {
	switch strings.ToLower(s) {
	case "static":
		return Static, nil
	case "bird":
		return BIRD, nil
	case "frr":
		return FRR, nil
	}
	return 0, fmt.Errorf("lab: routing %q: want static, bird or frr", s)
}

// BGP numbers of the lab: the router's AS, and gateway g's (eBGP).
const (
	RouterASN           = 65000
	bgpGracefulRestart  = 30 * time.Second
	bgpUpTimeout        = 20 * time.Second // sessions up and the VIP routes in the router's FIB
	birdStartTimeout    = 5 * time.Second
	birdExitTimeout     = 5 * time.Second
	routePollInterval   = 10 * time.Millisecond
	gatewayASNBase      = 65000
	routerBIRDName      = "bird"
	routerBIRDCtlSuffix = ".ctl"
)

// GatewayASN is gateway g's AS number: 65000+g (g1: 65001).
func GatewayASN(g int) uint32 { return uint32(gatewayASNBase + g) }

// routerProc is a routing daemon of the router: BIRD, or FRR's zebra or bgpd.
type routerProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// BIRD paths of the router, in the site's state directory.
func (s *Site) birdPath(ext string) string { return filepath.Join(s.Dir, routerBIRDName+ext) }

// birdConf is the router's BIRD config: device and kernel protocols (equal paths merged into one
// multipath route, the kernel's L4 hash spreads the flows), BFD at xlb's defaults (300 ms × 3),
// and per gateway a passive IPv4 and IPv6 session with BFD importing everything and exporting
// nothing, that takes a connection again 1 s after a failure (BIRD's default error wait is
// 60 s: docs/bgp.md).
func (s *Site) birdConf() string {
	_, r4, _, _ := upstreamAddrs(1)
	var b strings.Builder
	fmt.Fprintf(&b, `# xlb lab site %s, router (generated)
router id %s;
protocol device { scan time 10; }
protocol kernel { ipv4 { import none; export all; }; merge paths yes limit 16; learn off; }
protocol kernel { ipv6 { import none; export all; }; merge paths yes limit 16; learn off; }
protocol bfd { interface "*" { min rx interval 300 ms; min tx interval 300 ms; multiplier 3; }; }
template bgp lb4 {
  local as %d; hold time 9; keepalive time 3; connect retry time 1; passive on;
  bfd on; error wait time 1, 10;
  ipv4 { import all; export none; };
}
template bgp lb6 {
  local as %d; hold time 9; keepalive time 3; connect retry time 1; passive on;
  bfd on; error wait time 1, 10;
  ipv6 { import all; export none; };
}
`, s.Prefix, r4, RouterASN, RouterASN)
	for g := 1; g <= s.Opts.Gateways; g++ {
		gw4, _, gw6, _ := upstreamAddrs(g)
		fmt.Fprintf(&b, "protocol bgp g%d from lb4 { neighbor %s as %d; }\n", g, gw4, GatewayASN(g))
		fmt.Fprintf(&b, "protocol bgp g%dv6 from lb6 { neighbor %s as %d; }\n", g, gw6, GatewayASN(g))
	}
	return b.String()
}

// bgpYAML is gateway g's `bgp:` config section (BIRD or FRR routing): eBGP to the router over up0,
// one IPv4 and one IPv6 session, each with BFD (300 ms × 3). In Kubernetes mode the section has
// the speaker's own side only: the sessions are BGPPeer objects (BGPPeerObjects).
func (s *Site) bgpYAML(g *Gateway) string {
	_, r4, _, r6 := upstreamAddrs(g.Index)
	out := fmt.Sprintf(`bgp:
  routerID: %s
  asn: %d
  gracefulRestart: %s
  withdrawOnExit: true
`, g.Upstream4, GatewayASN(g.Index), bgpGracefulRestart)
	if s.Opts.Mode == Kubernetes {
		return out
	}
	return out + fmt.Sprintf(`  peers:
    - {address: %s, asn: %d, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, localAddress: %s, bfd: true}
    - {address: "%s", asn: %d, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, localAddress: "%s", bfd: true}
`, r4, RouterASN, g.Upstream4, r6, RouterASN, g.Upstream6)
}

// BGPPeerObjects are Kubernetes mode's BGP sessions, as BGPPeer objects: for each gateway, its
// IPv4 and its IPv6 session with the router (the sessions bgpYAML lists in File mode), selected
// by the gateway's name.
func (s *Site) BGPPeerObjects() []v1alpha1.BGPPeer {
	var out []v1alpha1.BGPPeer
	sec := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	for _, g := range s.Gateways {
		_, r4, _, r6 := upstreamAddrs(g.Index)
		for _, p := range []struct {
			suffix        string
			router, local netip.Addr
		}{{"ipv4", r4, g.Upstream4}, {"ipv6", r6, g.Upstream6}} {
			out = append(out, v1alpha1.BGPPeer{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPPeer"},
				ObjectMeta: metav1.ObjectMeta{Name: g.GatewayName() + "-router-" + p.suffix},
				Spec: v1alpha1.BGPPeerSpec{Address: p.router.String(), ASN: RouterASN, LocalAddress: p.local.String(),
					HoldTime: sec(9 * time.Second), KeepaliveTime: sec(3 * time.Second), ConnectRetry: sec(time.Second),
					BFD: &v1alpha1.BFD{Enabled: true}, Gateways: []string{g.GatewayName()}},
			})
		}
	}
	return out
}

// startBIRD writes the router's BIRD config and runs `bird -f` in the router's namespace
// (nsenter execs it: the pid is bird's; it dies with this process), waiting for its control
// socket. stopBIRD (a closer) kills it.
func (s *Site) startBIRD() error {
	if _, err := exec.LookPath("bird"); err != nil {
		return errors.New("lab: routing bird needs bird (BIRD 2; make deps installs bird2)")
	}
	conf, ctl := s.birdPath(".conf"), s.birdPath(routerBIRDCtlSuffix)
	if err := os.WriteFile(conf, []byte(s.birdConf()), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(s.birdPath(".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+s.Router.NS.Name, "bird", "-f", "-c", conf,
		"-s", ctl, "-P", s.birdPath(".pid"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: start bird: %w", err)
	}
	p := &routerProc{cmd: cmd, exited: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	s.mu.Lock()
	s.Router.bird = p
	s.mu.Unlock()
	bound := s.bound(birdStartTimeout)
	deadline := time.Now().Add(bound)
	for {
		if _, err := os.Stat(ctl); err == nil {
			s.logf("router: bird pid %d, config %s", cmd.Process.Pid, conf)
			return nil
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(s.birdPath(".log"))
			return fmt.Errorf("lab: bird exited: %s", b)
		case <-time.After(routePollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: bird made no control socket within %v", bound)
		}
	}
}

// stopBIRD kills the router's BIRD (if any) and removes its socket and pid files.
func (s *Site) stopBIRD() error {
	s.mu.Lock()
	p := s.Router.bird
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	var err error
	select {
	case <-p.exited:
	case <-time.After(birdExitTimeout):
		err = fmt.Errorf("lab: bird %d still running %v after SIGKILL", p.cmd.Process.Pid, birdExitTimeout)
	}
	_ = os.Remove(s.birdPath(routerBIRDCtlSuffix))
	_ = os.Remove(s.birdPath(".pid"))
	return err
}

// BIRDC runs `birdc -s <socket> args...` against the router's BIRD and returns its output.
func (s *Site) BIRDC(args ...string) (string, error) {
	if s.Opts.Routing != BIRD {
		return "", fmt.Errorf("lab: birdc: the site's routing is %v", s.Opts.Routing)
	}
	out, err := exec.Command("birdc", append([]string{"-s", s.birdPath(routerBIRDCtlSuffix)}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var viaRE = regexp.MustCompile(`\bvia (?:inet6 )?(\S+)`)

// RouterRoute returns the router's kernel route to vip (`ip route show <vip>`, the /32 or
// /128 BIRD installs, or the static prefix) and the gateways that are its next hops, in order.
func (s *Site) RouterRoute(vip netip.Addr) (string, []*Gateway, error) {
	fam := "-4"
	if vip.Is6() {
		fam = "-6"
	}
	out, err := exec.Command("ip", "-n", s.Router.NS.Name, fam, "route", "show", "match", vip.String()).CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("ip route show match %s in %s: %v: %s", vip, s.Router.NS.Name, err, out)
	}
	route := strings.TrimSpace(string(out))
	var gws []*Gateway
	for _, m := range viaRE.FindAllStringSubmatch(route, -1) {
		a, err := netip.ParseAddr(m[1])
		if err != nil {
			continue
		}
		for _, g := range s.Gateways {
			if g.Upstream4 == a || g.Upstream6 == a {
				gws = append(gws, g)
			}
		}
	}
	return route, gws, nil
}

// WaitRouterRoute polls the router's route to vip until its next hops are exactly gws (none:
// no route), within timeout, and returns how long that took.
func (s *Site) WaitRouterRoute(vip netip.Addr, timeout time.Duration, gws ...*Gateway) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		route, got, err := s.RouterRoute(vip)
		if err != nil {
			return time.Since(start), err
		}
		if sameGateways(got, gws) {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("lab: router's route to %s: want next hops %v within %v; last seen %q",
				vip, gatewayNames(gws), timeout, route)
		}
		time.Sleep(routePollInterval)
	}
}

func sameGateways(a, b []*Gateway) bool {
	if len(a) != len(b) {
		return false
	}
	for _, g := range b {
		found := false
		for _, h := range a {
			if h == g {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func gatewayNames(gws []*Gateway) []string {
	out := make([]string, len(gws))
	for i, g := range gws {
		out[i] = g.Name
	}
	return out
}

// routerSessions returns the router's view of its BGP sessions: `birdc show protocols` (BIRD)
// or vtysh's `show bgp summary` (FRR).
func (s *Site) routerSessions() (string, error) {
	return s.routerShow("BGP sessions", []string{"show", "protocols"}, "show bgp summary")
}

// routerShow asks the router's daemon: birdc with bird (BIRD), vtysh with vtysh (FRR); what
// names what is asked, for the error of a site without a router.
func (s *Site) routerShow(what string, bird []string, vtysh string) (string, error) {
	switch s.Opts.Routing {
	case BIRD:
		return s.BIRDC(bird...)
	case FRR:
		return s.VTYSH(vtysh)
	}
	return "", fmt.Errorf("lab: the site's routing is %v: no %s", s.Opts.Routing, what)
}

// routerSessionErrors returns the router's detailed view of its BGP sessions, which names why
// each last went down: `birdc show protocols all` (BIRD: "Last error: ...") or vtysh's `show bgp
// neighbors` (FRR: "Last reset ..., Notification sent (...)").
func (s *Site) routerSessionErrors() (string, error) {
	return s.routerShow("BGP sessions", []string{"show", "protocols", "all"}, "show bgp neighbors")
}

// RouterBFD returns the router's view of its BFD sessions: `birdc show bfd sessions` (BIRD) or
// vtysh's `show bfd peers brief` (FRR).
func (s *Site) RouterBFD() (string, error) {
	return s.routerShow("BFD sessions", []string{"show", "bfd", "sessions"}, "show bfd peers brief")
}
