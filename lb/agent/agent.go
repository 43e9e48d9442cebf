// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Options configure Run. The agent runs in one of two modes:
//   - Kubernetes mode (Client set): every Service's cluster IPs balanced by Datapath, the socket
//     load balancer, and with DSR the pairs of the node's endpoints of the gateways'
//     LoadBalancer Services, the capability published on the node's Node;
//   - file mode (ConfigPath set): DSR only, its pairs from the gateways' YAML file (the
//     backends on Node), no socket load balancer and no apiserver.
type Options struct {
	// Node is the name of the node the agent runs on (internalTrafficPolicy: Local; the
	// endpoints and backends that are local); required.
	Node string
	// Client talks to the apiserver; Kubernetes mode.
	Client kubernetes.Interface
	// Datapath is the node's socket load balancer, loaded and attached; required in Kubernetes
	// mode, none in file mode. Run owns it: when Run returns, whatever happened, it closes it,
	// or removes it with Cleanup or without PinPath.
	Datapath datapath.SocketLB
	// PinPath is where Datapath is pinned, for the log; "" means nothing is pinned: balancing
	// stops with the agent, so Run removes the datapath at exit as with Cleanup.
	PinPath string
	// Cleanup removes the datapaths at exit (cluster IPs are no longer balanced on the node, no
	// carrier is accepted, and in Kubernetes mode the Node's AnnotationDSR is withdrawn first)
	// instead of leaving them serving as last applied.
	Cleanup bool
	// Listener, if not nil, serves /metrics and /healthz until Run returns; Run closes it.
	Listener net.Listener
	// NetnsDir is where the container runtime pins Pods' network namespaces: the connected UDP
	// sockets of removed endpoints are closed there and in the agent's own namespace ("" for
	// the agent's own only).
	NetnsDir string
	// DSR, if set, runs the node side of direct server return; nil leaves it off (in
	// Kubernetes mode the Node's annotation is then withdrawn, if an earlier agent left it).
	// Required in file mode. Run owns DSR.Datapath as it owns Datapath.
	DSR *DSROptions
	// Class and DefaultClass say which LoadBalancer Services are the gateways' (their
	// kubernetes.loadBalancerClass and defaultClass), for DSR in Kubernetes mode; "" means
	// kube.DefaultClass.
	Class        string
	DefaultClass bool
	// Policy says which external and load-balancer addresses of the Services are balanced
	// besides their cluster IPs (--service-cidr, --external-ip-allow; Kubernetes mode). The
	// zero value balances no external IP, and load-balancer addresses outside the cluster's
	// ServiceCIDR objects.
	Policy kube.AddressPolicy
	// ConfigPath is the gateways' YAML file (lb/config) in file mode: the pairs are those of
	// its services' backends on Node whose dsr is true (lb.DSRServices).
	ConfigPath string
	// Reload delivers reload requests in file mode (SIGHUP): each reads ConfigPath again; an
	// invalid file is logged and the last good pairs keep serving. Nil: none.
	Reload <-chan os.Signal
	// Log receives what the agent does; nil discards it.
	Log *slog.Logger
}

// Run runs the node agent until ctx ends, starting from what its datapaths hold (an earlier
// agent's pins are adopted, not wiped). It returns nil when ctx ends, or the error that kept it
// from starting.
func Run(ctx context.Context, opts Options) error {
	if opts.Listener != nil {
		defer opts.Listener.Close()
	}
	a, err := newAgent(opts)
	if err != nil {
		return err
	}
	defer a.stop()
	if opts.Listener != nil {
		h, err := a.handler()
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(opts.Listener)
		defer srv.Close()
		a.log.Info("serving /metrics and /healthz", "addr", opts.Listener.Addr().String())
	}
	// The rescan uses the DSR datapath: it ends before stop closes it.
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if a.dsr != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.dsr.rescanLoop(rctx) }()
	}
	if opts.ConfigPath != "" {
		a.log.Info("node agent started (file mode: direct server return only)", "node", opts.Node, "config", opts.ConfigPath)
		return a.runFile(ctx)
	}
	a.ctx = ctx
	if a.dsr == nil {
		wctx, wcancel := context.WithTimeout(ctx, withdrawTimeout)
		a.withdrawDSR(wctx, "direct server return is off on this node (no --dsr-interface)")
		wcancel()
	}
	ka, err := kube.NewAgent(opts.Client, a.kubeOptions())
	if err != nil {
		return err
	}
	a.log.Info("node agent started", "node", opts.Node, "dsr", a.dsr != nil)
	return ka.Run(ctx)
}

