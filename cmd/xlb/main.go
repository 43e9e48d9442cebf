// Command xlb is the xlb load-balancer appliance.
//
//	xlb run --config FILE    run the appliance from a YAML file (Kubernetes mode when the file
//	                         has a kubernetes section)
//	xlb cleanup [--pin-path DIR]
//	                         detach every program and remove every map and link xlb pinned
//	xlb show [services|flows|reasons|flow|agent|dsr]
//	                         show what the pinned XDP datapath is doing, from its maps
//	xlb bgp [--listen ADDR]  show the running daemon's BGP sessions and routes
//	xlb convert --config FILE [--gateway NAME]
//	                         the objects equivalent to FILE's pools and BGP peers (Kubernetes
//	                         mode keeps them in the cluster, not in each gateway's file)
//	xlb version [--json]     the version, the commit and the build settings
//	xlb agent [--node NAME]  run the node agent: every Service's cluster IPs balanced at the
//	                         node's sockets, and with --dsr-interface the node side of direct
//	                         server return; with --config, direct server return only, from the
//	                         gateways' file (docs/agent.md)
//
// See README.md, deploy/xlb.example.yaml and deploy/xlb.kubernetes.example.yaml.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/xlb-dev/xlb/lb/gateway"
	"github.com/xlb-dev/xlb/xdp/dsr"
	xdpgw "github.com/xlb-dev/xlb/xdp/gateway"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stderr))
}

const usage = `usage:
  xlb run --config FILE [--cleanup-on-exit]
      Run the appliance: the services of FILE, and with a kubernetes section in FILE also the
      LoadBalancer Services of its class (Kubernetes mode). SIGHUP reloads FILE; SIGTERM/SIGINT
      stop the daemon and, unless --cleanup-on-exit, leave forwarding in place (maps and links
      stay pinned; with datapath.kind afxdp forwarding stops with the daemon).
  xlb convert --config FILE [--gateway NAME]
      Print, as YAML for kubectl apply, the objects (xlb.dev/v1alpha1) equivalent to FILE's
      sections that belong in the cluster in Kubernetes mode: pools → AddressPools (in file
      order); bgp.peers → BGPPeers selecting this gateway (NAME, default kubernetes.gatewayName
      or the host name), each passwordFile → a Secret; the bgp section's communities, localPref
      and med → a BGPAdvertisement for this gateway. Apply the output, then remove them from
      the file and reload it (SIGHUP): no address changes hands and no session is reset, but
      a session with a password once (its password now comes from the Secret).
  xlb cleanup [--pin-path DIR]
      Detach every program and remove every pin xlb (or xlb agent) made (default DIR:
      /sys/fs/bpf/xlb; the agent's: /sys/fs/bpf/xlb-agent, its direct server return's:
      /sys/fs/bpf/xlb-dsr). Refused while an xlb run daemon holds DIR: stop it first.
  xlb show [services|flows|reasons] [--pin-path DIR] [--json] [--vip ADDR] [--limit N]
  xlb show flow --client ADDR:PORT --to VIP:PORT [--proto tcp|udp] [--seed N] [...]
  xlb show agent [--pin-path DIR] [--json]
  xlb show dsr [--pin-path DIR] [--json] [--limit N]
      Show what the XDP datapath pinned in DIR (default /sys/fs/bpf/xlb) is doing, from its
      maps alone (read-only; no daemon needed): services with their backends' Maglev shares
      and counters, and the backends in no table (the default); the flows (at most N, default
      1000, 0: all; the most recently used first; expired ones are listed until the LRU reuses
      them; a TCP connection from its handshake's ACK, held in its handshake slot until a SYN
      of another tuple needs the slot, then in conntrack; a UDP flow from its second
      datagram); or the verdict counters. --vip keeps one VIP's services and flows.
      Port * is all ports (the client's port kept). flow explains where one flow's packets
      go: its frontend, source ranges, the Maglev slot of a new connection (the seed read from
      the attached program unless --seed), its conntrack entry and its handshake-table entry
      (a TCP handshake in flight, or a UDP flow's first datagram); run it on each gateway to
      see that they agree. agent shows a node agent's cluster-IP frontends, their endpoints
      and its counters (DIR default /sys/fs/bpf/xlb-agent). dsr shows a node agent's direct
      server return: the interfaces it is attached to, the {frontend, endpoint} pairs it
      accepts carriers for, its counters and at most N recorded flows (the most recently used
      first; DIR default /sys/fs/bpf/xlb-dsr).
  xlb bgp [--listen ADDR] [--json]
      Show the running daemon's BGP sessions and announced routes (from its /bgp endpoint;
      default ADDR: 127.0.0.1:9610, the default listen).
  xlb bfd --config FILE
  xlb bfd status --config FILE
      Run the BFD sessions of FILE's BGP peers (bgp.bfdProcess: true) in a process apart from
      the daemon, supervised on its own: they stay up while the XDP datapath pinned at
      datapath.pinPath is attached to FILE's interfaces and the daemon's health lease (if it
      wrote one) is current, whether the daemon runs or not. status prints the sessions and
      the packets dropped (wrong TTL, not a peer, wrong discriminator) as JSON.
  xlb version [--json]
      Print xlb's version, the commit it was built from (and whether the tree had uncommitted
      changes), the Go version, the platform and the build settings.
  xlb agent [--node NAME] [--kubeconfig FILE] [--cgroup DIR] [--listen ADDR]
            [--pin-path DIR] [--cleanup-on-exit] [--netns-dir DIR] [--max-sockets N]
            [--dsr-interface NAME[,NAME]] [--dsr-pin-path DIR] [--dsr-flows N]
            [--dsr-tcp-pickup-budget N] [--dsr-udp-new-budget N]
            [--dsr-hairpin=false] [--class CLASS] [--default-class]
  xlb agent --config FILE --node NAME --dsr-interface NAME [--dsr-pin-path DIR]
            [--dsr-flows N] [--dsr-tcp-pickup-budget N] [--dsr-udp-new-budget N]
            [--dsr-hairpin=false] [--listen ADDR] [--cleanup-on-exit]
      Run the node agent (one per node, e.g. as a DaemonSet): connections from the node's
      processes and Pods to a Service's cluster IP go straight to one of its endpoints
      (default NAME: $NODE_NAME; default cgroup: the cgroup v2 root; /metrics and /healthz on
      ADDR, default 127.0.0.1:9612, "" for none). Connected UDP sockets whose endpoint is
      removed are closed, in the agent's network namespace and the Pods' pinned in the netns
      DIR (default /run/netns). Its four LRU maps hold N entries each (default 262144, ~120
      MiB preallocated; 65536 takes ~30 MiB). SIGTERM/SIGINT stop it and, unless
      --cleanup-on-exit, leave balancing in place (pinned in /sys/fs/bpf/xlb-agent, adopted
      by the next agent; xlb cleanup --pin-path /sys/fs/bpf/xlb-agent removes it).
      --dsr-interface (repeatable, or comma-separated) runs the node side of direct server
      return on the node's uplinks: carriers accepted for the node's endpoints of the
      LoadBalancer Services of CLASS (default xlb.dev/xdp), their replies given the VIP (also
      on the interfaces toward the node's Pods, unless --dsr-hairpin=false), and the Node
      annotated xlb.dev/dsr=v1 for the gateways. Pinned in /sys/fs/bpf/xlb-dsr (flows LRU of N
      entries, default 1048576, ~136 MiB, and a half-open LRU of N/16), left serving at exit
      like the socket load balancer; --cleanup-on-exit withdraws the annotation, then detaches
      it. Carried packets of flows the node does not know, other than TCP SYNs, are recorded
      within the budgets a second (default 8192 TCP, 65536 UDP; over them delivered, their
      replies not rewritten).
      With --config FILE (the gateways' YAML file) the agent runs in file mode: direct server
      return only, for the backends of FILE on node NAME whose dsr is true; no apiserver, no
      socket load balancer; SIGHUP reloads FILE (an invalid one is logged, the last pairs
      stay).
`

