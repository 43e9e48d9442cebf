// SPDX-License-Identifier: Apache-2.0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb/agent"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/dsr"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// agentOptions are the flags of `xlb agent`.
type agentOptions struct {
	node       string // the node's name
	kubeconfig string // "" = in-cluster
	cgroup     string // "" = the cgroup v2 root
	listen     string // address of /metrics and /healthz; "" = none
	pinPath    string // bpffs directory of the pins; "" = nothing pinned
	cleanup    bool   // detach and unpin at exit
	netnsDir   string // where Pods' network namespaces are pinned ("" = the agent's own only)
	sockets    int    // size of the socket load balancer's LRU maps (socklb.Options.Sockets)

	serviceCIDRs prefixList // the cluster IP ranges, besides the cluster's ServiceCIDR objects
	externalIPs  prefixList // where spec.externalIPs may be to be balanced (none: nowhere)

	config       string   // the gateways' YAML file: file mode ("" = Kubernetes mode)
	dsrIfaces    nameList // the uplinks direct server return attaches to ("" = DSR off)
	dsrPinPath   string   // bpffs directory of the DSR pins; "" = nothing pinned
	dsrFlows     int      // size of the DSR flows LRU (dsr.Options.Flows)
	dsrTCPPickup int      // DSR's TCP pickup budget a second (dsr.Options.TCPPickupBudget)
	dsrUDPNew    int      // DSR's new UDP flow budget a second (dsr.Options.UDPNewBudget)
	dsrSYN       int      // DSR's half-open candidate budget a second (dsr.Options.SYNBudget)
	dsrHairpin   bool     // the reply rewriter on the interfaces toward the node's Pods too
	class        string   // the gateways' loadBalancerClass
	defaultClass bool     // the gateways' defaultClass
	set          []string // the flags given on the command line
	reload       <-chan os.Signal
}

// nameList is a flag.Value of interface names: repeatable, each value comma-separated.
type nameList []string

func (l *nameList) String() string { return strings.Join(*l, ",") }

func (l *nameList) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(*l, n) {
			*l = append(*l, n)
		}
	}
	return nil
}

// prefixList is a flag.Value of IP prefixes: repeatable, each value comma-separated; a bare
// address is its /32 or /128.
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func (l *prefixList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return fmt.Errorf("%q is not an IP prefix (such as 198.18.96.0/24 or 2001:db8:96::/112): %w", s, err)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			return fmt.Errorf("%q: give IPv4 prefixes in IPv4 form", s)
		}
		if p = p.Masked(); !slices.Contains(*l, p) {
			*l = append(*l, p)
		}
	}
	return nil
}

// DefaultAgentListen is where `xlb agent` serves /metrics and /healthz unless told otherwise.
const DefaultAgentListen = "127.0.0.1:9612"