// agent is one Run's state.
type agent struct {
	opts Options
	log  *slog.Logger
	dp   datapath.SocketLB // nil in file mode
	rec  *reconcile.ConnectReconciler
	dsr  *dsrSide        // nil: direct server return off
	ctx  context.Context // Run's, for the Node writes of kube.Agent's callbacks (which get none)

	mu        sync.Mutex     // guards dp between apply and /metrics
	applied   atomic.Bool    // a plan was applied: /healthz answers 200
	udpClosed atomic.Uint64  // connected UDP sockets closed
	refused   map[string]int // Services with something not balanced, by reason (kube.ClusterIPs.Refused; guarded by mu)

	// Kubernetes mode with DSR (the informers' goroutine only):
	clusterLocal []netip.Prefix // the addresses of this node's endpoints of every Service
	podCIDRs     []netip.Prefix // the Node's spec.podCIDRs, once read
	nodeRead     bool           // the Node was read (podCIDRs)
	nodeErr      string         // the error of reading it, as last logged
	published    bool           // AnnotationDSR is on the Node
}

// newAgent checks opts for its mode and adopts what the datapaths hold. When it fails, the
// datapaths are stopped (see Options.Datapath).
func newAgent(opts Options) (*agent, error) {
	a := &agent{opts: opts, log: opts.Log, dp: opts.Datapath}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	var err error
	switch {
	case opts.Node == "":
		err = errors.New("agent: no node name")
	case opts.ConfigPath != "":
		if opts.Datapath != nil {
			err = errors.New("agent: file mode runs no socket load balancer")
		} else if opts.DSR == nil {
			err = errors.New("agent: file mode serves direct server return only, and has no DSR datapath (--dsr-interface)")
		}
	case opts.Client == nil:
		err = errors.New("agent: no kubernetes client")
	case opts.Datapath == nil:
		err = errors.New("agent: no datapath")
	}
	if err == nil && a.dp != nil {
		if a.rec, err = reconcile.NewConnect(a.dp, a.log); err != nil {
			err = fmt.Errorf("agent: %w", err)
		}
	}
	if err == nil && opts.DSR != nil {
		a.dsr, err = newDSRSide(*opts.DSR, a.log)
	}
	if err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// kubeOptions are the options of the Kubernetes watcher.
func (a *agent) kubeOptions() kube.AgentOptions {
	o := kube.AgentOptions{Node: a.opts.Node, Log: a.log, Apply: a.apply, Class: a.opts.Class, DefaultClass: a.opts.DefaultClass,
		Policy: a.opts.Policy}
	if a.dsr != nil {
		o.LoadBalancers = a.applyLoadBalancers
	}
	return o
}

// apply applies a pass's plan (kube.AgentOptions.Apply). Its error, a frontend that could not
// be written, has the plan applied again later.
func (a *agent) apply(pass kube.ClusterIPs) error {
	models := pass.Services
	a.mu.Lock()
	a.refused = pass.Refused
	res, err := a.rec.Apply(pass.Plan)
	frontends := a.rec.Frontends()
	a.mu.Unlock()
	if res.Changes() > 0 {
		a.log.Info("cluster IPs applied", "frontends", frontends, "added", res.Added, "updated", res.Updated, "removed", res.Removed)
	}
	if res.UDPLost > 0 {
		// Endpoints left UDP frontends: their connected sockets go.
		a.udpClosed.Add(uint64(a.closeLostUDP()))
	}
	if a.dsr != nil {
		// Every local endpoint is a Pod a client Pod of the hairpin may be (with the Pod CIDRs).
		a.clusterLocal = localTargets(models, a.isLocal)
	}
	// Healthy once applied, even with frontends that could not be written (they are retried,
	// and the rest serve): a liveness probe restarting the agent for a bad Service would help
	// nobody.
	a.applied.Store(true)
	return err
}

// isLocal reports whether b runs on this node.
func (a *agent) isLocal(b lb.Backend) bool { return b.Node == a.opts.Node }

// stop stops the datapaths: each is closed, and keeps serving as last applied, or removed
// with Cleanup or when it is not pinned. The Node's annotation is withdrawn before the DSR
// datapath is removed, so that the gateways stop carrying first.
func (a *agent) stop() {
	if a.opts.DSR != nil && a.opts.DSR.Datapath != nil {
		remove := a.opts.Cleanup || a.opts.DSR.PinPath == ""
		if remove && a.opts.ConfigPath == "" && a.opts.Client != nil && a.opts.Node != "" {
			ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
			a.withdrawDSR(ctx, "direct server return removed from this node")
			cancel()
		}
		if a.dsr != nil {
			a.dsr.stop(remove)
		} else if remove { // newAgent failed before the side was made
			a.opts.DSR.Datapath.Remove()
		} else {
			a.opts.DSR.Datapath.Close()
		}
	}
	if a.dp == nil {
		return
	}
	if a.opts.Cleanup || a.opts.PinPath == "" {
		if err := a.dp.Remove(); err != nil {
			a.log.Error("detaching the socket load balancer", "err", err)
		}
		a.log.Info("node agent stopped: cluster IPs are no longer balanced on this node")
		return
	}
	if err := a.dp.Close(); err != nil {
		a.log.Error("closing the socket load balancer", "err", err)
	}
	a.log.Info("node agent stopped: cluster IPs stay balanced as last applied", "pin_path", a.opts.PinPath)
}
