// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/dsr"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// The node agent (`xlb agent`, docs/agent.md) runs on every node when the site needs it: in
// Kubernetes mode it balances the pods' connections to a Service's cluster IP at their sockets;
// in the DSR forwarding mode (the default: Options.ReturnPath false) it runs the node side of
// direct server return (docs/dsr.md) on the node's "eth0": it strips the gateways' carrier and
// rewrites the pods' replies to come from the VIP. In File mode it reads the services from a
// config file of the gateways' format (agentConfigPath) and does only the latter. A lab pod is
// a network namespace, not a process tree, so in Kubernetes mode each node's agent balances a
// cgroup of its own (standing in for the node's root cgroup), and a client "in a pod" is a
// process started in the pod's namespace and its node's cgroup (ClusterIPGet).

// agentListen is where each node's agent serves /metrics and /healthz, in the node's namespace.
const agentListen = "127.0.0.1:9612"

// agentUser is the agent's ServiceAccount (deploy/agent.yaml), as the apiserver names it.
const agentUser = "system:serviceaccount:xlb-system:xlb-agent"

// NodeAgent is `xlb agent` on one node.
type NodeAgent struct {
	Node *Node
	// Cgroup is the cgroup v2 directory it balances and PinPath the socket load balancer's pins
	// (Kubernetes mode; "" otherwise); DSRPinPath the node side of DSR's ("" in the return-path
	// mode); LogPath its log.
	Cgroup, PinPath, DSRPinPath, LogPath string

	site *Site
	args []string // `xlb agent ...`, for Start

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// agentName is the site-unique name of node n's agent, in its cgroup and pin directory.
func (s *Site) agentName(n *Node) string { return s.Prefix + "-agent-" + n.Name }

// dsrPinName is the site-unique name of node n's DSR pin directory.
func (s *Site) dsrPinName(n *Node) string { return s.Prefix + "-dsr-" + n.Name }

// agentConfigPath is the config file File mode's agents read: the gateways' services.
func (s *Site) agentConfigPath() string { return filepath.Join(s.Dir, "agent.yaml") }

// needAgents reports whether the site runs node agents.
func (s *Site) needAgents() bool { return s.Opts.Mode == Kubernetes || s.DSR() }

// startAgents starts an agent on every node and waits until each is ready: in Kubernetes
// mode, once the agent's RBAC is applied and it has applied the cluster IPs; in the DSR mode,
// once its node side of DSR holds the {frontend, endpoint} pairs of the node's backends.
func (s *Site) startAgents() error {
	var base []string
	root := ""
	if s.Opts.Mode == Kubernetes {
		k := s.Kube
		ctx, cancel := context.WithTimeout(k.ctx, k.site.bound(kubeSetupTimeout))
		defer cancel()
		if err := kubetest.ApplyFile(ctx, k.CP.Admin(), filepath.Join(k.DeployDir, "agent.yaml")); err != nil {
			return err
		}
		var err error
		if root, err = socklb.RootCgroup(); err != nil {
			return fmt.Errorf("lab: node agents: %w", err)
		}
	} else {
		if err := os.WriteFile(s.agentConfigPath(), []byte(s.agentConfigYAML(s.Backends())), 0o644); err != nil {
			return err
		}
		base = []string{"--config", s.agentConfigPath()}
	}
	// Registered first: agents started before a failure are stopped too.
	s.onClose(s.stopAgents)
	for _, n := range s.Nodes {
		a := &NodeAgent{Node: n, site: s, LogPath: filepath.Join(s.Dir, "agent-"+n.Name+".log")}
		a.args = append([]string{"agent", "--node", n.Name, "--listen", agentListen, "--cleanup-on-exit"}, base...)
		if s.Opts.Mode == Kubernetes {
			// Each agent's own identity, as a Pod's bound ServiceAccount token gives it: the
			// admission policy lets it change its own Node only, and no Node without one.
			cfg := s.Kube.CP.As(agentUser, "system:serviceaccounts", "system:serviceaccounts:xlb-system")
			cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {n.Name}}
			kubeconfig := filepath.Join(s.Dir, "agent-"+n.Name+".kubeconfig")
			if err := kubetest.WriteKubeconfig(kubeconfig, cfg); err != nil {
				return err
			}
			a.args = append(a.args, "--kubeconfig", kubeconfig)
			a.Cgroup, a.PinPath = filepath.Join(root, s.agentName(n)), filepath.Join(bpffsRoot, s.agentName(n))
			if err := os.Mkdir(a.Cgroup, 0o755); err != nil {
				return fmt.Errorf("lab: node %s: agent cgroup: %w", n.Name, err)
			}
			a.args = append(a.args, "--cgroup", a.Cgroup, "--pin-path", a.PinPath)
		}
		if s.DSR() {
			a.DSRPinPath = filepath.Join(bpffsRoot, s.dsrPinName(n))
			// The smallest flows table (16,384 flows, 2 MiB) unless Options.DSRFlows says: the
			// default preallocates 136 MiB a node.
			flows := 16384
			if s.Opts.DSRFlows != 0 {
				flows = s.Opts.DSRFlows
			}
			a.args = append(a.args, "--dsr-interface", "eth0", "--dsr-pin-path", a.DSRPinPath, "--dsr-flows", strconv.Itoa(flows))
		}
		s.mu.Lock()
		s.Agents = append(s.Agents, a)
		s.mu.Unlock()
		if err := a.spawn(); err != nil {
			return err
		}
	}
	for _, a := range s.Agents {
		if err := a.waitReady(); err != nil {
			return err
		}
	}
	if s.DSR() && s.Opts.Mode == File {
		if err := s.waitAgentPairs(s.Backends()); err != nil {
			return err
		}
	}
	what := "cluster IPs " + serviceClusterIPRange4 + " and " + serviceIPv6Range + " balanced at the pods' sockets"
	switch {
	case s.DSR() && s.Opts.Mode == Kubernetes:
		what += "; the node side of direct server return on eth0"
	case s.DSR():
		what = "the node side of direct server return on eth0"
	}
	s.logf("node agents: `xlb agent` on %d nodes: %s", len(s.Agents), what)
	return nil
}