// agentFlags defines the flags of `xlb agent` on fs, into o.
func agentFlags(fs *flag.FlagSet, o *agentOptions) {
	fs.StringVar(&o.node, "node", "", "this node's `name` (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: in-cluster)")
	fs.StringVar(&o.cgroup, "cgroup", "", "cgroup v2 `directory` whose processes are balanced (default: the root)")
	fs.StringVar(&o.listen, "listen", DefaultAgentListen, "`address` of /metrics and /healthz (\"\" for none)")
	fs.StringVar(&o.pinPath, "pin-path", socklb.DefaultPinPath, "bpffs `directory` of the pins (\"\" pins nothing: balancing stops with the agent)")
	fs.BoolVar(&o.cleanup, "cleanup-on-exit", false, "on SIGTERM/SIGINT, detach and unpin everything instead of leaving balancing in place")
	fs.IntVar(&o.sockets, "max-sockets", socklb.DefaultSockets, fmt.Sprintf("`entries` of each of the four LRU maps (live {socket, endpoint} pairs per protocol remembered; ~120 bytes each, preallocated: %d to %d; 0: the default)", socklb.MinSockets, socklb.MaxSockets))
	fs.StringVar(&o.netnsDir, "netns-dir", socklb.DefaultNetnsDir, "`directory` where the container runtime pins Pods' network namespaces: their connected UDP sockets to removed endpoints are closed (\"\" for the agent's own namespace only)")
	fs.Var(&o.serviceCIDRs, "service-cidr", "the cluster's cluster IP `prefix`es (the apiserver's --service-cluster-ip-range), besides its ServiceCIDR objects, which the agent reads: no external or load-balancer address inside one is balanced (repeat, or separate with commas)")
	fs.Var(&o.externalIPs, "external-ip-allow", "`prefix`es a Service's spec.externalIPs must be inside to be balanced (repeat, or separate with commas; none, the default: no external IP is balanced, as any user who may write a Service may set them; 0.0.0.0/0,::/0 balances every one outside the service CIDRs, as kube-proxy does)")
	fs.StringVar(&o.config, "config", "", "the gateways' YAML config `file`: file mode (direct server return only, its pairs from the file's backends on this node; no apiserver, no socket load balancer); SIGHUP reloads it")
	fs.Var(&o.dsrIfaces, "dsr-interface", "the node's uplink `name` where the gateways' packets arrive: direct server return's programs attach to it both ways (repeat, or separate with commas, for several; none: DSR off)")
	fs.StringVar(&o.dsrPinPath, "dsr-pin-path", dsr.DefaultPinPath, "bpffs `directory` of direct server return's pins (\"\" pins nothing: DSR stops with the agent)")
	fs.IntVar(&o.dsrFlows, "dsr-flows", dsr.DefaultFlows, fmt.Sprintf("`entries` of direct server return's flows LRU (flows whose replies are rewritten; ~136 bytes each, preallocated: %d to %d)", dsr.MinFlows, dsr.MaxFlows))
	fs.IntVar(&o.dsrTCPPickup, "dsr-tcp-pickup-budget", dsr.DefaultTCPPickupBudget, fmt.Sprintf("TCP `flows` a second a carried packet other than a SYN may add to direct server return's flows LRU when the node knows nothing of it (a node that lost its state, forged ACKs); over it the packet is delivered, its replies not rewritten (1 to %d)", dsr.MaxBudget))
	fs.IntVar(&o.dsrSYN, "dsr-syn-budget", dsr.DefaultSYNBudget, fmt.Sprintf("carried TCP SYNs a second that may add a half-open candidate (their SYN-ACK rewritten); over it the SYN is delivered, its SYN-ACK not rewritten, and the client retransmits (1 to %d). Every budget is also shared: one frontend takes at most half, one client /24 or /48 an eighth", dsr.MaxBudget))
	fs.IntVar(&o.dsrUDPNew, "dsr-udp-new-budget", dsr.DefaultUDPNewBudget, fmt.Sprintf("new UDP `flows` a second carried datagrams may add to direct server return's flows LRU; over it the datagram is delivered, its replies not rewritten (1 to %d)", dsr.MaxBudget))
	fs.BoolVar(&o.dsrHairpin, "dsr-hairpin", true, "also rewrite replies on the interfaces toward the node's Pods (a client Pod whose VIP connection went to a Pod on its own node)")
	fs.StringVar(&o.class, "class", kube.DefaultClass, "the gateways' loadBalancerClass: direct server return serves their LoadBalancer Services")
	fs.BoolVar(&o.defaultClass, "default-class", false, "direct server return also serves LoadBalancer Services without a class (the gateways' kubernetes.defaultClass)")
}

// kubeOnlyFlags are the flags that mean nothing in file mode.
var kubeOnlyFlags = []string{"kubeconfig", "cgroup", "pin-path", "max-sockets", "netns-dir", "class", "default-class", "service-cidr", "external-ip-allow"}

