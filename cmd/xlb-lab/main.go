// Command xlb-lab runs a whole xlb edge site in network namespaces on this machine (see
// docs/lab.md): clients behind a router, gateways running real xlb processes, a cluster L2 with
// nodes and pods serving HTTP, TCP and UDP.
//
//	xlb-lab up   [flags]   build the site, show that it works, keep it running until Ctrl-C
//	xlb-lab demo [flags]   build the site, show that it works, remove it and exit (non-zero on failure)
//	xlb-lab down [--all]   remove the leftovers of lab sites whose process is gone (--all: every site)
//
// It needs root. `make lab` and `make lab-down` run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/xlb-dev/xlb/internal/lab"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  xlb-lab up   [--xlb PATH] [--clients N] [--gateways N] [--nodes N] [--pods N] [--seed N] [--demo]
              [--routing bird|frr|static] [--mode kubernetes|file] [--forwarding dsr|returnPath]
      Build a lab site, show that it works, and keep it running until Ctrl-C (SIGINT/SIGTERM),
      then remove it. --demo (or the demo command) exits after the demonstration instead.
      --routing: the router learns the VIPs over BGP from the gateways' xlb, running BIRD
      (bird, the default) or FRR (frr), or has static ECMP routes (static).
      --mode: kubernetes (the default) runs etcd and kube-apiserver in a control namespace,
      applies deploy/examples/services.yaml, registers the nodes, keeps EndpointSlices for the
      pods, and the gateways' xlb hands the Services their VIPs; file gives the gateways one
      service "demo" in their config file instead.
      --forwarding: dsr (the default) is direct server return: the nodes' default route is
      the router and each node runs xlb agent with the node side of DSR, so replies bypass the
      gateways; returnPath routes the nodes' replies through the gateways, which translate them.
  xlb-lab demo [same flags as up]
  xlb-lab down [--all] [--state-dir DIR]
      Remove what lab sites left behind (namespaces, pins, xlb processes, state) when their
      lab process is gone; --all removes running sites too.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "up", "demo":
		return up(args[0], args[1:], stdout, stderr)
	case "down":
		fs := flag.NewFlagSet("xlb-lab down", flag.ContinueOnError)
		fs.SetOutput(stderr)
		all := fs.Bool("all", false, "also remove the sites of lab processes still running")
		dir := fs.String("state-dir", lab.DefaultStateDir, "where sites keep their state")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if err := lab.Down(*dir, *all, stdout); err != nil {
			fmt.Fprintf(stderr, "xlb-lab down: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "lab leftovers removed")
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "xlb-lab: unknown command %q\n%s", args[0], usage)
	return 2
}

func up(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb-lab "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o lab.Options
	xlb := fs.String("xlb", "", "the xlb `binary` the gateways run (default: xlb next to this program)")
	fs.IntVar(&o.Clients, "clients", 1, "client namespaces")
	fs.IntVar(&o.Gateways, "gateways", 2, "gateways (each runs xlb)")
	fs.IntVar(&o.Nodes, "nodes", 2, "nodes")
	fs.IntVar(&o.Pods, "pods", 5, "pods (backends), round robin over the nodes")
	seed := fs.Uint("seed", 0x5eed, "the datapath hash seed (the same on every gateway)")
	demo := fs.Bool("demo", cmd == "demo", "exit after the demonstration")
	routing := fs.String("routing", "bird", "how the router learns the VIPs: bird or frr (BGP from the gateways' xlb), or static")
	mode := fs.String("mode", "kubernetes", "where the gateways get their services: kubernetes (a control plane and the example Services) or file")
	forwarding := fs.String("forwarding", "dsr", "how replies reach the clients: dsr (direct server return through the node agents) or returnPath (through the gateways)")
	datapaths := fs.String("datapath", "xdp", "each gateway's datapath, comma-separated in gateway order (the last one repeats): xdp or afxdp, e.g. xdp,afxdp")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for i, k := range strings.Split(*datapaths, ",") {
		if k != "xdp" && k != "afxdp" {
			fmt.Fprintf(stderr, "xlb-lab: --datapath: gateway %d: unknown datapath %q (want xdp or afxdp)\n", i+1, k)
			return 2
		}
		o.Datapaths = append(o.Datapaths, k)
	}
	for len(o.Datapaths) < o.Gateways {
		o.Datapaths = append(o.Datapaths, o.Datapaths[len(o.Datapaths)-1])
	}
	switch *forwarding {
	case "dsr":
	case "returnPath":
		o.ReturnPath = true
	default:
		fmt.Fprintf(stderr, "xlb-lab: --forwarding: unknown mode %q (want dsr or returnPath)\n", *forwarding)
		return 2
	}
	r, err := lab.ParseRouting(*routing)
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 2
	}
	o.Routing = r
	if o.Mode, err = lab.ParseMode(*mode); err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 2
	}
	o.Seed = uint32(*seed)
	if *xlb == "" {
		exe, err := os.Executable()
		if err == nil {
			*xlb = filepath.Join(filepath.Dir(exe), "xlb")
		}
	}
	if _, err := os.Stat(*xlb); err != nil {
		fmt.Fprintf(stderr, "xlb-lab: the xlb binary: %v (build it: go build -o bin/xlb ./cmd/xlb, or run make lab)\n", err)
		return 1
	}
	o.XLB, _ = filepath.Abs(*xlb)
	o.Log = stdout

	// From here on a signal means: remove the site and exit. A closed stdout (`make lab | tee`
	// whose tee got the Ctrl-C too) must not kill the process in the middle of that: writes
	// then fail with EPIPE instead of raising SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	site, err := lab.New(o)
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 1
	}
	defer func() {
		fmt.Fprintf(stdout, "\nremoving site %s ...\n", site.Prefix)
		if err := site.Close(); err != nil {
			fmt.Fprintf(stderr, "xlb-lab: removing the site: %v (run: make lab-down)\n", err)
		}
	}()
	if ctx.Err() != nil {
		return 130
	}
	fmt.Fprintf(stdout, "\nxlb lab site %s is up (state, configs and xlb logs in %s)\n\n", site.Prefix, site.Dir)
	site.Describe(stdout)
	derr := site.Demo(ctx, stdout)
	if derr != nil {
		fmt.Fprintf(stderr, "\nxlb-lab: the demonstration failed: %v\n", derr)
	} else {
		fmt.Fprintf(stdout, "\nEverything answered through the VIPs.\n")
	}
	if *demo {
		if derr != nil {
			return 1
		}
		return 0
	}
	site.Guide(stdout)
	fmt.Fprintf(stdout, "\nThe lab keeps running; press Ctrl-C to remove it.\n")
	<-ctx.Done()
	return 0
}