func cli(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		fs := flag.NewFlagSet("xlb run", flag.ContinueOnError)
		fs.SetOutput(stderr)
		cfgPath := fs.String("config", "", "the YAML configuration `file` (required)")
		cleanup := fs.Bool("cleanup-on-exit", false, "on SIGTERM/SIGINT, detach and unpin everything instead of leaving forwarding in place")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *cfgPath == "" || fs.NArg() != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		// Catch SIGHUP first: its default action ends the process, and loading the datapath
		// takes a while. A SIGHUP that comes during start-up is handled (a reload) once running.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err := gateway.Run(ctx, gateway.Options{ConfigPath: *cfgPath, LoadDatapath: loadDatapath, Version: buildInfo().Version,
			CleanupOnExit: *cleanup, Reload: hup, Log: stderr})
		if err != nil {
			fmt.Fprintf(stderr, "xlb: %v\n", err)
			return 1
		}
		return 0
	case "cleanup":
		fs := flag.NewFlagSet("xlb cleanup", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pin := fs.String("pin-path", xdpgw.DefaultPinPath, "the bpffs `directory` xlb pinned into")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if err := cleanupPins(*pin); err != nil {
			fmt.Fprintf(stderr, "xlb cleanup: %v\n", err)
			return 1
		}
		return 0
	case "bgp":
		return bgpCLI(args[1:], os.Stdout, stderr)
	case "bfd":
		return bfdCLI(args[1:], os.Stdout, stderr)
	case "convert":
		return convertCLI(args[1:], os.Stdout, stderr)
	case "show":
		return showCLI(args[1:], os.Stdout, stderr)
	case "agent":
		fs := flag.NewFlagSet("xlb agent", flag.ContinueOnError)
		fs.SetOutput(stderr)
		var o agentOptions
		agentFlags(fs, &o)
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		fs.Visit(func(f *flag.Flag) { o.set = append(o.set, f.Name) })
		if o.config != "" {
			// File mode reloads on SIGHUP: catch it before the datapath's load, as xlb run does.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			o.reload = hup
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := runAgent(ctx, o, stderr); err != nil {
			fmt.Fprintf(stderr, "xlb agent: %v\n", err)
			return 1
		}
		return 0
	case "version", "--version":
		fs := flag.NewFlagSet("xlb version", flag.ContinueOnError)
		fs.SetOutput(stderr)
		asJSON := fs.Bool("json", false, "print JSON")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		printVersion(os.Stdout, buildInfo(), *asJSON)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return 0
	}
	fmt.Fprintf(stderr, "xlb: unknown command %q\n%s", args[0], usage)
	return 2
}

// cleanupPins removes everything pinned under dir (links first, so forwarding stops cleanly):
// the gateway's XDP datapath, a node agent's socket load balancer or its direct server return,
// whichever dir holds.
func cleanupPins(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// DSR first: its services and stats pins have the socket load balancer's names.
	if dsr.HasPins(dir) {
		return dsr.RemovePinned(dir)
	}
	if socklb.HasPins(dir) {
		return socklb.RemovePinned(dir)
	}
	// Any conntrack size and Maglev capacity: adopt whatever is pinned.
	d, err := xdpgw.LoadPinned(dir)
	if err != nil {
		return err
	}
	return d.Remove()
}
