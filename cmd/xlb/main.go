// Command xlb is the xlb load-balancer appliance.
//
//	xlb run --config FILE    run the appliance from a YAML file (Kubernetes mode when the file
//	                         has a kubernetes section)
//	xlb cleanup [--pin-path DIR]
//	                         detach every program and remove every map and link xlb pinned
//	xlb show [services|flows|reasons|flow|agent]
//	                         show what the pinned XDP datapath is doing, from its maps
//	xlb bgp [--listen ADDR]  show the running daemon's BGP sessions and routes
//	xlb agent [--node NAME]  run the node agent: every Service's cluster IPs balanced at the
//	                         node's sockets (docs/agent.md)
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
	"github.com/xlb-dev/xlb/xdp"
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
  xlb cleanup [--pin-path DIR]
      Detach every program and remove every pin xlb (or xlb agent) made (default DIR:
      /sys/fs/bpf/xlb). Refused while an xlb run daemon holds DIR: stop it first.
  xlb show [services|flows|reasons] [--pin-path DIR] [--json] [--vip ADDR] [--limit N]
  xlb show flow --client ADDR:PORT --to VIP:PORT [--proto tcp|udp] [--seed N] [...]
  xlb show agent [--pin-path DIR] [--json]
      Show what the XDP datapath pinned in DIR (default /sys/fs/bpf/xlb) is doing, from its
      maps alone (read-only; no daemon needed): services with their backends' Maglev shares
      and counters, and the backends in no table (the default); conntrack entries (at most N,
      default 1000, 0: all; the most recently used first; expired ones are listed until the
      LRU reuses them); or the verdict counters. --vip keeps one VIP's services and flows.
      Port * is all ports (the client's port kept). flow explains where one flow's packets
      go: its frontend, source ranges, the Maglev slot of a new connection (the seed read from
      the attached program unless --seed) and its conntrack entry; run it on each gateway to
      see that they agree. agent shows a node agent's cluster-IP frontends, their endpoints
      and its counters (DIR default /sys/fs/bpf/xlb-agent).
  xlb bgp [--listen ADDR] [--json]
      Show the running daemon's BGP sessions and announced routes (from its /bgp endpoint;
      default ADDR: 127.0.0.1:9610, the default listen).
  xlb agent [--node NAME] [--kubeconfig FILE] [--cgroup DIR] [--listen ADDR]
            [--pin-path DIR] [--cleanup-on-exit] [--netns-dir DIR] [--max-sockets N]
      Run the node agent (one per node, e.g. as a DaemonSet): connections from the node's
      processes and Pods to a Service's cluster IP go straight to one of its endpoints
      (default NAME: $NODE_NAME; default cgroup: the cgroup v2 root; /metrics and /healthz on
      ADDR, default 127.0.0.1:9612, "" for none). Connected UDP sockets whose endpoint is
      removed are closed, in the agent's network namespace and the Pods' pinned in the netns
      DIR (default /run/netns). Its four LRU maps hold N entries each (default 262144, ~120
      MiB preallocated; 65536 takes ~30 MiB). SIGTERM/SIGINT stop it and, unless
      --cleanup-on-exit, leave balancing in place (pinned in /sys/fs/bpf/xlb-agent, adopted
      by the next agent; xlb cleanup --pin-path /sys/fs/bpf/xlb-agent removes it).
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
		err := gateway.Run(ctx, gateway.Options{ConfigPath: *cfgPath, LoadDatapath: loadDatapath,
			CleanupOnExit: *cleanup, Reload: hup, Log: stderr})
		if err != nil {
			fmt.Fprintf(stderr, "xlb: %v\n", err)
			return 1
		}
		return 0
	case "cleanup":
		fs := flag.NewFlagSet("xlb cleanup", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pin := fs.String("pin-path", xdp.DefaultPinPath, "the bpffs `directory` xlb pinned into")
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
	case "show":
		return showCLI(args[1:], os.Stdout, stderr)
	case "agent":
		fs := flag.NewFlagSet("xlb agent", flag.ContinueOnError)
		fs.SetOutput(stderr)
		var o agentOptions
		fs.StringVar(&o.node, "node", "", "this node's `name` (default $NODE_NAME)")
		fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: in-cluster)")
		fs.StringVar(&o.cgroup, "cgroup", "", "cgroup v2 `directory` whose processes are balanced (default: the root)")
		fs.StringVar(&o.listen, "listen", DefaultAgentListen, "`address` of /metrics and /healthz (\"\" for none)")
		fs.StringVar(&o.pinPath, "pin-path", socklb.DefaultPinPath, "bpffs `directory` of the pins (\"\" pins nothing: balancing stops with the agent)")
		fs.BoolVar(&o.cleanup, "cleanup-on-exit", false, "on SIGTERM/SIGINT, detach and unpin everything instead of leaving balancing in place")
		fs.IntVar(&o.sockets, "max-sockets", socklb.DefaultSockets, fmt.Sprintf("`entries` of each of the four LRU maps (live {socket, endpoint} pairs per protocol remembered; ~120 bytes each, preallocated: %d to %d; 0: the default)", socklb.MinSockets, socklb.MaxSockets))
		fs.StringVar(&o.netnsDir, "netns-dir", socklb.DefaultNetnsDir, "`directory` where the container runtime pins Pods' network namespaces: their connected UDP sockets to removed endpoints are closed (\"\" for the agent's own namespace only)")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if fs.NArg() != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := runAgent(ctx, o, stderr); err != nil {
			fmt.Fprintf(stderr, "xlb agent: %v\n", err)
			return 1
		}
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return 0
	}
	fmt.Fprintf(stderr, "xlb: unknown command %q\n%s", args[0], usage)
	return 2
}

// cleanupPins removes everything pinned under dir (links first, so forwarding stops cleanly).
func cleanupPins(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if socklb.HasPins(dir) {
		return socklb.RemovePinned(dir)
	}
	// Any conntrack size and Maglev capacity: adopt whatever is pinned.
	d, err := xdp.LoadPinned(dir)
	if err != nil {
		return err
	}
	return d.Remove()
}
