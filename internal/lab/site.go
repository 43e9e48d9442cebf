// SPDX-License-Identifier: Apache-2.0

// Package lab builds a whole xlb edge site in network namespaces: clients behind an upstream
// router that spreads the VIP prefix over the gateways with ECMP; gateways that each run a real
// `xlb run` process with XDP on their upstream-facing and cluster-facing veths; a cluster L2
// segment (a bridge) joining the gateways and the nodes; nodes that route their Pod CIDR to pod
// namespaces and use the gateways as their default route; and pods running real HTTP, TCP echo
// and UDP servers (goroutines of this process, sockets inside the pods' namespaces).
//
// Tests use it through NewT; `make lab` through cmd/xlb-lab. See docs/lab.md for the topology
// and the address plan (plan.go).
//
// Everything is named with a per-site prefix ("xl" and 6 hex digits) so sites can run in
// parallel, and is removed by Close, by a signal handler (CloseAllOnSignal), or afterwards by
// Down (`make lab-down`), which recognises leftovers by that prefix and by the site's state
// directory under /run/xlb-lab.
package lab

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Options configures a site. Zero values take the defaults.
type Options struct {
	Clients  int // client namespaces behind the router (default 1, at most 9)
	Gateways int // gateway namespaces, each running xlb (default 2, at most 9)
	Nodes    int // node namespaces on the cluster L2 (default 2, at most 30)
	Pods     int // pod namespaces, spread round robin over the nodes (default 5, at most 200)

	// XLB is the xlb binary the gateways run (see Build). Required unless NoXLB.
	XLB string
	// NoXLB builds the site without starting xlb on the gateways (then Gateway.Start does).
	NoXLB bool
	// Seed is the datapath's flow hash seed, the same on every gateway (default 0x5eed).
	Seed uint32
	// Datapaths is each gateway's datapath.kind, by gateway index ("xdp" or "afxdp"; missing
	// or empty: xdp).
	Datapaths []string
	// NewFlowRate, when not 0, is the gateways' datapath.newFlowRate: the new-flow budget (the
	// flood guard's conntrack and handshake inserts per second; -1: no limit). 0 keeps xlb's
	// default.
	NewFlowRate int
	// DSRFlows, when not 0, is the size of each node agent's direct server return flows table
	// (`xlb agent --dsr-flows`); 0: 16,384, the smallest (the default, 1,048,576, preallocates
	// 136 MiB a node).
	DSRFlows int
	// HealthInterval is the gateways' HTTP health-check interval (default 1s; timeout half of
	// it, rise 1, fall 2).
	HealthInterval time.Duration
	// StateDir holds each site's directory (configs, logs, pid files) (default DefaultStateDir).
	StateDir string
	// Routing is how the router learns the VIPs: Static (the zero value: the lab sets the
	// router's multipath routes; RouteVia and friends edit them), BIRD (BIRD 2 on the router
	// peers over BGP with every gateway's xlb; each gateway's config gets a bgp section) or FRR
	// (the same with FRR's zebra and bgpd).
	Routing Routing
	// Mode is where the gateways get their services: File (the zero value: one service "demo"
	// in each gateway's config) or Kubernetes (a control plane in the control namespace, the
	// Services of deploy/examples/services.yaml, xlb as their controller; see kube.go).
	Mode Mode
	// SharedServices (File mode) adds two services over the same pods' HTTP port as the demo
	// service: ServiceSame on the same service port (VIPSame4/6) and ServiceOther on another
	// (VIPOther4/6, PortOther).
	SharedServices bool
	// ProxyIPMode (Kubernetes mode) makes the gateways write ipMode: Proxy in the Services'
	// status: pods reach a load balancer address through the gateways, not the node agent.
	ProxyIPMode bool
	// ReturnPath builds the return-path topology (docs/lab.md): the nodes' default route is
	// ECMP over the gateways, which translate the pods' replies, and the gateways' config says
	// datapath.forwarding: returnPath. The zero value is direct server return: the nodes'
	// default route is the router (on the cluster L2), every node runs `xlb agent` with the
	// node side of DSR on its eth0, and the gateways' config says forwarding: dsr; replies
	// never cross a gateway.
	ReturnPath bool
	// DeployDir (Kubernetes mode) is the repository's deploy directory, with rbac.yaml and
	// examples/services.yaml (default: FindDeployDir).
	DeployDir string
	// TimeScale multiplies the lab's start-up bounds (the control plane's start, a Service's
	// addresses, xlb's and the node agents' readiness, BGP convergence, the routers' start) for
	// a slow machine, such as a VM under software emulation (deploy/vagrant: 6 under QEMU's TCG).
	// 0 or 1: the bounds as they are; at most 20.
	TimeScale int
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// MaxTimeScale bounds Options.TimeScale.
const MaxTimeScale = 20

// bound returns the start-up bound d scaled by Options.TimeScale.
func (s *Site) bound(d time.Duration) time.Duration {
	if s.Opts.TimeScale > 1 {
		return d * time.Duration(s.Opts.TimeScale)
	}
	return d
}

// DefaultStateDir is where sites keep their state: DefaultStateDir/<prefix>/.
const DefaultStateDir = "/run/xlb-lab"

// NamePrefixTag starts every site's prefix: "xl" and 6 hex digits.
const NamePrefixTag = "xl"

// Site is a running lab site.
type Site struct {
	Prefix   string
	Dir      string // state directory: configs, xlb logs, pid files
	Opts     Options
	Router   *Router
	Clients  []*Client
	Gateways []*Gateway
	L2       *netlab.NS // the cluster L2 segment: bridge br0
	Nodes    []*Node
	Pods     []*Pod
	// Kube is the control side of a Kubernetes-mode site (nil in File mode).
	Kube *Kube
	// Agents are the nodes' `xlb agent`s (agent.go): in Kubernetes mode, and in the DSR mode.
	Agents []*NodeAgent

	pass *ebpf.Program

	mu       sync.Mutex
	closers  []func() error
	closed   bool
	backends []*Pod    // the service's backends in the gateways' current config
	upstream []int     // gateway indexes in the router's multipath route
	podSeq   int       // index of the last pod made
	start    time.Time // for log lines
}

// Router is the upstream router namespace.
type Router struct {
	NS *netlab.NS

	bird *routerProc   // Routing BIRD: the router's bird
	frr  []*routerProc // Routing FRR: the router's zebra, bfdd and bgpd, in start order
}

// Client is a client namespace: link "eth0" to the router.
type Client struct {
	Index        int
	Name         string // "c1"
	NS           *netlab.NS
	Addr4, Addr6 netip.Addr
}

// Node is a node namespace: "eth0" on the cluster L2, "p<j>" to each of its pods.
type Node struct {
	Index              int
	Name               string // "n1"
	NS                 *netlab.NS
	Addr4, Addr6       netip.Addr // on the cluster L2
	PodCIDR4, PodCIDR6 netip.Prefix
}

// New builds a site and, unless opts.NoXLB, starts xlb on every gateway and waits until each
// is ready. On error everything made so far is removed.
func New(opts Options) (*Site, error) {
	if opts.Clients == 0 {
		opts.Clients = 1
	}
	if opts.Gateways == 0 {
		opts.Gateways = 2
	}
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Pods == 0 {
		opts.Pods = 5
	}
	if opts.Seed == 0 {
		opts.Seed = 0x5eed
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = time.Second
	}
	if opts.StateDir == "" {
		opts.StateDir = DefaultStateDir
	}
	switch {
	case opts.Clients < 1 || opts.Clients > maxClients:
		return nil, fmt.Errorf("lab: %d clients, want 1 to %d", opts.Clients, maxClients)
	case opts.Gateways < 1 || opts.Gateways > maxGateways:
		return nil, fmt.Errorf("lab: %d gateways, want 1 to %d", opts.Gateways, maxGateways)
	case opts.Nodes < 1 || opts.Nodes > maxNodes:
		return nil, fmt.Errorf("lab: %d nodes, want 1 to %d", opts.Nodes, maxNodes)
	case opts.Pods < 1 || opts.Pods > maxPods:
		return nil, fmt.Errorf("lab: %d pods, want 1 to %d", opts.Pods, maxPods)
	case opts.TimeScale < 0 || opts.TimeScale > MaxTimeScale:
		return nil, fmt.Errorf("lab: time scale %d, want 0 to %d", opts.TimeScale, MaxTimeScale)
	case !opts.NoXLB && opts.XLB == "":
		return nil, errors.New("lab: Options.XLB (the xlb binary) is required")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("lab: needs root (network namespaces, XDP, bpffs)")
	}
	s := &Site{Prefix: netlab.TaggedPrefix(NamePrefixTag), Opts: opts, start: time.Now()}
	s.Dir = filepath.Join(opts.StateDir, s.Prefix)
	register(s)
	if err := s.build(); err != nil {
		// The gateways' logs go with the site's directory: show their ends first.
		for _, g := range s.Gateways {
			if _, serr := os.Stat(g.LogPath); serr == nil {
				s.logf("%s: end of xlb's log:\n%s", g.Name, g.logTail(30))
			}
		}
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *Site) logf(format string, args ...any) {
	if s.Opts.Log != nil {
		fmt.Fprintf(s.Opts.Log, "[%6.2fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// onClose registers fn to run at Close (last registered, first run).
func (s *Site) onClose(fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, fn)
}

// Close stops every xlb (SIGTERM, then `xlb cleanup` of its pins), stops the servers and removes
// the namespaces and the state directory. It may be called more than once.
func (s *Site) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	unregister(s)
	s.logf("site %s removed", s.Prefix)
	return errors.Join(errs...)
}

func (s *Site) nsName(role string) string { return s.Prefix + "-" + role }

func (s *Site) build() error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	s.onClose(func() error { return os.RemoveAll(s.Dir) })
	if err := writeOwner(s.Dir); err != nil {
		return err
	}
	o := s.Opts
	s.logf("site %s: %d client(s), router, %d gateway(s), %d node(s), %d pod(s); state in %s",
		s.Prefix, o.Clients, o.Gateways, o.Nodes, o.Pods, s.Dir)

	// Namespaces.
	rns, err := s.addNS(s.nsName("r"), true)
	if err != nil {
		return err
	}
	s.Router = &Router{NS: rns}
	// Before every gateway's closer: they run in reverse, so BIRD or FRR outlives the gateways'
	// xlb (a stopping xlb withdraws its routes first) and dies before the namespace goes.
	s.onClose(s.stopBIRD)
	s.onClose(s.stopFRR)
	if s.L2, err = s.addNS(s.nsName("l2"), false); err != nil {
		return err
	}
	if err := ipc(s.L2, "link add br0 type bridge mcast_snooping 0", "link set br0 up"); err != nil {
		return err
	}
	waitControl := func() error { return nil }
	if o.Mode == Kubernetes {
		// The control plane starts (≈4 s) while the rest is built.
		if waitControl, err = s.addControl(); err != nil {
			return err
		}
	} else if o.Mode != File {
		return fmt.Errorf("lab: unknown mode %v", o.Mode)
	}
	for i := 1; i <= o.Clients; i++ {
		if err := s.addClient(i); err != nil {
			return err
		}
	}
	for g := 1; g <= o.Gateways; g++ {
		if err := s.addGateway(g); err != nil {
			return err
		}
	}
	if s.DSR() {
		if err := s.addRouterLeg(); err != nil {
			return err
		}
	}
	for n := 1; n <= o.Nodes; n++ {
		if err := s.addNode(n); err != nil {
			return err
		}
	}
	// Nodes route each other's Pod CIDRs directly over the cluster L2, as a CNI's host routes
	// would: pod-to-pod traffic (a pod reaching a cluster IP's endpoint on another node) never
	// crosses the gateways, whose reverse NAT would take a pod's reply for a Service's.
	for _, n := range s.Nodes {
		for _, m := range s.Nodes {
			if m == n {
				continue
			}
			if err := ipc(n.NS,
				fmt.Sprintf("-4 route add %s via %s dev eth0", m.PodCIDR4, m.Addr4),
				fmt.Sprintf("-6 route add %s via %s dev eth0", m.PodCIDR6, m.Addr6)); err != nil {
				return err
			}
		}
	}
	// Gateways route each node's Pod CIDR via that node.
	for _, g := range s.Gateways {
		for _, n := range s.Nodes {
			if err := ipc(g.NS,
				fmt.Sprintf("-4 route add %s via %s dev cl0", n.PodCIDR4, n.Addr4),
				fmt.Sprintf("-6 route add %s via %s dev cl0", n.PodCIDR6, n.Addr6)); err != nil {
				return err
			}
		}
	}
	switch o.Routing {
	case Static:
		all := make([]int, len(s.Gateways))
		for i := range all {
			all[i] = i + 1
		}
		if err := s.route(all); err != nil {
			return err
		}
	case BIRD:
		if err := s.startBIRD(); err != nil {
			return err
		}
	case FRR:
		if err := s.startFRR(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("lab: unknown routing %v", o.Routing)
	}
	for j := 1; j <= o.Pods; j++ {
		if _, err := s.AddPod(s.Nodes[(j-1)%len(s.Nodes)]); err != nil {
			return err
		}
	}
	s.backends = slices.Clone(s.Pods)
	s.logf("topology ready")
	if err := waitControl(); err != nil {
		return err
	}
	if s.Kube != nil {
		if err := s.Kube.setup(); err != nil {
			return err
		}
	}
	for _, g := range s.Gateways {
		if err := g.WriteConfig(s.ConfigYAML(g, s.backends)); err != nil {
			return err
		}
	}
	if o.NoXLB {
		return nil
	}
	// The agents first: a gateway carries to a node only what its agent accepts (File mode),
	// or learns from the agent's Node that it can (Kubernetes mode).
	if s.needAgents() {
		if err := s.startAgents(); err != nil {
			return err
		}
	}
	if err := s.StartAll(); err != nil {
		return err
	}
	if o.Mode == Kubernetes {
		return s.waitKubeRoutes()
	}
	if o.Routing.BGP() {
		// Both VIPs via every gateway: the sessions are up and the announcements installed.
		for _, vip := range []netip.Addr{VIP4, VIP6} {
			d, err := s.WaitRouterRoute(vip, s.bound(bgpUpTimeout), s.Gateways...)
			if err != nil {
				return err
			}
			s.logf("router: %s learned over BGP via %v (%v after the gateways were ready)", vip,
				gatewayNames(s.Gateways), d.Round(time.Millisecond))
		}
	}
	return nil
}

// StartAll starts xlb on every gateway that is not running, at once, and waits until each is
// ready.
func (s *Site) StartAll() error {
	errs := make([]error, len(s.Gateways))
	var wg sync.WaitGroup
	for i, g := range s.Gateways {
		if g.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Site) addClient(i int) error {
	ns, err := s.addNS(s.nsName(fmt.Sprintf("c%d", i)), false)
	if err != nil {
		return err
	}
	c4, r4, c6, r6 := clientAddrs(i)
	rif := fmt.Sprintf("c%d", i)
	if err := veth(ns, "eth0", s.Router.NS, rif); err != nil {
		return err
	}
	if err := ipc(ns,
		fmt.Sprintf("addr add %s/24 dev eth0", c4),
		fmt.Sprintf("addr add %s/64 dev eth0 nodad", c6),
		fmt.Sprintf("-4 route add default via %s", r4),
		fmt.Sprintf("-6 route add default via %s", r6)); err != nil {
		return err
	}
	if err := ipc(s.Router.NS,
		fmt.Sprintf("addr add %s/24 dev %s", r4, rif),
		fmt.Sprintf("addr add %s/64 dev %s nodad", r6, rif)); err != nil {
		return err
	}
	if err := txOff(ns, "eth0"); err != nil {
		return err
	}
	s.Clients = append(s.Clients, &Client{Index: i, Name: fmt.Sprintf("c%d", i), NS: ns, Addr4: c4, Addr6: c6})
	return nil
}

func (s *Site) addGateway(g int) error {
	name := fmt.Sprintf("g%d", g)
	ns, err := s.addNS(s.nsName(name), true)
	if err != nil {
		return err
	}
	gw4, r4, gw6, r6 := upstreamAddrs(g)
	cl4, cl6 := gatewayClusterAddrs(g)
	if err := veth(ns, "up0", s.Router.NS, name); err != nil {
		return err
	}
	if err := veth(ns, "cl0", s.L2, name); err != nil {
		return err
	}
	if err := ipc(s.L2, "link set "+name+" master br0"); err != nil {
		return err
	}
	if err := ipc(ns,
		fmt.Sprintf("addr add %s/24 dev up0", gw4),
		fmt.Sprintf("addr add %s/64 dev up0 nodad", gw6),
		fmt.Sprintf("addr add %s/%d dev cl0", cl4, ClusterPrefix4.Bits()),
		fmt.Sprintf("addr add %s/%d dev cl0 nodad", cl6, ClusterPrefix6.Bits()),
		fmt.Sprintf("-4 route add default via %s dev up0", r4),
		fmt.Sprintf("-6 route add default via %s dev up0", r6),
		// The recommended set-up (docs/datapath.md, "Security model"): the VIP prefixes go
		// nowhere in the gateway's own kernel, so what the datapath does not take (it is
		// detached, or stopped) is dropped there, never looped back to the router.
		fmt.Sprintf("-4 route add blackhole %s", VIPPrefix4),
		fmt.Sprintf("-6 route add blackhole %s", VIPPrefix6)); err != nil {
		return err
	}
	if err := ipc(s.Router.NS,
		fmt.Sprintf("addr add %s/24 dev %s", r4, name),
		fmt.Sprintf("addr add %s/64 dev %s nodad", r6, name)); err != nil {
		return err
	}
	// The gateway's XDP program sends into "up0" and "cl0" with XDP_TX and XDP_REDIRECT: their
	// peers need an XDP program.
	if err := s.attachPass(s.Router.NS, name); err != nil {
		return err
	}
	if err := s.attachPass(s.L2, name); err != nil {
		return err
	}
	gw := &Gateway{Index: g, Name: name, NS: ns, site: s,
		Upstream4: gw4, Upstream6: gw6, Cluster4: cl4, Cluster6: cl6,
		PinPath:    filepath.Join("/sys/fs/bpf", s.nsName(name)),
		ConfigPath: filepath.Join(s.Dir, name+".yaml"),
		LogPath:    filepath.Join(s.Dir, name+".log"),
		PidPath:    filepath.Join(s.Dir, name+".pid"),
		Listen:     "127.0.0.1:" + strconv.Itoa(MetricsPort),
	}
	s.Gateways = append(s.Gateways, gw)
	s.onClose(gw.shutdown)
	return nil
}

func (s *Site) addNode(n int) error {
	name := fmt.Sprintf("n%d", n)
	ns, err := s.addNS(s.nsName(name), true)
	if err != nil {
		return err
	}
	a4, a6 := nodeClusterAddrs(n)
	c4, c6 := podCIDRs(n)
	if err := veth(ns, "eth0", s.L2, name); err != nil {
		return err
	}
	if err := ipc(s.L2, "link set "+name+" master br0"); err != nil {
		return err
	}
	// The default route. Return path: ECMP over every gateway (replies may leave through any of
	// them: the gateways' reverse NAT is stateless). DSR: the router, as on most sites; the
	// node's agent gives the pods' replies the VIP as source.
	var nh4, nh6 strings.Builder
	if s.DSR() {
		r4, r6 := routerClusterAddrs()
		fmt.Fprintf(&nh4, " via %s dev eth0", r4)
		fmt.Fprintf(&nh6, " via %s dev eth0", r6)
	} else {
		for g := 1; g <= s.Opts.Gateways; g++ {
			g4, g6 := gatewayClusterAddrs(g)
			fmt.Fprintf(&nh4, " nexthop via %s dev eth0", g4)
			fmt.Fprintf(&nh6, " nexthop via %s dev eth0", g6)
		}
	}
	cmds := []string{
		fmt.Sprintf("addr add %s/%d dev eth0", a4, ClusterPrefix4.Bits()),
		fmt.Sprintf("addr add %s/%d dev eth0 nodad", a6, ClusterPrefix6.Bits()),
		"-4 route add default" + nh4.String(),
		"-6 route add default" + nh6.String(),
	}
	if s.DSR() {
		// In-cluster clients reach the VIPs on the gateways' cluster legs, as the gateways
		// require (the router would bring them to the client side, where a site source is
		// forged: docs/datapath.md, "Security model").
		var v4, v6 strings.Builder
		for g := 1; g <= s.Opts.Gateways; g++ {
			g4, g6 := gatewayClusterAddrs(g)
			fmt.Fprintf(&v4, " nexthop via %s dev eth0", g4)
			fmt.Fprintf(&v6, " nexthop via %s dev eth0", g6)
		}
		cmds = append(cmds, fmt.Sprintf("-4 route add %s%s", VIPPrefix4, v4.String()),
			fmt.Sprintf("-6 route add %s%s", VIPPrefix6, v6.String()))
	}
	if err := ipc(ns, cmds...); err != nil {
		return err
	}
	if s.DSR() {
		// The node's replies leave with checksums its agent's egress program rewrote: computed
		// in software here, so the client really checks them (a veth would pass a partial
		// checksum along unchecked).
		if err := txOff(ns, "eth0"); err != nil {
			return err
		}
	}
	s.Nodes = append(s.Nodes, &Node{Index: n, Name: name, NS: ns, Addr4: a4, Addr6: a6, PodCIDR4: c4, PodCIDR6: c6})
	return nil
}

// AddPod creates a new pod on node: its namespace, its link to the node, its addresses, the
// node's routes to it, and its servers, labelled LabelApp: DefaultApp. In File mode it is not
// a backend until SetBackends says so; in Kubernetes mode it joins the EndpointSlices of the
// Services that select it (ready) before AddPod returns.
func (s *Site) AddPod(node *Node) (*Pod, error) {
	return s.AddPodLabeled(node, map[string]string{LabelApp: DefaultApp})
}

// AddPodLabeled is AddPod with the pod's labels.
func (s *Site) AddPodLabeled(node *Node, labels map[string]string) (*Pod, error) {
	s.mu.Lock()
	s.podSeq++
	j := s.podSeq
	s.mu.Unlock()
	if j > maxPods {
		return nil, fmt.Errorf("lab: at most %d pods", maxPods)
	}
	name := fmt.Sprintf("p%d", j)
	ns, err := s.addNS(s.nsName(name), false)
	if err != nil {
		return nil, err
	}
	a4, a6 := podAddrs(node.Index, j)
	side4 := nodePodSide4(node.Index)
	if err := veth(ns, "eth0", node.NS, name); err != nil {
		return nil, err
	}
	// Pods get a /32 and a /128 and a default route via the node's side of their link (as
	// Calico-style CNIs do); the node routes each pod address to its link.
	if err := ipc(ns,
		fmt.Sprintf("addr add %s/32 dev eth0", a4),
		fmt.Sprintf("addr add %s/128 dev eth0 nodad", a6),
		fmt.Sprintf("-4 route add %s/32 dev eth0 scope link", side4),
		fmt.Sprintf("-4 route add default via %s dev eth0", side4),
		fmt.Sprintf("-6 route add default via %s dev eth0", podGateway6)); err != nil {
		return nil, err
	}
	if err := ipc(node.NS,
		fmt.Sprintf("addr add %s/32 dev %s", side4, name),
		fmt.Sprintf("addr add %s/64 dev %s nodad", podGateway6, name),
		fmt.Sprintf("-4 route add %s/32 dev %s src %s", a4, name, side4),
		fmt.Sprintf("-6 route add %s/128 dev %s", a6, name)); err != nil {
		return nil, err
	}
	if err := txOff(ns, "eth0"); err != nil {
		return nil, err
	}
	p := &Pod{Index: j, Name: name, Node: node, NS: ns, Addr4: a4, Addr6: a6, Labels: labels}
	if err := p.startServers(); err != nil {
		return nil, err
	}
	s.onClose(func() error { p.StopServers(); return nil })
	s.mu.Lock()
	s.Pods = append(s.Pods, p)
	s.mu.Unlock()
	s.logf("pod %s on node %s: %s %s", name, node.Name, a4, a6)
	if s.Kube != nil {
		// The kubelet marks a pod ready after its readiness probe passes, from the node: probe
		// both addresses the same way before the pod joins any slice.
		for _, a := range []netip.Addr{a4, a6} {
			if code, _, err := node.NS.HTTPGet(netip.AddrPortFrom(a, TargetHTTP).String(), "/healthz", httpTimeout); err != nil || code != 200 {
				return p, fmt.Errorf("lab: pod %s: readiness probe from node %s to %s: %d %v", name, node.Name, a, code, err)
			}
		}
		if s.Kube.Client != nil {
			if err := s.Kube.Sync(); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}

// route points the router's VIP routes at the gateways with the given indexes (ECMP).
func (s *Site) route(idx []int) error {
	if s.Opts.Routing != Static {
		return fmt.Errorf("lab: the router's VIP routes are set by hand only with Routing Static (this site: %v)", s.Opts.Routing)
	}
	if len(idx) == 0 {
		return errors.New("lab: the router needs at least one gateway for the VIP prefix")
	}
	var r4, r6 strings.Builder
	for _, g := range idx {
		gw4, _, gw6, _ := upstreamAddrs(g)
		fmt.Fprintf(&r4, " nexthop via %s dev g%d", gw4, g)
		fmt.Fprintf(&r6, " nexthop via %s dev g%d", gw6, g)
	}
	if err := ipc(s.Router.NS,
		fmt.Sprintf("-4 route replace %s%s", VIPPrefix4, r4.String()),
		fmt.Sprintf("-6 route replace %s%s", VIPPrefix6, r6.String())); err != nil {
		return err
	}
	s.mu.Lock()
	s.upstream = slices.Clone(idx)
	s.mu.Unlock()
	return nil
}

// RouteVia makes the router's multipath routes to the VIP prefixes (both families) use exactly
// the given gateways: RouteVia(g2) takes g1 out, RouteVia(g1, g2) puts it back.
func (s *Site) RouteVia(gws ...*Gateway) error {
	idx := make([]int, len(gws))
	for i, g := range gws {
		idx[i] = g.Index
	}
	if err := s.route(idx); err != nil {
		return err
	}
	s.logf("router: VIP prefixes via %v", idx)
	return nil
}

// RemoveFromRoute takes g out of the router's multipath routes to the VIP prefixes.
func (s *Site) RemoveFromRoute(g *Gateway) error {
	var keep []*Gateway
	for _, u := range s.Upstream() {
		if u != g {
			keep = append(keep, u)
		}
	}
	return s.RouteVia(keep...)
}

// AddToRoute puts g back into the router's multipath routes to the VIP prefixes.
func (s *Site) AddToRoute(g *Gateway) error {
	up := s.Upstream()
	if slices.Contains(up, g) {
		return nil
	}
	up = append(up, g)
	slices.SortFunc(up, func(a, b *Gateway) int { return a.Index - b.Index })
	return s.RouteVia(up...)
}

// Upstream returns the gateways in the router's multipath routes (Routing BIRD: the next hops of
// the router's route to VIP4).
func (s *Site) Upstream() []*Gateway {
	if s.Opts.Routing != Static {
		_, gws, _ := s.RouterRoute(VIP4)
		return gws
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Gateway, len(s.upstream))
	for i, g := range s.upstream {
		out[i] = s.Gateways[g-1]
	}
	return out
}

// Backends returns the pods in the gateways' current config.
func (s *Site) Backends() []*Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.backends)
}

// SetBackends rewrites every gateway's config with pods as the service's backends and reloads
// the running ones (SIGHUP), waiting until each applied it.
func (s *Site) SetBackends(pods ...*Pod) error {
	if s.Opts.Mode == Kubernetes {
		return errors.New("lab: SetBackends is for File mode; in Kubernetes mode the EndpointSlices follow the pods (AddPodLabeled, SetPodState)")
	}
	s.mu.Lock()
	s.backends = slices.Clone(pods)
	s.mu.Unlock()
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	s.logf("backends: %v", names)
	// The agents first: a new backend's node must accept the carrier before a gateway sends one.
	if err := s.reloadAgents(pods); err != nil {
		return err
	}
	errs := make([]error, len(s.Gateways))
	var wg sync.WaitGroup
	for i, g := range s.Gateways {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.WriteConfig(s.ConfigYAML(g, pods)); err != nil {
				errs[i] = err
				return
			}
			if g.Running() {
				errs[i] = g.Reload()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pod returns the pod called name ("p3"), or nil.
func (s *Site) Pod(name string) *Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.Pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}
