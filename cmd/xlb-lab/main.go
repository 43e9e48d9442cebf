// SPDX-License-Identifier: Apache-2.0

// Command xlb-lab runs a whole xlb edge site in network namespaces on this machine (see
// docs/lab.md): clients behind a router, gateways running real xlb processes, a cluster L2 with
// nodes and pods serving HTTP, TCP and UDP.
//
//	xlb-lab up   [flags]   build the site, show that it works, keep it running until Ctrl-C
//	xlb-lab demo [flags]   build the site, show that it works, remove it and exit (non-zero on failure)
//	xlb-lab down [--all]   remove the leftovers of lab sites whose process is gone (--all: every site)
//	xlb-lab status         the running sites, as JSON
//	xlb-lab gateway NAME stop|kill|start|restart|vanish|return   act on a running site's gateway
//
// It needs root. `make lab` and `make lab-down` run it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/lab"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  xlb-lab up   [--xlb PATH] [--clients N] [--gateways N] [--nodes N] [--pods N] [--seed N] [--demo] [--detach]
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
      --detach starts the site in the background, prints its description (JSON: names,
      namespaces, addresses, pids, VIPs, the control socket) once it is up, and exits; the site
      runs until xlb-lab down --all (or SIGTERM to its process, the description's ownerPid).
  xlb-lab demo [same flags as up]
  xlb-lab status [--site PREFIX] [--state-dir DIR]
      Print the running sites' descriptions (JSON, one array), as their processes see them now.
  xlb-lab gateway NAME stop|kill|start|restart|vanish|return [--site PREFIX] [--state-dir DIR]
      Have the site's process act on gateway NAME (g1, g2...): stop (SIGTERM) or kill (SIGKILL)
      its xlb, start or restart it, make it fail hard (vanish: its links silenced with nftables
      where they arrive at the router and the cluster L2, its xlb SIGSTOPped) or come back
      (return). The site's process owns the restarted daemon: Ctrl-C or down removes it too.
      Prints the gateway's state (JSON). --site is needed when several sites run.
  xlb-lab down [--all] [--state-dir DIR]
      Remove what lab sites left behind (namespaces, pins, xlb processes, state) when their
      lab process is gone; --all removes running sites too (their process is asked first).
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
	case "status":
		return status(args[1:], stdout, stderr)
	case "gateway":
		return gateway(args[1:], stdout, stderr)
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
	detach := fs.Bool("detach", false, "run the site in the background; print its description (JSON) once it is up")
	routing := fs.String("routing", "bird", "how the router learns the VIPs: bird or frr (BGP from the gateways' xlb), or static")
	mode := fs.String("mode", "kubernetes", "where the gateways get their services: kubernetes (a control plane and the example Services) or file")
	forwarding := fs.String("forwarding", "dsr", "how replies reach the clients: dsr (direct server return through the node agents) or returnPath (through the gateways)")
	fs.IntVar(&o.TimeScale, "time-scale", 1, "multiply the start-up bounds (control plane, readiness, BGP) by `N` on a slow machine, e.g. 6 in a VM under software emulation")
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
	if *detach {
		if *demo {
			fmt.Fprintln(stderr, "xlb-lab: --detach and --demo exclude each other")
			return 2
		}
		return detached(args, stdout, stderr)
	}

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
	if err := site.WriteInfo(); err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
	}
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		if err := site.ServeControl(ctx); err != nil {
			fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		}
	}()
	fmt.Fprintf(stdout, "\nThe lab keeps running; press Ctrl-C to remove it. Scripts: xlb-lab status, xlb-lab gateway NAME ACTION.\n")
	<-ctx.Done()
	<-ctlDone
	return 0
}

