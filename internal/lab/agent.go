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
	"strings"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// Kubernetes mode runs the node agent (`xlb agent`, docs/agent.md) on every node: the pods'
// connections to a Service's cluster IP go straight to one of its pods. A lab pod is a network
// namespace, not a process tree, so each node's agent balances a cgroup of its own (standing in
// for the node's root cgroup), and a client "in a pod" is a process started in the pod's
// namespace and its node's cgroup (ClusterIPGet).

// agentListen is where each node's agent serves /metrics and /healthz, in the node's namespace.
const agentListen = "127.0.0.1:9612"

// agentUser is the agent's ServiceAccount (deploy/agent.yaml), as the apiserver names it.
const agentUser = "system:serviceaccount:xlb-system:xlb-agent"

// NodeAgent is `xlb agent` on one node.
type NodeAgent struct {
	Node *Node
	// Cgroup is the cgroup v2 directory it balances; PinPath its pins; LogPath its log.
	Cgroup, PinPath, LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
}

// agentName is the site-unique name of node n's agent, in its cgroup and pin directory.
func (s *Site) agentName(n *Node) string { return s.Prefix + "-agent-" + n.Name }

// startAgents applies the agent's RBAC and starts an agent on every node, waiting until each
// has applied the cluster IPs.
func (k *Kube) startAgents() error {
	s := k.site
	ctx, cancel := context.WithTimeout(k.ctx, kubeSetupTimeout)
	defer cancel()
	if err := kubetest.ApplyFile(ctx, k.CP.Admin(), filepath.Join(k.DeployDir, "agent.yaml")); err != nil {
		return err
	}
	kubeconfig := filepath.Join(s.Dir, "agent.kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, k.CP.As(agentUser, "system:serviceaccounts", "system:serviceaccounts:xlb-system")); err != nil {
		return err
	}
	root, err := socklb.RootCgroup()
	if err != nil {
		return fmt.Errorf("lab: node agents: %w", err)
	}
	// Registered first: agents started before a failure are stopped too.
	s.onClose(k.stopAgents)
	for _, n := range s.Nodes {
		a := &NodeAgent{Node: n, Cgroup: filepath.Join(root, s.agentName(n)),
			PinPath: filepath.Join(bpffsRoot, s.agentName(n)), LogPath: filepath.Join(s.Dir, "agent-"+n.Name+".log"),
			exited: make(chan struct{})}
		if err := os.Mkdir(a.Cgroup, 0o755); err != nil {
			return fmt.Errorf("lab: node %s: agent cgroup: %w", n.Name, err)
		}
		k.mu.Lock()
		k.agents = append(k.agents, a)
		k.mu.Unlock()
		if err := a.start(s.Opts.XLB, kubeconfig); err != nil {
			return err
		}
	}
	for _, a := range k.agents {
		if err := a.waitReady(); err != nil {
			return err
		}
	}
	s.logf("node agents: `xlb agent` on %d nodes, cluster IPs %s and %s balanced at the pods' sockets",
		len(k.agents), serviceClusterIPRange4, serviceIPv6Range)
	return nil
}

// start runs `nsenter --net=<node> xlb agent ...`: in the node's namespace (it reaches the
// apiserver from there), with the host's /sys/fs/bpf for its pins. It is detached and unpinned
// when it stops (the lab leaves nothing behind).
func (a *NodeAgent) start(bin, kubeconfig string) error {
	logf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	a.cmd = exec.Command("nsenter", "--net=/run/netns/"+a.Node.NS.Name, bin, "agent", "--node", a.Node.Name,
		"--kubeconfig", kubeconfig, "--cgroup", a.Cgroup, "--pin-path", a.PinPath, "--listen", agentListen,
		"--cleanup-on-exit")
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("lab: node %s: start xlb agent: %w", a.Node.Name, err)
	}
	go func() {
		_ = a.cmd.Wait()
		logf.Close()
		close(a.exited)
	}()
	return nil
}

// waitReady waits until the agent's /healthz says it has applied the cluster IPs.
func (a *NodeAgent) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
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
	return fmt.Errorf("lab: node %s: xlb agent not ready within %v (/healthz: %s; log: %s)", a.Node.Name, readyTimeout, last, a.LogPath)
}

// Metrics scrapes the agent's /metrics.
func (a *NodeAgent) Metrics() (Metrics, error) {
	code, body, err := a.Node.NS.HTTPGet(agentListen, "/metrics", httpTimeout)
	if err != nil || code != http.StatusOK {
		return "", fmt.Errorf("lab: node %s: agent /metrics: %d %v", a.Node.Name, code, err)
	}
	return Metrics(body), nil
}

// stop SIGTERMs the agent (it detaches and unpins: --cleanup-on-exit), SIGKILLs it if it is
// still there after a while, then removes what is left: pins and the cgroup.
func (a *NodeAgent) stop() error {
	var errs []error
	if a.cmd != nil && a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(exitTimeout):
			_ = a.cmd.Process.Kill()
			<-a.exited
			errs = append(errs, fmt.Errorf("lab: node %s: xlb agent still running %v after SIGTERM", a.Node.Name, exitTimeout))
		}
	}
	if err := socklb.RemovePinned(a.PinPath); err != nil {
		errs = append(errs, err)
	}
	if err := netlab.RemoveCgroup(a.Cgroup); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopAgents stops every node's agent.
func (k *Kube) stopAgents() error {
	k.mu.Lock()
	agents := k.agents
	k.agents = nil
	k.mu.Unlock()
	var errs []error
	for _, a := range agents {
		errs = append(errs, a.stop())
	}
	return errors.Join(errs...)
}

// Agent returns node's agent, nil when none runs there.
func (k *Kube) Agent(node *Node) *NodeAgent {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range k.agents {
		if a.Node == node {
			return a
		}
	}
	return nil
}

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
