// SPDX-License-Identifier: Apache-2.0
package cluster

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
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// The gateway's part of the address plan: its leg on the cluster L2, and the client side on
// another /16 than the nodes (the e2e specs check that a client's source is preserved, which
// they can tell only from outside the nodes' /16).
var (
	GatewayClusterAddr4 = netip.MustParseAddr("198.18.0.2")
	GatewayClientAddr4  = netip.MustParseAddr("198.19.0.1")
	ClientAddr4         = netip.MustParseAddr("198.19.0.2")
	ClientPrefix4       = netip.MustParsePrefix("198.19.0.0/24")
)

const (
	// gatewayListen is xlb's HTTP server (metrics, readyz), on the gateway namespace's loopback.
	gatewayListen = "127.0.0.1:9610"
	// gatewayReadyTimeout bounds xlb's start (BPF load, attach, the first reconcile).
	gatewayReadyTimeout = 60 * time.Second
)

// GatewayOptions say how to run xlb.
type GatewayOptions struct {
	// XLB is the xlb binary; DeployDir the repository's deploy directory (rbac.yaml, the CRDs,
	// examples/addresspools.yaml).
	XLB, DeployDir string
	// DefaultClass makes xlb serve LoadBalancer Services without a class too (as the e2e
	// specs need: they create class-less Services).
	DefaultClass bool
}

// Gateway is one xlb gateway in Kubernetes mode against the cluster: a namespace "<prefix>-gw"
// whose "cl0" is on the cluster L2 and "up0" leads to the client namespace "<prefix>-cli"
// (the client's default route), in the return-path mode: the nodes route the client range
// through the gateway.
type Gateway struct {
	// NS and ClientNS are the gateway's and the client's network namespaces.
	NS, ClientNS *netlab.NS

	c       *Cluster
	xlb     string
	pinPath string
	proc    *proc
	pass    *ebpf.Program
	links   []link.Link
}

// StartGateway applies xlb's RBAC, CRDs and the example AddressPool, wires a gateway and a
// client namespace to the cluster and starts `xlb run` in the gateway; Close stops it.
func (c *Cluster) StartGateway(ctx context.Context, opts GatewayOptions) (_ *Gateway, err error) {
	admin := c.Control.Admin()
	if err := kubetest.ApplyFile(ctx, admin, filepath.Join(opts.DeployDir, "rbac.yaml")); err != nil {
		return nil, err
	}
	if err := kubetest.InstallCRDs(ctx, admin, filepath.Join(opts.DeployDir, "helm", "xlb", "crds")); err != nil {
		return nil, err
	}
	if err := kubetest.ApplyFile(ctx, admin, filepath.Join(opts.DeployDir, "examples", "addresspools.yaml")); err != nil {
		return nil, err
	}
	g := &Gateway{c: c, xlb: opts.XLB, pinPath: filepath.Join("/sys/fs/bpf", c.opts.Prefix+"-gw")}
	c.closers = append(c.closers, g.close)
	if err := g.network(); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(c.dir, "gw.kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, c.Control.Controller()); err != nil {
		return nil, err
	}
	cfg := filepath.Join(c.dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(gatewayConfig(g.pinPath, kubeconfig, opts.DefaultClass)), 0o644); err != nil {
		return nil, err
	}
	g.proc, err = startProc("xlb-gw", filepath.Join(c.dir, "gw.log"), os.Environ(),
		"nsenter", "--net=/run/netns/"+g.NS.Name, "--", opts.XLB, "run", "--config", cfg)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(gatewayReadyTimeout); ; time.Sleep(100 * time.Millisecond) {
		code, body, err := g.NS.HTTPGet(gatewayListen, "/readyz", 2*time.Second)
		if err == nil && code == http.StatusOK {
			return g, nil
		}
		if g.proc.exited() || time.Now().After(deadline) {
			return nil, fmt.Errorf("xlb gateway not ready (/readyz: %d %q %v):\n%s", code, strings.TrimSpace(body), err, g.proc.tail(30))
		}
	}
}

