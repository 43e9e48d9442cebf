// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Describe writes the site's topology: namespaces, links and addresses, routes that matter.
func (s *Site) Describe(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ROLE\tNAMESPACE\tADDRESSES\tNOTES\n")
	for _, c := range s.Clients {
		fmt.Fprintf(tw, "client %s\t%s\t%s %s\tdefault via the router\n", c.Name, c.NS.Name, c.Addr4, c.Addr6)
	}
	var ups []string
	for _, g := range s.Upstream() {
		ups = append(ups, g.Name)
	}
	if s.Opts.Routing.BGP() {
		name := map[Routing]string{BIRD: "BIRD", FRR: "FRR"}[s.Opts.Routing]
		vips := fmt.Sprintf("%s, %s", VIP4, VIP6)
		if s.Opts.Mode == Kubernetes {
			vips = "the Services' VIPs"
		}
		fmt.Fprintf(tw, "router\t%s\t\t%s (AS %d), eBGP with each gateway; %s: ECMP via %s (L4 hash)\n", s.Router.NS.Name,
			name, RouterASN, vips, strings.Join(ups, "+"))
	} else {
		fmt.Fprintf(tw, "router\t%s\t\t%s, %s: static ECMP via %s (L4 hash)\n", s.Router.NS.Name, VIPPrefix4, VIPPrefix6, strings.Join(ups, "+"))
	}
	for _, g := range s.Gateways {
		state := "xlb not running"
		if pid := g.Pid(); pid != 0 {
			state = fmt.Sprintf("xlb pid %d", pid)
		}
		fmt.Fprintf(tw, "gateway %s\t%s\tup0 %s %s, cl0 %s %s\t%s; XDP on up0+cl0; pins %s\n", g.Name, g.NS.Name,
			g.Upstream4, g.Upstream6, g.Cluster4, g.Cluster6, state, g.PinPath)
	}
	l2 := "bridge br0: gateways' cl0 + nodes' eth0"
	if s.DSR() {
		r4, r6 := routerClusterAddrs()
		l2 += fmt.Sprintf(" + the router's cl0 (%s %s)", r4, r6)
	}
	fmt.Fprintf(tw, "cluster L2\t%s\t%s %s\t%s\n", s.L2.Name, ClusterPrefix4, ClusterPrefix6, l2)
	if k := s.Kube; k != nil && k.CP != nil {
		fmt.Fprintf(tw, "control\t%s\t%s %s\tetcd (127.0.0.1) + kube-apiserver %s, on the cluster L2\n", k.NS.Name,
			ControlAddr4, ControlAddr6, k.CP.URL())
	}
	for _, n := range s.Nodes {
		note := "default via the gateways (ECMP): replies return through them (return-path mode)"
		if s.DSR() {
			note = "default via the router; xlb agent: node side of DSR on eth0 (replies leave from the VIP)"
		}
		fmt.Fprintf(tw, "node %s\t%s\t%s %s\tpod CIDR %s %s; %s\n", n.Name, n.NS.Name,
			n.Addr4, n.Addr6, n.PodCIDR4, n.PodCIDR6, note)
	}
	backend := map[*Pod]bool{}
	for _, p := range s.Backends() {
		backend[p] = true
	}
	for _, p := range s.Pods {
		note := "HTTP :8080, who udp :8080, echo tcp+udp :7007"
		if !backend[p] {
			note += " (not a backend)"
		}
		fmt.Fprintf(tw, "pod %s\t%s\t%s %s\ton node %s; %s\n", p.Name, p.NS.Name, p.Addr4, p.Addr6, p.Node.Name, note)
	}
	tw.Flush()
	if s.Opts.Mode == Kubernetes {
		fmt.Fprintf(w, "\nKubernetes mode: each gateway's xlb is a LoadBalancer-class controller (xlb.dev/xdp) giving\n"+
			"VIPs from pool %q (%s, %s) to the Services of deploy/examples/services.yaml.\n", PoolName, PoolRange4, PoolRange6)
		return
	}
	fmt.Fprintf(w, "\nVIPs %s and %s (configured on no interface), service %q:\n"+
		"  http %d/tcp -> pods :%d   who %d/udp -> pods :%d   echo %d/tcp+udp -> pods :%d\n",
		VIP4, VIP6, ServiceName, PortHTTP, TargetHTTP, PortWho, TargetHTTP, PortEcho, TargetEcho)
}

