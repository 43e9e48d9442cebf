// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// Addresses of the cluster (see the package comment).
var (
	ControlAddr4 = netip.MustParseAddr("198.18.0.1")
	ServiceCIDR4 = netip.MustParsePrefix("198.18.96.0/24")
	PodCIDR4     = netip.MustParsePrefix("198.18.128.0/17")
)

const (
	// ContainerdDir is where make cluster-containerd unpacks forky's containerd 2.1 (Debian bookworm's
	// 1.6 is older than kubelet 1.37 accepts).
	ContainerdDir = "/var/cache/xlb/containerd-2.1.9"
	// cniBinDir is where Debian's containernetworking-plugins are.
	cniBinDir = "/usr/lib/cni"
	// kernelSysctls are the global sysctls the kubelet sets (protectKernelDefaults false);
	// Close puts back what they were.
)

var kernelSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// Options say what cluster to start.
type Options struct {
	// Nodes is the number of kubelets (default 2).
	Nodes int
	// Prefix names the namespaces and cgroups (default netlab.Prefix()).
	Prefix string
	// Dir holds every file (default a new temporary directory); removed by Close unless KeepDir.
	Dir     string
	KeepDir bool
	// Logf receives progress (default: none).
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	// Control is etcd and the apiserver; Nodes the kubelets.
	Control *kubetest.ControlPlane
	Nodes   []*Node
	// Kubeconfig is an admin kubeconfig usable from the control namespace and the nodes.
	Kubeconfig string
	// CtlNS is the control network namespace (bridge "lan", apiserver, controllers).
	CtlNS string
	// Bins is where the Kubernetes binaries are.
	Bins string

	opts     Options
	dir      string
	procs    []*proc
	netns    []string
	sysctls  map[string]string
	closers  []func() error
	StartDur time.Duration
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// Start brings a cluster up and returns once every Node is Ready. On error everything started
// is torn down.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Nodes > 50 {
		return nil, fmt.Errorf("%d nodes: at most 50", opts.Nodes)
	}
	if opts.Prefix == "" {
		opts.Prefix = netlab.Prefix()
	}
	c := &Cluster{opts: opts, Bins: kubetest.BinDir(), sysctls: map[string]string{}}
	if c.dir = opts.Dir; c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "xlbc-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if err := c.checkTools(); err != nil {
		return nil, err
	}
	for _, k := range kernelSysctls {
		if v, err := os.ReadFile("/proc/sys/" + k); err == nil {
			c.sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	if err := c.network(); err != nil {
		return nil, err
	}
	c.logf("cluster: starting etcd and kube-apiserver")
	c.Control, err = kubetest.Start(ctx, kubetest.Options{
		Dir:     filepath.Join(c.dir, "control"),
		KeepDir: true,
		NetNS:   c.CtlNS,
		Address: ControlAddr4,
		APIServerFlags: []string{
			"--disable-admission-plugins=",
			"--endpoint-reconciler-type=lease",
			"--allow-privileged=true",
			"--service-cluster-ip-range=" + ServiceCIDR4.String(),
			"--kubelet-preferred-address-types=InternalIP",
		},
	})
	if err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := kubetest.WriteKubeconfig(c.Kubeconfig, c.Control.Admin()); err != nil {
		return nil, err
	}
	if err := c.startControllers(); err != nil {
		return nil, err
	}
	images, err := BuildImages(c.dir, filepath.Join(c.Bins, "agnhost"))
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := c.startNode(n, images); err != nil {
			return nil, err
		}
	}
	if err := c.waitNodesReady(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	c.StartDur = time.Since(began)
	c.logf("cluster: %d nodes Ready in %s", len(c.Nodes), c.StartDur.Round(time.Second))
	return c, nil
}

// checkTools fails with what to install when a binary the cluster runs is missing.
func (c *Cluster) checkTools() error {
	need := []string{
		filepath.Join(c.Bins, "kubelet"), filepath.Join(c.Bins, "kube-proxy"),
		filepath.Join(c.Bins, "kube-controller-manager"), filepath.Join(c.Bins, "kube-scheduler"),
		filepath.Join(c.Bins, "agnhost"), filepath.Join(ContainerdDir, "containerd"),
		filepath.Join(ContainerdDir, "ctr"), "/usr/sbin/runc", filepath.Join(cniBinDir, "ptp"),
		filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback"),
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("cluster needs %s (make cluster-bins builds the Kubernetes binaries and unpacks containerd 2.1; make deps installs runc and the CNI plugins): %w", p, err)
		}
	}
	return nil
}