// spawn runs `nsenter --net=<node> xlb agent ...`: in the node's namespace (it reaches the
// apiserver from there), with the host's /sys/fs/bpf for its pins.
func (a *NodeAgent) spawn() error {
	logf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + a.Node.NS.Name, a.site.Opts.XLB}, a.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: node %s: start xlb agent: %w", a.Node.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	a.mu.Unlock()
	return nil
}

// proc returns the agent's current process and its exit channel.
func (a *NodeAgent) proc() (*exec.Cmd, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd, a.exited
}

// Running reports whether the agent's process runs.
func (a *NodeAgent) Running() bool {
	_, exited := a.proc()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits for the agent to exit: its pinned programs stay, as after a
// crash.
func (a *NodeAgent) Kill() error {
	cmd, exited := a.proc()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("lab: node %s: no agent running", a.Node.Name)
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
		a.site.logf("%s: xlb agent killed (SIGKILL)", a.Node.Name)
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("lab: node %s: xlb agent still running %v after SIGKILL", a.Node.Name, exitTimeout)
	}
}

// Start starts the agent again after Kill, and waits until it is ready: it adopts the pins
// the killed one left.
func (a *NodeAgent) Start() error {
	if a.Running() {
		return fmt.Errorf("lab: node %s: the agent is running", a.Node.Name)
	}
	if err := a.spawn(); err != nil {
		return err
	}
	return a.waitReady()
}

// Reload sends SIGHUP (File mode: the agent re-reads its config file).
func (a *NodeAgent) Reload() error {
	cmd, _ := a.proc()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("lab: node %s: no agent running", a.Node.Name)
	}
	return cmd.Process.Signal(syscall.SIGHUP)
}