// Demo shows that the site works, from its first client: HTTP requests through both VIPs
// (which pod answered, and the client address it saw), UDP and TCP echo, ping to the VIPs,
// how 200 new connections spread over the pods, and each gateway's per-VIP counters. It returns
// an error if anything failed.
func (s *Site) Demo(ctx context.Context, w io.Writer) error {
	c := s.Clients[0]
	var errs []error
	fail := func(format string, args ...any) {
		err := fmt.Errorf(format, args...)
		errs = append(errs, err)
		fmt.Fprintf(w, "  FAILED: %v\n", err)
	}
	if s.Opts.Mode == Kubernetes {
		s.demoKube(ctx, w, fail)
		s.demoCounters(w, fail)
		s.demoDSR(w, fail)
		return errors.Join(errs...)
	}
	s.demoRouting(w, fail, []netip.Addr{VIP4, VIP6})
	fmt.Fprintf(w, "\n== HTTP through the VIP, from client %s (a new connection each) ==\n", c.Name)
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		url := "http://" + vip.String() + "/"
		if vip.Is6() {
			url = "http://[" + vip.String() + "]/"
		}
		for range 4 {
			a, local, err := c.Get(ctx, vip)
			if err != nil {
				fail("GET %s: %v", url, err)
				continue
			}
			seen := "the client's own address and port"
			if a.Client != local {
				seen = "NOT the client's address " + local.String()
			}
			fmt.Fprintf(w, "  GET %-24s -> pod %s on node %s (%s) saw client %s: %s\n",
				url, a.Pod, a.Node, a.PodAddr, a.Client, seen)
		}
	}

	fmt.Fprintf(w, "\n== UDP and TCP through the VIP ==\n")
	for _, vip := range []netip.Addr{VIP4, VIP6} {
		if a, err := c.Who(vip); err != nil {
			fail("UDP who %s: %v", vip, err)
		} else {
			fmt.Fprintf(w, "  UDP %-24s -> pod %s saw client %s\n", netip.AddrPortFrom(vip, PortWho), a.Pod, a.Client)
		}
		if err := echoTCP(ctx, c, vip); err != nil {
			fail("TCP echo %s: %v", vip, err)
		} else {
			fmt.Fprintf(w, "  TCP echo %-19s -> echoed\n", netip.AddrPortFrom(vip, PortEcho))
		}
		if err := echoUDP(c, vip); err != nil {
			fail("UDP echo %s: %v", vip, err)
		} else {
			fmt.Fprintf(w, "  UDP echo %-19s -> echoed\n", netip.AddrPortFrom(vip, PortEcho))
		}
		if rtt, err := c.Ping(vip); err != nil {
			fail("ping %s: %v", vip, err)
		} else {
			fmt.Fprintf(w, "  ping %-23s -> echo reply in %v (answered by a gateway's XDP program)\n", vip, rtt.Round(time.Microsecond))
		}
	}

	const spread = 200
	fmt.Fprintf(w, "\n== %d new connections to http://%s/ ==\n", spread, VIP4)
	counts := map[string]int{}
	failed := 0
	for range spread {
		a, _, err := c.Get(ctx, VIP4)
		if err != nil {
			failed++
			continue
		}
		counts[a.Pod]++
	}
	if failed > 0 {
		fail("%d of %d requests failed", failed, spread)
	}
	var pods []string
	for _, p := range s.Backends() {
		pods = append(pods, fmt.Sprintf("%s %d", p.Name, counts[p.Name]))
	}
	fmt.Fprintf(w, "  answered by: %s\n", strings.Join(pods, ", "))
	s.demoCounters(w, fail)
	s.demoDSR(w, fail)
	return errors.Join(errs...)
}

// demoCounters shows each gateway's per-VIP counters.
func (s *Site) demoCounters(w io.Writer, fail func(string, ...any)) {
	fmt.Fprintf(w, "\n== Per-VIP counters from each gateway's /metrics (xlb_vip_*_total) ==\n")
	for _, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			fail("%v", err)
			continue
		}
		fmt.Fprintf(w, "  %s (%s datapath, %s, http://%s/metrics):\n", g.Name, s.datapathKind(g), g.NS.Name, g.Listen)
		for _, smp := range sortedVIPSamples(m) {
			l := smp.Labels
			fe := l["vip"] + ":" + l["port"]
			if strings.Contains(l["vip"], ":") {
				fe = "[" + l["vip"] + "]:" + l["port"]
			}
			fmt.Fprintf(w, "    %-22s %-4s packets %6.0f  new flows %5.0f  bytes %8.0f\n",
				fe, l["protocol"], smp.Value,
				m.Sum("xlb_vip_new_flows_total", "vip", l["vip"], "port", l["port"], "protocol", l["protocol"]),
				m.Sum("xlb_vip_bytes_total", "vip", l["vip"], "port", l["port"], "protocol", l["protocol"]))
		}
		fmt.Fprintf(w, "    conntrack entries %.0f; datapath: %s\n", m.Sum("xlb_conntrack_entries"), m.Reasons())
	}
}