// network makes the control namespace with the cluster bridge and one namespace per node.
func (c *Cluster) network() error {
	c.CtlNS = c.opts.Prefix + "-ctl"
	if err := c.addNS(c.CtlNS); err != nil {
		return err
	}
	ctl := &netlab.NS{Name: c.CtlNS}
	if err := ipAll(ctl, "link add lan type bridge", "link set lan up",
		"addr add "+ControlAddr4.String()+"/24 dev lan"); err != nil {
		return err
	}
	for i := 1; i <= c.opts.Nodes; i++ {
		n := &Node{
			Name:       fmt.Sprintf("n%d", i),
			NetNS:      fmt.Sprintf("%s-n%d", c.opts.Prefix, i),
			IP4:        netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)}),
			PodCIDR4:   netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(128 + i), 0}), 24),
			dir:        filepath.Join(c.dir, fmt.Sprintf("n%d", i)),
			cgroupRoot: fmt.Sprintf("/%s-n%d", c.opts.Prefix, i),
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		if err := c.addNS(n.NetNS); err != nil {
			return err
		}
		ns := &netlab.NS{Name: n.NetNS}
		port := fmt.Sprintf("p%d", i)
		if err := ctl.IP(fmt.Sprintf("link add %s type veth peer name eth0 netns %s", port, n.NetNS)); err != nil {
			return err
		}
		if err := ipAll(ctl, "link set "+port+" master lan", "link set "+port+" up"); err != nil {
			return err
		}
		if err := ipAll(ns, "link set eth0 up", "addr add "+n.IP4.String()+"/24 dev eth0",
			"route add default via "+ControlAddr4.String()); err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := (&netlab.NS{Name: c.CtlNS}).IP(fmt.Sprintf("route add %s via %s", n.PodCIDR4, n.IP4)); err != nil {
			return err
		}
		for _, m := range c.Nodes {
			if m != n {
				if err := (&netlab.NS{Name: n.NetNS}).IP(fmt.Sprintf("route add %s via %s", m.PodCIDR4, m.IP4)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// addNS creates a network namespace with forwarding on, deleted by Close.
func (c *Cluster) addNS(name string) error {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	c.netns = append(c.netns, name)
	ns := &netlab.NS{Name: name}
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"}, {"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"},
		{"net.ipv6.conf.all.accept_dad", "0"}, {"net.ipv6.conf.default.accept_dad", "0"},
	} {
		if err := ns.SetSysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return ns.IP("link set lo up")
}

func ipAll(ns *netlab.NS, cmds ...string) error {
	for _, c := range cmds {
		if err := ns.IP(c); err != nil {
			return err
		}
	}
	return nil
}

// start runs a control-plane daemon in the control namespace.
func (c *Cluster) start(name string, argv ...string) (*proc, error) {
	a := append([]string{"nsenter", "--net=/run/netns/" + c.CtlNS, "--"}, argv...)
	p, err := startProc(name, filepath.Join(c.dir, name+".log"), os.Environ(), a...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// startControllers runs kube-controller-manager and kube-scheduler.
func (c *Cluster) startControllers() error {
	cd := c.Control.Dir()
	if _, err := c.start("kube-controller-manager", filepath.Join(c.Bins, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--root-ca-file="+filepath.Join(cd, "ca.crt"),
		"--service-account-private-key-file="+filepath.Join(cd, "sa.key"),
		"--use-service-account-credentials=false",
		"--service-cluster-ip-range="+ServiceCIDR4.String(),
		// Every controller 1.37 has (it has no cloud ones left: naming one fails the start).
		"--controllers=*",
		"--node-monitor-grace-period=40s",
		"--v=1",
	); err != nil {
		return err
	}
	_, err := c.start("kube-scheduler", filepath.Join(c.Bins, "kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--v=1",
	)
	return err
}

// startNode starts a node's containerd, imports the images, then its kubelet and kube-proxy.
func (c *Cluster) startNode(n *Node, images []string) error {
	c.logf("cluster: starting node %s (%s)", n.Name, n.IP4)
	if err := n.makeCgroups(); err != nil {
		return err
	}
	if err := n.startHolder(); err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml":     containerdConfig(n),
		"cni/10-xlb.conflist": cniConfig(n),
		"kubelet.yaml":        kubeletConfig(n),
		"kube-proxy.yaml":     kubeProxyConfig(n, c.Kubeconfig),
		"resolv.conf":         "nameserver " + ControlAddr4.String() + "\n",
	}
	for name, body := range files {
		p := filepath.Join(n.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	env := append(os.Environ(), "PATH="+ContainerdDir+":/usr/sbin:/usr/bin:/sbin:/bin")
	daemon := func(name string, argv ...string) error {
		p, err := startProc(n.Name+"-"+name, filepath.Join(n.dir, name+".log"), env, append(n.nsArgs(), argv...)...)
		if err != nil {
			return err
		}
		n.daemons = append(n.daemons, p)
		return nil
	}
	if err := daemon("containerd", filepath.Join(ContainerdDir, "containerd"), "--config", filepath.Join(n.dir, "containerd.toml")); err != nil {
		return err
	}
	ctr := func(args ...string) ([]byte, error) {
		cmd := n.Cmd(append([]string{filepath.Join(ContainerdDir, "ctr"), "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"}, args...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	var out []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, err = ctr("version"); err == nil {
			break
		}
		if time.Now().After(deadline) || n.daemons[0].exited() {
			return fmt.Errorf("node %s: containerd not up: %v: %s\n%s", n.Name, err, out, n.daemons[0].tail(20))
		}
	}
	for _, img := range images {
		if out, err := ctr("images", "import", img); err != nil {
			return fmt.Errorf("node %s: import %s: %v: %s", n.Name, img, err, out)
		}
	}
	if err := daemon("kubelet", filepath.Join(c.Bins, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+c.Kubeconfig,
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP4.String(),
		"--v=1",
	); err != nil {
		return err
	}
	return daemon("kube-proxy", filepath.Join(c.Bins, "kube-proxy"),
		"--config="+filepath.Join(n.dir, "kube-proxy.yaml"), "--v=1")
}

// Client is an admin clientset.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(c.Admin())
}

// Admin is the admin client configuration (dialing from the control namespace).
func (c *Cluster) Admin() *rest.Config { return c.Control.Admin() }

// waitNodesReady waits until every Node is Ready and schedulable (the node lifecycle controller
// has lifted its not-ready taint) and the "default" namespace has its ServiceAccount (the
// controller manager's work: Pods are refused without it).
func (c *Cluster) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready, schedulable := 0, 0
		if err == nil {
			for _, nd := range nodes.Items {
				isReady := false
				for _, cond := range nd.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						isReady = true
					}
				}
				if !isReady {
					continue
				}
				ready++
				tainted := false
				for _, tn := range nd.Spec.Taints {
					if tn.Key == corev1.TaintNodeNotReady || tn.Key == corev1.TaintNodeUnreachable {
						tainted = true
					}
				}
				if !tainted {
					schedulable++
				}
			}
			if schedulable == len(c.Nodes) {
				if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
					return nil
				}
			}
		}
		if err := c.CheckAlive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			var tails []string
			for _, n := range c.Nodes {
				for _, d := range n.daemons {
					tails = append(tails, d.name+":\n"+d.tail(15))
				}
			}
			return fmt.Errorf("%d of %d nodes Ready, %d schedulable: %w\n%s", ready, len(c.Nodes), schedulable, ctx.Err(), strings.Join(tails, "\n"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// CheckAlive fails with the end of its log when a daemon of the cluster has exited (a
// controller manager refusing its flags leaves Nodes Ready but tainted, Pods never scheduled).
func (c *Cluster) CheckAlive() error {
	all := append([]*proc(nil), c.procs...)
	for _, n := range c.Nodes {
		all = append(all, n.daemons...)
	}
	for _, d := range all {
		if d.exited() {
			return fmt.Errorf("%s exited:\n%s", d.name, d.tail(30))
		}
	}
	return nil
}

// Dir is the directory holding the cluster's files and logs.
func (c *Cluster) Dir() string { return c.dir }

// Close tears everything down: nodes (containers, shims, daemons, cgroups), controllers,
// control plane, namespaces, the kernel sysctls the kubelet changed, and the files.
func (c *Cluster) Close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	for _, n := range c.Nodes {
		errs = append(errs, n.stop())
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(5 * time.Second)
	}
	if c.Control != nil {
		errs = append(errs, c.Control.Stop())
	}
	for i := len(c.netns) - 1; i >= 0; i-- {
		if out, err := exec.Command("ip", "netns", "del", c.netns[i]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", c.netns[i], err, out))
		}
	}
	for k, v := range c.sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	if !c.opts.KeepDir && c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// Node is the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}