// detached re-runs `xlb-lab up` with args (less --detach) in a session of its own, its output
// in a log file next to the sites' state, waits until its site is up (its site.json written)
// and prints that. It fails, with the log's tail, if the child exits first.
func detached(args []string, stdout, stderr io.Writer) int {
	var rest []string
	for _, a := range args {
		if a != "--detach" && a != "-detach" && a != "--detach=true" && a != "-detach=true" {
			rest = append(rest, a)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(lab.DefaultStateDir, 0o755); err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 1
	}
	logf, err := os.CreateTemp(lab.DefaultStateDir, "up-*.log")
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab: %v\n", err)
		return 1
	}
	defer logf.Close()
	cmd := exec.Command(exe, append([]string{"up"}, rest...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "xlb-lab: start the site's process: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Minute)
	for {
		dirs, _ := lab.RunningSites(lab.DefaultStateDir)
		for _, dir := range dirs {
			b, err := os.ReadFile(filepath.Join(dir, lab.SiteInfoFile))
			var in lab.SiteInfo
			if err == nil && json.Unmarshal(b, &in) == nil && in.OwnerPid == cmd.Process.Pid {
				stdout.Write(b)
				fmt.Fprintf(stderr, "xlb-lab: site %s is up (pid %d, its output in %s); remove it with xlb-lab down --all\n",
					in.Prefix, in.OwnerPid, logf.Name())
				return 0
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			fmt.Fprintf(stderr, "xlb-lab: the site's process exited (%v) before the site was up; its output:\n%s", err, tail(string(b), 40))
			return 1
		case <-deadline:
			fmt.Fprintf(stderr, "xlb-lab: the site is not up after 10 minutes (its output in %s)\n", logf.Name())
			return 1
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// siteFlags parses --site and --state-dir for status and gateway; it returns the control
// sockets of the running sites that match.
func siteFlags(name string, args []string, stderr io.Writer) (sockets []string, rest []string, code int) {
	fs := flag.NewFlagSet("xlb-lab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	site := fs.String("site", "", "the site's prefix (xl + 6 hex digits); needed when several run")
	dir := fs.String("state-dir", lab.DefaultStateDir, "where sites keep their state")
	// Flags may come after the positional arguments: parse what follows them too.
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, nil, 2
		}
		args = fs.Args()
		if len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	dirs, err := lab.RunningSites(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab %s: %v\n", name, err)
		return nil, nil, 1
	}
	for _, d := range dirs {
		if *site == "" || filepath.Base(d) == *site {
			sockets = append(sockets, filepath.Join(d, lab.ControlSocket))
		}
	}
	return sockets, pos, 0
}

func status(args []string, stdout, stderr io.Writer) int {
	sockets, pos, code := siteFlags("status", args, stderr)
	if code != 0 {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "xlb-lab status: unexpected %q\n", pos)
		return 2
	}
	out := []lab.SiteInfo{}
	for _, sock := range sockets {
		rep, err := lab.Control(sock, lab.ControlRequest{Op: "status"})
		if err != nil || rep.Site == nil {
			fmt.Fprintf(stderr, "xlb-lab status: %v\n", err)
			continue
		}
		out = append(out, *rep.Site)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

func gateway(args []string, stdout, stderr io.Writer) int {
	sockets, pos, code := siteFlags("gateway", args, stderr)
	if code != 0 {
		return code
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "xlb-lab gateway: want NAME ACTION (stop, kill, start, restart, vanish, return)\n")
		return 2
	}
	switch len(sockets) {
	case 0:
		fmt.Fprintln(stderr, "xlb-lab gateway: no running site (xlb-lab up, or --state-dir)")
		return 1
	case 1:
	default:
		fmt.Fprintf(stderr, "xlb-lab gateway: %d sites run: say which with --site\n", len(sockets))
		return 2
	}
	rep, err := lab.Control(sockets[0], lab.ControlRequest{Op: "gateway", Gateway: pos[0], Action: pos[1]})
	if err != nil {
		fmt.Fprintf(stderr, "xlb-lab gateway %s %s: %v\n", pos[0], pos[1], err)
		return 1
	}
	for _, g := range rep.Site.Gateways {
		if g.Name == pos[0] {
			b, _ := json.MarshalIndent(g, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		}
	}
	return 0
}