// network makes the gateway and client namespaces, their links and routes, and the XDP_PASS
// programs on the veth peers the gateway's XDP program sends to.
func (g *Gateway) network() error {
	c := g.c
	gw, cli := c.opts.Prefix+"-gw", c.opts.Prefix+"-cli"
	for _, name := range []string{gw, cli} {
		if err := c.addNS(name); err != nil {
			return err
		}
	}
	g.NS, g.ClientNS = &netlab.NS{Name: gw}, &netlab.NS{Name: cli}
	ctl := &netlab.NS{Name: c.CtlNS}
	if err := ctl.IP("link add pgw type veth peer name cl0 netns " + gw); err != nil {
		return err
	}
	if err := g.NS.IP("link add up0 type veth peer name eth0 netns " + cli); err != nil {
		return err
	}
	if err := ipAll(ctl, "link set pgw master lan", "link set pgw up"); err != nil {
		return err
	}
	gwCmds := []string{"link set cl0 up", "link set up0 up",
		"addr add " + GatewayClusterAddr4.String() + "/24 dev cl0",
		"addr add " + GatewayClientAddr4.String() + "/24 dev up0"}
	for _, n := range c.Nodes {
		gwCmds = append(gwCmds, fmt.Sprintf("route add %s via %s dev cl0", n.PodCIDR4, n.IP4))
	}
	if err := ipAll(g.NS, gwCmds...); err != nil {
		return err
	}
	if err := ipAll(g.ClientNS, "link set eth0 up", "addr add "+ClientAddr4.String()+"/24 dev eth0",
		"route add default via "+GatewayClientAddr4.String()); err != nil {
		return err
	}
	// The return path: replies to clients go through the gateway.
	for _, n := range c.Nodes {
		if err := (&netlab.NS{Name: n.NetNS}).IP(fmt.Sprintf("route add %s via %s", ClientPrefix4, GatewayClusterAddr4)); err != nil {
			return err
		}
	}
	if err := ctl.IP(fmt.Sprintf("route add %s via %s", ClientPrefix4, GatewayClusterAddr4)); err != nil {
		return err
	}
	// Frames XDP_REDIRECTed into a veth vanish unless its peer runs XDP; a veth's checksum
	// offload leaves the L4 checksum partial, which XDP_REDIRECT turns into a wrong one:
	// finish checksums where the client's and the nodes' packets leave (netlab.TxChecksumOff).
	var err error
	if g.pass, err = netlab.PassProgram(); err != nil {
		return err
	}
	for _, at := range []struct {
		ns     *netlab.NS
		ifname string
	}{{ctl, "pgw"}, {g.ClientNS, "eth0"}} {
		lk, err := at.ns.AttachPass(g.pass, at.ifname)
		if err != nil {
			return err
		}
		g.links = append(g.links, lk)
	}
	if err := g.ClientNS.TxChecksumOff("eth0"); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if out, err := n.Cmd("ethtool", "-K", "eth0", "tx", "off").CombinedOutput(); err != nil {
			return fmt.Errorf("node %s: ethtool -K eth0 tx off: %v: %s", n.Name, err, out)
		}
	}
	return nil
}

// gatewayConfig is the gateway's xlb configuration: XDP on both legs, the return-path mode,
// the cluster's prefixes (the L2, the Pods, the cluster IPs), Kubernetes mode with the xlb
// ServiceAccount's kubeconfig, kube-proxy's health port, short probe and election timings.
func gatewayConfig(pinPath, kubeconfig string, defaultClass bool) string {
	return fmt.Sprintf(`interfaces:
  - {name: up0, mode: native, role: client}
  - {name: cl0, mode: native, role: cluster}
datapath:
  kind: xdp
  pinPath: %s
  conntrackSize: 65536
  seed: 3600
  forwarding: returnPath
  clusterPrefixes: [198.18.0.0/24, %s, %s]
listen: %s
log: {format: text, level: info}
kubernetes:
  kubeconfig: %s
  gatewayName: gw1
  defaultClass: %t
  nodeHealthPort: 10256
  healthCheckInterval: 1s
  healthCheckTimeout: 500ms
  leaderElection: {leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 500ms}
`, pinPath, PodCIDR4, ServiceCIDR4, gatewayListen, kubeconfig, defaultClass)
}

// Curl runs curl in the client namespace and returns its output.
func (g *Gateway) Curl(args ...string) (string, error) {
	out, err := g.ClientNS.Cmd(append([]string{"curl", "-s", "--max-time", "5"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Log is the end of xlb's output.
func (g *Gateway) Log(lines int) string { return g.proc.tail(lines) }

// close stops xlb, removes its datapath (xlb cleanup) and detaches the XDP_PASS programs; the
// cluster's Close then deletes the namespaces.
func (g *Gateway) close() error {
	var errs []error
	g.proc.stop(5 * time.Second)
	if _, err := os.Stat(g.pinPath); err == nil && g.NS != nil {
		if out, err := exec.Command("nsenter", "--net=/run/netns/"+g.NS.Name, "--", g.xlb, "cleanup", "--pin-path", g.pinPath).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("xlb cleanup: %v: %s", err, strings.TrimSpace(string(out))))
		}
		if err := os.RemoveAll(g.pinPath); err != nil {
			errs = append(errs, err)
		}
	}
	for _, lk := range g.links {
		errs = append(errs, lk.Close())
	}
	if g.pass != nil {
		errs = append(errs, g.pass.Close())
	}
	return errors.Join(errs...)
}
