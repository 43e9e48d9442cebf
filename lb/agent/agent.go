package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Options configure Run.
type Options struct {
	// Node is the name of the node the agent runs on (for internalTrafficPolicy: Local);
	// required.
	Node string
	// Client talks to the apiserver; required.
	Client kubernetes.Interface
	// Datapath is the node's socket load balancer, loaded and attached; required. Run owns
	// it: when Run returns, whatever happened, it closes it, or removes it with Cleanup or
	// without PinPath.
	Datapath datapath.SocketLB
	// PinPath is where Datapath is pinned, for the log; "" means nothing is pinned: balancing
	// stops with the agent, so Run removes the datapath at exit as with Cleanup.
	PinPath string
	// Cleanup removes the datapath at exit (cluster IPs are no longer balanced on the node)
	// instead of leaving it balancing as last applied.
	Cleanup bool
	// Listener, if not nil, serves /metrics and /healthz until Run returns; Run closes it.
	Listener net.Listener
	// NetnsDir is where the container runtime pins Pods' network namespaces: the connected UDP
	// sockets of removed endpoints are closed there and in the agent's own namespace ("" for
	// the agent's own only).
	NetnsDir string
	// Log receives what the agent does; nil discards it.
	Log *slog.Logger
}

// Run runs the node agent until ctx ends: every Service's cluster IPs balanced by
// opts.Datapath, starting from what it holds (an earlier agent's pins are adopted, not
// wiped). It returns nil when ctx ends, or the error that kept it from starting.
func Run(ctx context.Context, opts Options) error {
	if opts.Listener != nil {
		defer opts.Listener.Close()
	}
	if opts.Datapath == nil {
		return errors.New("agent: no datapath")
	}
	a, err := newAgent(opts)
	if err != nil {
		return err
	}
	defer a.stop()
	ka, err := kube.NewAgent(opts.Client, kube.AgentOptions{Node: opts.Node, Log: a.log, Apply: a.apply})
	if err != nil {
		return err
	}
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
	a.log.Info("node agent started", "node", opts.Node)
	return ka.Run(ctx)
}

// agent is one Run's state.
type agent struct {
	opts Options
	log  *slog.Logger
	dp   datapath.SocketLB
	rec  *reconcile.ConnectReconciler

	mu        sync.Mutex    // guards dp between apply and /metrics
	applied   atomic.Bool   // a plan was applied: /healthz answers 200
	udpClosed atomic.Uint64 // connected UDP sockets closed
	lastErrs  string        // the planning errors last logged (apply's goroutine only)
}

// newAgent adopts what opts.Datapath holds. When it fails, the datapath is stopped (see
// Options.Datapath).
func newAgent(opts Options) (*agent, error) {
	a := &agent{opts: opts, log: opts.Log, dp: opts.Datapath}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if opts.Client == nil {
		err = errors.New("agent: no kubernetes client")
	} else if a.rec, err = reconcile.NewConnect(a.dp, a.log); err != nil {
		err = fmt.Errorf("agent: %w", err)
	}
	if err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// apply plans models and applies the plan (kube.AgentOptions.Apply). Its error, a frontend
// that could not be written, has the plan applied again later.
func (a *agent) apply(models []lb.Service) error {
	plan, errs := lb.PlanConnect(models)
	if msg := joinErrors(errs); msg != a.lastErrs {
		a.lastErrs = msg
		for _, e := range errs {
			a.log.Warn("service not balanced", "err", e)
		}
	}
	a.mu.Lock()
	res, err := a.rec.Apply(plan)
	frontends := a.rec.Frontends()
	a.mu.Unlock()
	if res.Changes() > 0 {
		a.log.Info("cluster IPs applied", "frontends", frontends, "added", res.Added, "updated", res.Updated, "removed", res.Removed)
	}
	if res.UDPLost > 0 {
		// Endpoints left UDP frontends: their connected sockets go.
		a.udpClosed.Add(uint64(a.closeLostUDP()))
	}
	// Healthy once applied, even with frontends that could not be written (they are retried,
	// and the rest serve): a liveness probe restarting the agent for a bad Service would help
	// nobody.
	a.applied.Store(true)
	return err
}

// stop closes the datapath, or removes it with Cleanup or without a pin path, and says what
// balancing is left on the node.
func (a *agent) stop() {
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

// joinErrors is the errors' texts, one per line.
func joinErrors(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}