// waitReady waits until the agent's /healthz says it is ready.
func (a *NodeAgent) waitReady() error {
	_, exited := a.proc()
	bound := a.site.bound(readyTimeout)
	deadline := time.Now().Add(bound)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("lab: node %s: xlb agent exited before it was ready (log: %s)", a.Node.Name, a.LogPath)
		default:
		}
		code, body, err := a.Node.NS.HTTPGet(agentListen, "/healthz", httpTimeout)
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %q %v", code, strings.TrimSpace(body), err)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("lab: node %s: xlb agent not ready within %v (/healthz: %s; log: %s)", a.Node.Name, bound, last, a.LogPath)
}

// Metrics scrapes the agent's /metrics.
func (a *NodeAgent) Metrics() (Metrics, error) {
	code, body, err := a.Node.NS.HTTPGet(agentListen, "/metrics", httpTimeout)
	if err != nil || code != http.StatusOK {
		return "", fmt.Errorf("lab: node %s: agent /metrics: %d %v", a.Node.Name, code, err)
	}
	return Metrics(body), nil
}

// DSR reads the node side of direct server return from its pins (nothing when the site is in
// the return-path mode).
func (a *NodeAgent) DSR() (dsr.Pinned, error) {
	if a.DSRPinPath == "" {
		return dsr.Pinned{}, fmt.Errorf("lab: node %s: no direct server return (return-path mode)", a.Node.Name)
	}
	return dsr.ReadPinned(a.DSRPinPath)
}

// stop SIGTERMs the agent (it detaches and unpins: --cleanup-on-exit), SIGKILLs it if it is
// still there after a while, then removes what is left: pins and the cgroup.
func (a *NodeAgent) stop() error {
	var errs []error
	if cmd, exited := a.proc(); cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(exitTimeout):
			_ = cmd.Process.Kill()
			<-exited
			errs = append(errs, fmt.Errorf("lab: node %s: xlb agent still running %v after SIGTERM", a.Node.Name, exitTimeout))
		}
	}
	if a.PinPath != "" {
		if err := socklb.RemovePinned(a.PinPath); err != nil {
			errs = append(errs, err)
		}
	}
	if a.DSRPinPath != "" {
		if err := dsr.RemovePinned(a.DSRPinPath); err != nil {
			errs = append(errs, err)
		}
	}
	if a.Cgroup != "" {
		if err := netlab.RemoveCgroup(a.Cgroup); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopAgents stops every node's agent.
func (s *Site) stopAgents() error {
	s.mu.Lock()
	agents := s.Agents
	s.Agents = nil
	s.mu.Unlock()
	var errs []error
	for _, a := range agents {
		errs = append(errs, a.stop())
	}
	return errors.Join(errs...)
}

// Agent returns node's agent, nil when none runs there.
func (s *Site) Agent(node *Node) *NodeAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.Agents {
		if a.Node == node {
			return a
		}
	}
	return nil
}

// Agent returns node's agent, nil when none runs there.
func (k *Kube) Agent(node *Node) *NodeAgent { return k.site.Agent(node) }

// ClusterIPGet fetches http://addr/path as a client in pod p would: a curl process in the
// pod's namespace and in its node's agent cgroup, so its connect() goes through the agent's
// programs. It returns the body.
func (k *Kube) ClusterIPGet(p *Pod, addr netip.AddrPort, path string) (string, error) {
	a := k.Agent(p.Node)
	if a == nil {
		return "", fmt.Errorf("lab: no node agent on %s", p.Node.Name)
	}
	ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", p.NS.Name, "curl", "-sS", "--max-time", "3", "-g",
		"http://"+addr.String()+path)
	cg, err := netlab.InCgroup(cmd, a.Cgroup)
	if err != nil {
		return "", fmt.Errorf("lab: pod %s: %w", p.Name, err)
	}
	defer cg.Close()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("lab: pod %s: curl http://%s%s: %v: %s", p.Name, addr, path, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// tail returns the last n lines of the file at path, indented.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
