package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb/agent"
	"github.com/xlb-dev/xlb/lb/kube"
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
}

// DefaultAgentListen is where `xlb agent` serves /metrics and /healthz unless told otherwise.
const DefaultAgentListen = "127.0.0.1:9612"

// runAgent runs the node agent (lb/agent) until ctx ends: the socket load balancer attached to
// the node's cgroup, fed with every Service's cluster IPs. With a pin path the programs stay
// attached when it returns (cluster IPs stay balanced as last applied, and the next agent
// adopts the pins), unless opts.cleanup; without one they are detached.
func runAgent(ctx context.Context, opts agentOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if opts.node == "" {
		opts.node = os.Getenv("NODE_NAME")
	}
	if opts.node == "" {
		return errors.New("agent: no node name: pass --node or set NODE_NAME (from the Pod's spec.nodeName)")
	}
	cfg, err := kube.RestConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	if opts.pinPath == "" && socklb.HasPins(socklb.DefaultPinPath) {
		// Those programs would keep balancing from frozen maps, ahead of ours.
		return fmt.Errorf("agent: an earlier agent's programs are still pinned in %s: remove them with xlb cleanup --pin-path %s, or run with that pin path",
			socklb.DefaultPinPath, socklb.DefaultPinPath)
	}
	var ln net.Listener
	if opts.listen != "" {
		if ln, err = net.Listen("tcp", opts.listen); err != nil {
			return fmt.Errorf("agent: listen on %s: %w", opts.listen, err)
		}
	}
	dp, err := socklb.Load(socklb.Options{Cgroup: opts.cgroup, PinPath: opts.pinPath, Sockets: opts.sockets})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return err
	}
	if r := dp.Replaced(); r != nil {
		log.Warn("replaced the pinned socket load balancer instead of adopting it", "pin_path", opts.pinPath, "reason", r)
	}
	if n := dp.Frontends(); n > 0 {
		log.Info("adopted the pinned socket load balancer", "pin_path", opts.pinPath, "frontends", n)
	}
	if err := dp.ReapUDPErr(); err != nil {
		log.Warn("connected UDP sockets will keep a removed endpoint until their application closes them", "err", err)
	}
	// Run owns dp from here: it closes it, or removes it, when it returns.
	return agent.Run(ctx, agent.Options{
		Node:     opts.node,
		Client:   client,
		Datapath: dp,
		PinPath:  opts.pinPath,
		Cleanup:  opts.cleanup,
		Listener: ln,
		NetnsDir: opts.netnsDir,
		Log:      log,
	})
}