func sortedVIPSamples(m Metrics) []Sample {
	ss := m.Samples("xlb_vip_packets_total")
	slices.SortFunc(ss, func(a, b Sample) int {
		return strings.Compare(a.Labels["vip"]+"/"+a.Labels["port"]+"/"+a.Labels["protocol"],
			b.Labels["vip"]+"/"+b.Labels["port"]+"/"+b.Labels["protocol"])
	})
	return ss
}

func echoTCP(ctx context.Context, c *Client, vip netip.Addr) error {
	conn, err := c.Dial(ctx, netip.AddrPortFrom(vip, PortEcho))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(IOTimeout))
	msg := "hello through " + vip.String() + "\n"
	if _, err := io.WriteString(conn, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echoed %q, want %q", buf, msg)
	}
	return nil
}

func echoUDP(c *Client, vip netip.Addr) error {
	conn, err := c.ListenUDP(vip, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	dst := netip.AddrPortFrom(vip, PortEcho)
	msg := "hello through " + vip.String()
	b, from, err := Exchange(conn, dst, []byte(msg))
	if err != nil {
		return err
	}
	if from != dst || string(b) != msg {
		return fmt.Errorf("answer %q from %s, want %q from %s", b, from, msg, dst)
	}
	return nil
}

// Guide writes how a person can use the running site from a shell.
func (s *Site) Guide(w io.Writer) {
	c := s.Clients[0].NS.Name
	g := s.Gateways[0]
	vip4, vip6 := VIP4, VIP6
	if s.Opts.Mode == Kubernetes {
		vip4, vip6 = ExampleDualVIP4, ExampleDualVIP6 // default/web-dual asks for these
	}
	fmt.Fprintf(w, `
Try it (as root, in another shell):
  ip netns exec %[1]s curl http://%[2]s/
  ip netns exec %[1]s curl 'http://[%[3]s]/'
  ip netns exec %[1]s ping -c 3 %[2]s          (if iputils-ping is installed: make deps)
  ip netns exec %[4]s curl -s http://%[5]s/metrics | grep ^xlb_vip
  ip netns exec %[6]s ip route show root %[7]s   (the ECMP routes to the gateways)
  tail -f %[8]s                                (xlb's log on %[9]s)
`, c, vip4, vip6, g.NS.Name, g.Listen, s.Router.NS.Name, VIPPrefix4, g.LogPath, g.Name)
	switch s.Opts.Routing {
	case BIRD:
		fmt.Fprintf(w, "  birdc -s %s show protocols                (the router's BGP sessions)\n", s.birdPath(routerBIRDCtlSuffix))
		fmt.Fprintf(w, "  birdc -s %s show bfd sessions             (the router's BFD sessions)\n", s.birdPath(routerBIRDCtlSuffix))
	case FRR:
		fmt.Fprintf(w, "  vtysh --vty_socket %s -c 'show bgp summary'   (the router's BGP sessions)\n", s.frrDir())
		fmt.Fprintf(w, "  vtysh --vty_socket %s -c 'show bfd peers brief'   (the router's BFD sessions)\n", s.frrDir())
	}
	if s.Opts.Routing.BGP() {
		fmt.Fprintf(w, "  ip netns exec %s %s bgp --listen %s   (%s's BGP sessions and routes)\n", g.NS.Name, s.Opts.XLB, g.Listen, g.Name)
	}
	if k := s.Kube; k != nil {
		fmt.Fprintf(w, "  ip netns exec %s kubectl --kubeconfig %s get svc,endpointslices,nodes,leases -A\n"+
			"                                             (if you have kubectl: the administrator, inside the control namespace)\n",
			k.NS.Name, k.AdminKubeconfig)
		fmt.Fprintf(w, "  %s/kube/kube-apiserver.log, etcd.log     (the control plane's logs)\n", s.Dir)
		if len(s.Pods) > 0 {
			if a := k.Agent(s.Pods[0].Node); a != nil {
				p := s.Pods[0]
				fmt.Fprintf(w, "  sh -c 'echo $$ > %s/cgroup.procs; exec ip netns exec %s curl -s http://<cluster IP>/'\n"+
					"                                             (pod %s reaching a Service's cluster IP through node %s's agent)\n",
					a.Cgroup, p.NS.Name, p.Name, p.Node.Name)
				fmt.Fprintf(w, "  ip netns exec %s curl -s http://%s/metrics | grep ^xlb_agent   (node %s's agent)\n",
					p.Node.NS.Name, agentListen, p.Node.Name)
			}
		}
	}
}

// demoRouting shows how the router routes the VIPs: with BIRD or FRR, its BGP sessions (birdc
// show protocols or vtysh's show bgp summary, and each gateway's xlb_bgp_session_up), then its kernel route to each VIP.
func (s *Site) demoRouting(w io.Writer, fail func(string, ...any), vips []netip.Addr) {
	if s.Opts.Routing.BGP() {
		var out string
		var err error
		if s.Opts.Routing == BIRD {
			fmt.Fprintf(w, "\n== The router's BGP sessions (birdc show protocols) ==\n")
			out, err = s.BIRDC("show", "protocols")
		} else {
			fmt.Fprintf(w, "\n== The router's BGP sessions (vtysh: show bgp summary) ==\n")
			out, err = s.VTYSH("show bgp summary")
		}
		s.demoSessions(w, fail, out, err, "xlb_bgp_session_up", "BGP")
		s.demoBFD(w, fail)
	}
	fmt.Fprintf(w, "\n== The router's route to each VIP (%v routing) ==\n", s.Opts.Routing)
	for _, vip := range vips {
		route, gws, err := s.RouterRoute(vip)
		if err != nil {
			fail("%v", err)
			continue
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(strings.Fields(route), " "))
		if len(gws) != len(s.Gateways) {
			fail("the router's route to %s has %d next hops, want %d (one per gateway)", vip, len(gws), len(s.Gateways))
		}
	}
}

// demoBFD shows the BFD sessions beside the BGP ones: the router's view, then each gateway's
// xlb_bfd_session_up (waiting up to 5 s for them: BFD starts a second after the sessions).
func (s *Site) demoBFD(w io.Writer, fail func(string, ...any)) {
	deadline := time.Now().Add(5 * time.Second)
	for _, g := range s.Gateways {
		for {
			m, err := g.Metrics()
			if err == nil && m.Sum("xlb_bfd_session_up") == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	fmt.Fprintf(w, "\n== BFD (300 ms × 3): a dead gateway leaves ECMP in under a second ==\n")
	out, err := s.RouterBFD()
	s.demoSessions(w, fail, out, err, "xlb_bfd_session_up", "BFD")
}

// demoSessions prints the router's view of its sessions (out, or err), then each gateway's
// metric (xlb_bgp_session_up, xlb_bfd_session_up) per peer, failing on one that is not 1.
func (s *Site) demoSessions(w io.Writer, fail func(string, ...any), out string, err error, metric, what string) {
	if err != nil {
		fail("%v", err)
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
	for _, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			fail("%v", err)
			continue
		}
		for _, smp := range m.Samples(metric) {
			fmt.Fprintf(w, "  %s: %s{peer=%q} %v\n", g.Name, metric, smp.Labels["peer"], smp.Value)
			if smp.Value != 1 {
				fail("%s: %s session to %s is down", g.Name, what, smp.Labels["peer"])
			}
		}
	}
}

// demoDSR shows that the replies bypassed the gateways (DSR mode): the gateways carried the
// flows' first packets to the nodes and translated no reply; the nodes' agents rewrote them.
func (s *Site) demoDSR(w io.Writer, fail func(string, ...any)) {
	if !s.DSR() {
		return
	}
	fmt.Fprintf(w, "\n== Direct server return: the replies bypassed the gateways ==\n")
	var reverse float64
	for _, g := range s.Gateways {
		m, err := g.Metrics()
		if err != nil {
			fail("%v", err)
			continue
		}
		rev := m.Sum("xlb_datapath_packets_total", "reason", "nat_reverse")
		reverse += rev
		fmt.Fprintf(w, "  gateway %s: carried %.0f first packets to the nodes (dsr_carried), translated %.0f replies (nat_reverse)\n",
			g.Name, m.Sum("xlb_datapath_packets_total", "reason", "dsr_carried"), rev)
	}
	for _, a := range s.Agents {
		p, err := a.DSR()
		if err != nil {
			fail("%v", err)
			continue
		}
		fmt.Fprintf(w, "  node %s (xlb show dsr --pin-path %s): carriers accepted %d, replies rewritten to the VIP %d, ICMP errors %d, flows %d, pairs %d\n",
			a.Node.Name, a.DSRPinPath, p.Counters["carrier_accepted"], p.Counters["reply_rewritten"], p.Counters["icmp_rewritten"],
			len(p.Flows), len(p.Services))
	}
	if reverse != 0 {
		fail("the gateways translated %.0f replies: replies crossed them", reverse)
	} else {
		fmt.Fprintf(w, "  no gateway translated a reply: every reply left its node from the VIP, straight to the router\n")
	}
}
