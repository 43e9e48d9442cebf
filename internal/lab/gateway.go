// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Bounds of the gateway operations.
const (
	readyTimeout  = 30 * time.Second // xlb start: BPF load, attach, first reconcile
	exitTimeout   = 5 * time.Second  // a signalled xlb exits
	reloadTimeout = 10 * time.Second // a SIGHUP applied and reconciled
	httpTimeout   = 2 * time.Second  // one request to xlb's HTTP server
)

// Gateway is a gateway namespace running xlb: "up0" links it to the router, "cl0" to the cluster
// L2. xlb attaches its XDP program to both.
type Gateway struct {
	Index                int
	Name                 string // "g1"
	NS                   *netlab.NS
	Upstream4, Upstream6 netip.Addr // on "up0"
	Cluster4, Cluster6   netip.Addr // on "cl0"
	PinPath              string     // the datapath's bpffs directory (unique per site)
	ConfigPath, LogPath  string     // xlb's config file and its output (appended at each start)
	PidPath              string     // the running xlb's pid (for Down)
	Listen               string     // xlb's HTTP server, on the gateway namespace's loopback

	site *Site
	mu   sync.Mutex
	proc *xlbProc
	// vanished is set between Vanish and Return.
	vanished bool
}

// isVanished reports whether g is between Vanish and Return.
func (g *Gateway) isVanished() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.vanished
}

type xlbProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

func (p *xlbProc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Running reports whether this gateway's xlb process is alive.
func (g *Gateway) Running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proc != nil && !g.proc.done()
}

// Pid returns the running xlb's pid, 0 if none.
func (g *Gateway) Pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.proc == nil || g.proc.done() {
		return 0
	}
	return g.proc.cmd.Process.Pid
}

// WriteConfig replaces xlb's config file (it takes effect at Reload or Start).
func (g *Gateway) WriteConfig(yaml string) error {
	tmp := g.ConfigPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, g.ConfigPath)
}