// runAgent runs the node agent (lb/agent) until ctx ends. In Kubernetes mode: the socket load
// balancer attached to the node's cgroup, fed with every Service's cluster IPs, and with
// --dsr-interface the node side of direct server return; in file mode (--config) direct server
// return only. With a pin path a datapath stays attached when it returns (serving as last
// applied, and the next agent adopts the pins), unless opts.cleanup; without one it is
// detached.
func runAgent(ctx context.Context, opts agentOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if opts.node == "" {
		opts.node = os.Getenv("NODE_NAME")
	}
	if opts.node == "" {
		return errors.New("agent: no node name: pass --node or set NODE_NAME (from the Pod's spec.nodeName)")
	}
	fileMode := opts.config != ""
	if fileMode {
		var wrong []string
		for _, f := range opts.set {
			if slices.Contains(kubeOnlyFlags, f) {
				wrong = append(wrong, "--"+f)
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("agent: %s: not flags of file mode (--config runs no socket load balancer and no Kubernetes client)", strings.Join(wrong, ", "))
		}
		if len(opts.dsrIfaces) == 0 {
			return errors.New("agent: --config (file mode) serves direct server return only: give the node's uplink with --dsr-interface")
		}
	}
	dsrOn := len(opts.dsrIfaces) > 0
	if dsrOn && opts.dsrPinPath != "" && opts.dsrPinPath == opts.pinPath && !fileMode {
		return fmt.Errorf("agent: --pin-path and --dsr-pin-path are both %s: give each datapath its own directory", opts.pinPath)
	}
	if dsrOn && opts.dsrPinPath == "" && dsr.HasPins(dsr.DefaultPinPath) {
		// Those programs would keep accepting carriers from frozen pairs, beside ours.
		return fmt.Errorf("agent: an earlier agent's direct server return is still pinned in %s: remove it with xlb cleanup --pin-path %s, or run with that --dsr-pin-path",
			dsr.DefaultPinPath, dsr.DefaultPinPath)
	}
	if !dsrOn && opts.dsrPinPath != "" && dsr.HasPins(opts.dsrPinPath) {
		log.Warn("direct server return is off (no --dsr-interface), but an earlier agent's is still pinned: it keeps rewriting the replies of established flows, and its pairs are no longer updated; remove it with xlb cleanup",
			"pin_path", opts.dsrPinPath)
	}
	var client kubernetes.Interface
	if !fileMode {
		cfg, err := kube.RestConfig(opts.kubeconfig)
		if err != nil {
			return err
		}
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
		if opts.pinPath == "" && socklb.HasPins(socklb.DefaultPinPath) {
			// Those programs would keep balancing from frozen maps, ahead of ours.
			return fmt.Errorf("agent: an earlier agent's programs are still pinned in %s: remove them with xlb cleanup --pin-path %s, or run with that pin path",
				socklb.DefaultPinPath, socklb.DefaultPinPath)
		}
	}
	var ln net.Listener
	if opts.listen != "" {
		var err error
		if ln, err = net.Listen("tcp", opts.listen); err != nil {
			return fmt.Errorf("agent: listen on %s: %w", opts.listen, err)
		}
	}
	closeAll := func(cs ...io.Closer) {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}
	var sock *socklb.Datapath
	if !fileMode {
		var err error
		if sock, err = socklb.Load(socklb.Options{Cgroup: opts.cgroup, PinPath: opts.pinPath, Sockets: opts.sockets}); err != nil {
			closeAll(ln)
			return err
		}
		if r := sock.Replaced(); r != nil {
			log.Warn("replaced the pinned socket load balancer instead of adopting it", "pin_path", opts.pinPath, "reason", r)
		}
		if n := sock.Frontends(); n > 0 {
			log.Info("adopted the pinned socket load balancer", "pin_path", opts.pinPath, "frontends", n)
		}
		if err := sock.ReapUDPErr(); err != nil {
			log.Warn("connected UDP sockets will keep a removed endpoint until their application closes them", "err", err)
		}
	}
	ao := agent.Options{
		Node:         opts.node,
		PinPath:      opts.pinPath,
		Cleanup:      opts.cleanup,
		Listener:     ln,
		NetnsDir:     opts.netnsDir,
		Class:        opts.class,
		DefaultClass: opts.defaultClass,
		Policy:       kube.AddressPolicy{ServiceCIDRs: opts.serviceCIDRs, ExternalIPs: opts.externalIPs},
		ConfigPath:   opts.config,
		Reload:       opts.reload,
		Log:          log,
	}
	if sock != nil {
		ao.Client, ao.Datapath = client, sock
	}
	if dsrOn {
		d, err := dsr.Load(dsr.Options{PinPath: opts.dsrPinPath, Flows: opts.dsrFlows,
			TCPPickupBudget: opts.dsrTCPPickup, UDPNewBudget: opts.dsrUDPNew, SYNBudget: opts.dsrSYN})
		if err != nil {
			if sock != nil {
				closeAll(ln, sock)
			} else {
				closeAll(ln)
			}
			return err
		}
		if r := d.Replaced(); r != nil {
			log.Warn("direct server return: pinned state not adopted as is", "pin_path", opts.dsrPinPath, "reason", r)
		}
		ao.DSR = &agent.DSROptions{Datapath: d, Uplinks: opts.dsrIfaces, PinPath: opts.dsrPinPath, NoHairpin: !opts.dsrHairpin}
	}
	// Run owns the datapaths from here: it closes them, or removes them, when it returns.
	return agent.Run(ctx, ao)
}
