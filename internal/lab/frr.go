// SPDX-License-Identifier: Apache-2.0
package lab

// Routing FRR: the router runs FRR's zebra (kernel routes), bfdd and bgpd as user frr, each in the
// foreground inside the router's namespace, with their own directory (configs, pid files, the
// zserv socket, the vty sockets) under the site's state directory, so they share nothing with
// a system FRR or another site.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FRRDir is where Debian's frr package puts the daemons.
const FRRDir = "/usr/lib/frr"

// frrStartTimeout bounds each FRR daemon's start (until its socket exists).
const frrStartTimeout = 10 * time.Second

// frrDir is the router's FRR directory in the site's state directory (owned by user frr).
func (s *Site) frrDir() string { return filepath.Join(s.Dir, "frr") }

// frrConf is the router's bgpd config: AS 65000, per family a peer group of the gateways
// (passive, eBGP with whatever AS each has, hold 9 s, keepalive 3 s, connect retry 1 s, BFD at
// bfdd's defaults: 300 ms × 3),
// no policy required to accept them, and up to 16 equal paths of different neighbouring ASes
// merged into one multipath route (as-path multipath-relax, maximum-paths 16).
func (s *Site) frrConf() string {
	_, r4, _, _ := upstreamAddrs(1)
	var b strings.Builder
	fmt.Fprintf(&b, `! xlb lab site %s, router (generated)
frr defaults traditional
hostname %s
log stdout informational
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 bgp bestpath as-path multipath-relax
 neighbor gw4 peer-group
 neighbor gw4 remote-as external
 neighbor gw4 passive
 neighbor gw4 timers 3 9
 neighbor gw4 timers connect 1
 neighbor gw4 bfd
 neighbor gw6 peer-group
 neighbor gw6 remote-as external
 neighbor gw6 passive
 neighbor gw6 timers 3 9
 neighbor gw6 timers connect 1
 neighbor gw6 bfd
`, s.Prefix, s.Router.NS.Name, RouterASN, r4)
	for g := 1; g <= s.Opts.Gateways; g++ {
		gw4, _, gw6, _ := upstreamAddrs(g)
		fmt.Fprintf(&b, " neighbor %s peer-group gw4\n neighbor %s peer-group gw6\n", gw4, gw6)
	}
	b.WriteString(` address-family ipv4 unicast
  neighbor gw4 activate
  maximum-paths 16
 exit-address-family
 address-family ipv6 unicast
  neighbor gw6 activate
  maximum-paths 16
 exit-address-family
`)
	return b.String()
}

// startFRR writes the router's FRR configs and runs zebra, bfdd, then bgpd, as user frr in the
// router's namespace (nsenter execs them: the pids are theirs), waiting for each one's socket.
// FRR drops its privileges, which clears the parent-death signal: if the lab process dies,
// Down (make lab-down) finds them by their config file.
func (s *Site) startFRR() error {
	for _, d := range []string{"zebra", "bfdd", "bgpd"} {
		if _, err := os.Stat(filepath.Join(FRRDir, d)); err != nil {
			return fmt.Errorf("lab: routing frr needs %s (make deps installs frr): %w", filepath.Join(FRRDir, d), err)
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		return errors.New("lab: routing frr needs vtysh (make deps installs frr)")
	}
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("lab: routing frr: user frr: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := s.frrDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{"zebra.conf": "hostname " + s.Router.NS.Name + "\n",
		"bfdd.conf": "hostname " + s.Router.NS.Name + "\n", "bgpd.conf": s.frrConf()}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, p := range []string{dir, filepath.Join(dir, "zebra.conf"), filepath.Join(dir, "bfdd.conf"), filepath.Join(dir, "bgpd.conf")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("lab: chown %s to frr: %w", p, err)
		}
	}
	if err := s.startFRRDaemon("zebra", filepath.Join(dir, "zserv.api")); err != nil {
		return err
	}
	if err := s.startFRRDaemon("bfdd", filepath.Join(dir, "bfdd.vty")); err != nil {
		return err
	}
	if err := s.startFRRDaemon("bgpd", filepath.Join(dir, "bgpd.vty")); err != nil {
		return err
	}
	s.logf("router: FRR zebra, bfdd and bgpd, config %s", filepath.Join(dir, "bgpd.conf"))
	return nil
}

// startFRRDaemon starts FRR daemon name (zebra, bfdd or bgpd) and waits until ready exists.
func (s *Site) startFRRDaemon(name, ready string) error {
	dir := s.frrDir()
	logf, err := os.OpenFile(filepath.Join(s.Dir, "frr-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+s.Router.NS.Name, filepath.Join(FRRDir, name),
		"-u", "frr", "-g", "frr", "-f", filepath.Join(dir, name+".conf"), "-i", filepath.Join(dir, name+".pid"),
		"-z", filepath.Join(dir, "zserv.api"), "--vty_socket", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: start FRR %s: %w", name, err)
	}
	p := &routerProc{cmd: cmd, exited: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	s.mu.Lock()
	s.Router.frr = append(s.Router.frr, p)
	s.mu.Unlock()
	bound := s.bound(frrStartTimeout)
	deadline := time.Now().Add(bound)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("lab: FRR %s exited: %s", name, b)
		case <-time.After(routePollInterval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: FRR %s made no %s within %v", name, filepath.Base(ready), bound)
		}
	}
}

// stopFRR kills the router's FRR daemons (bgpd first, then zebra) and waits until they are gone.
func (s *Site) stopFRR() error {
	s.mu.Lock()
	ps := s.Router.frr
	s.Router.frr = nil
	s.mu.Unlock()
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(birdExitTimeout):
			errs = append(errs, fmt.Errorf("lab: FRR %d still running %v after SIGKILL", p.cmd.Process.Pid, birdExitTimeout))
		}
	}
	return errors.Join(errs...)
}

// VTYSH runs `vtysh -c <command>` against the router's FRR and returns its output.
func (s *Site) VTYSH(command string) (string, error) {
	if s.Opts.Routing != FRR {
		return "", fmt.Errorf("lab: vtysh: the site's routing is %v", s.Opts.Routing)
	}
	out, err := exec.Command("vtysh", "--vty_socket", s.frrDir(), "-c", command).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh -c %q: %v: %s", command, err, out)
	}
	return string(out), nil
}

// VTYSHConfig applies configuration lines to the router's bgpd (`vtysh -c "configure
// terminal" -c line ...`).
func (s *Site) VTYSHConfig(lines ...string) error {
	if s.Opts.Routing != FRR {
		return fmt.Errorf("lab: vtysh: the site's routing is %v", s.Opts.Routing)
	}
	args := []string{"--vty_socket", s.frrDir(), "-c", "configure terminal"}
	for _, l := range lines {
		args = append(args, "-c", l)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "% ") {
		return fmt.Errorf("vtysh configure %q: %v: %s", lines, err, out)
	}
	return nil
}