// Start runs `nsenter --net=/run/netns/<ns> xlb run --config <file>`: in the gateway's network
// namespace but the host's mount namespace, so that /sys/fs/bpf is the host's and a restarted
// xlb adopts the pins of the previous one (`ip netns exec` would mount a private /sys). It waits
// until /readyz answers 200. The process gets SIGKILL if this process dies.
func (g *Gateway) Start() error {
	g.mu.Lock()
	if g.proc != nil && !g.proc.done() {
		g.mu.Unlock()
		return fmt.Errorf("%s: xlb already running (pid %d)", g.Name, g.proc.cmd.Process.Pid)
	}
	p, err := g.spawn()
	g.mu.Unlock()
	if err != nil {
		return err
	}
	cmd := p.cmd
	started := time.Now()
	bound := g.site.bound(readyTimeout)
	deadline := started.Add(bound)
	var last string
	for time.Now().Before(deadline) {
		if p.done() {
			return fmt.Errorf("%s: xlb exited (%v) before it was ready:\n%s", g.Name, cmd.ProcessState, g.logTail(20))
		}
		code, body, err := g.HTTPGet("/readyz")
		if err == nil && code == http.StatusOK {
			g.site.logf("%s: xlb pid %d ready in %v", g.Name, cmd.Process.Pid, time.Since(started).Round(time.Millisecond))
			return nil
		}
		last = fmt.Sprintf("%d %q %v", code, strings.TrimSpace(body), err)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s: xlb not ready within %v (/readyz: %s):\n%s", g.Name, bound, last, g.logTail(20))
}

// spawn starts the xlb process. g.mu must be held.
func (g *Gateway) spawn() (*xlbProc, error) {
	logf, err := os.OpenFile(g.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== %s xlb run --config %s\n", time.Now().Format(time.RFC3339Nano), g.ConfigPath)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+g.NS.Name, g.site.Opts.XLB, "run", "--config", g.ConfigPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// nsenter execs xlb (no --fork): the pid is xlb's. It dies with us, and it has its own
	// process group: a Ctrl-C in the lab's terminal is for the lab, which stops xlb itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start xlb: %w", g.Name, err)
	}
	p := &xlbProc{cmd: cmd, exited: make(chan struct{}), log: logf}
	g.proc = p
	_ = os.WriteFile(g.PidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// signal sends sig to the running xlb and, if wait, waits until it has exited.
func (g *Gateway) signal(sig syscall.Signal, wait bool) error {
	g.mu.Lock()
	p := g.proc
	g.mu.Unlock()
	if p == nil || p.done() {
		return fmt.Errorf("%s: xlb is not running", g.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", g.Name, sig, err)
	}
	if !wait {
		return nil
	}
	select {
	case <-p.exited:
		_ = os.Remove(g.PidPath)
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("%s: xlb %d still running %v after %v", g.Name, p.cmd.Process.Pid, exitTimeout, sig)
	}
}

// Kill SIGKILLs xlb (a crash: nothing is cleaned up; forwarding goes on from the pinned
// datapath) and waits until it is gone.
func (g *Gateway) Kill() error {
	if err := g.signal(syscall.SIGKILL, true); err != nil {
		return err
	}
	g.site.logf("%s: xlb killed (SIGKILL)", g.Name)
	return nil
}

// Stop SIGTERMs xlb (it exits leaving forwarding in place), SIGKILLs it if it is still there
// after a while, and waits until it is gone. No-op if it is not running.
func (g *Gateway) Stop() error {
	if !g.Running() {
		return nil
	}
	if err := g.signal(syscall.SIGTERM, true); err != nil {
		if g.Running() {
			return errors.Join(err, g.Kill())
		}
	}
	return nil
}

// Restart kills xlb if it is running (SIGKILL) and starts it again; the new process adopts
// the pinned datapath.
func (g *Gateway) Restart() error {
	if g.Running() {
		if err := g.Kill(); err != nil {
			return err
		}
	}
	return g.Start()
}

// Reload sends SIGHUP and waits until xlb has applied the config file
// (xlb_config_reloads_total{result="applied"} grew) and reconciled since (xlb_reconciles_total
// grew: the reload triggers a reconcile; in the rare case that a health change triggered one
// meanwhile, the wait may end before the reload's own, which follows within a millisecond).
func (g *Gateway) Reload() error {
	// The counters before the signal; a gateway busy with a flood on a small machine may miss
	// one scrape's timeout, so a few tries, bounded by the reload's own timeout.
	var before Metrics
	var err error
	for start := time.Now(); ; {
		if before, err = g.Metrics(); err == nil {
			break
		}
		if time.Since(start) > reloadTimeout {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	applied0 := before.Sum("xlb_config_reloads_total", "result", "applied")
	rejected0 := before.Sum("xlb_config_reloads_total", "result", "rejected")
	rec0 := before.Sum("xlb_reconciles_total")
	if err := g.signal(syscall.SIGHUP, false); err != nil {
		return err
	}
	deadline := time.Now().Add(reloadTimeout)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		m, err := g.Metrics()
		if err != nil {
			continue
		}
		if m.Sum("xlb_config_reloads_total", "result", "rejected") > rejected0 {
			return fmt.Errorf("%s: xlb rejected the config:\n%s", g.Name, g.logTail(10))
		}
		if m.Sum("xlb_config_reloads_total", "result", "applied") > applied0 && m.Sum("xlb_reconciles_total") > rec0 {
			g.site.logf("%s: config reloaded", g.Name)
			return nil
		}
	}
	return fmt.Errorf("%s: SIGHUP not applied and reconciled within %v:\n%s", g.Name, reloadTimeout, g.logTail(10))
}

// shutdown is the gateway's part of Site.Close: stop xlb, then remove its datapath (detach,
// unpin) with `xlb cleanup`, or by removing the pins if that fails.
func (g *Gateway) shutdown() error {
	var errs []error
	if g.isVanished() { // a stopped xlb would take SIGTERM only once continued
		_ = g.signal(syscall.SIGCONT, false)
	}
	if err := g.Stop(); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(g.PinPath); err == nil {
		if bin := g.site.Opts.XLB; bin != "" {
			out, err := exec.Command("nsenter", "--net=/run/netns/"+g.NS.Name, bin, "cleanup", "--pin-path", g.PinPath).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: xlb cleanup: %v: %s", g.Name, err, strings.TrimSpace(string(out))))
			}
		}
		if err := os.RemoveAll(g.PinPath); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(g.PidPath)
	return errors.Join(errs...)
}

// Log returns xlb's output so far (every start of this gateway).
func (g *Gateway) Log() string {
	b, _ := os.ReadFile(g.LogPath)
	return string(b)
}

func (g *Gateway) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(g.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// HTTPGet fetches path from xlb's HTTP server, from inside the gateway namespace.
func (g *Gateway) HTTPGet(path string) (int, string, error) {
	return g.NS.HTTPGet(g.Listen, path, httpTimeout)
}

// Metrics scrapes xlb's /metrics from inside the gateway namespace.
func (g *Gateway) Metrics() (Metrics, error) {
	code, body, err := g.HTTPGet("/metrics")
	if err != nil {
		return "", fmt.Errorf("%s: scrape /metrics: %w", g.Name, err)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("%s: scrape /metrics: HTTP %d", g.Name, code)
	}
	return Metrics(body), nil
}

// Metrics is one scrape of an xlb /metrics page (Prometheus text format).
type Metrics string

// Sample is one line of a scrape.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples returns the samples of metric name whose labels include the given pairs
// (name, value, name, value...).
func (m Metrics) Samples(name string, labels ...string) []Sample {
	var out []Sample
lines:
	for _, line := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		var ls, v string
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			if ls, v, ok = strings.Cut(rest, "} "); !ok {
				continue
			}
		} else if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v = rest
		} else {
			continue
		}
		s := Sample{Name: name, Labels: parseLabels(ls)}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.Labels[labels[i]] != labels[i+1] {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		s.Value = f
		out = append(out, s)
	}
	return out
}

// Sum adds up the samples Samples returns (0 if none).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var t float64
	for _, s := range m.Samples(name, labels...) {
		t += s.Value
	}
	return t
}

// parseLabels parses `a="x",b="y"` (values as Prometheus quotes them).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		v, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		uq, _ := strconv.Unquote(v)
		out[k] = uq
		s = strings.TrimPrefix(rest[len(v):], ",")
	}
	return out
}

// Reasons returns the non-zero datapath verdict and event counters, "reason=n ..." sorted.
func (m Metrics) Reasons() string {
	var parts []string
	for _, s := range m.Samples("xlb_datapath_packets_total") {
		if s.Value != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", s.Labels["reason"], s.Value))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
