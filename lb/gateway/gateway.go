// SPDX-License-Identifier: Apache-2.0

// Package gateway is the appliance's control loop, what `xlb run` runs on a gateway host: the
// sources of desired state (the YAML file's services and, in Kubernetes mode, the cluster's
// LoadBalancer Services) with their health-check verdicts and the backend warm-up → the lb
// model's plan → the reconciler → the datapath, then the announcements that follow from it
// (BGP routes of the VIPs that can be served), reloads, metrics, readiness and status.
//
// It knows the datapath only through the contract (datapath.Gateway): cmd/xlb wires in the XDP
// or the AF_XDP datapath, the tests the pure-Go balancer. One goroutine (the loop) owns
// reconciliation; health changes, Kubernetes events, reloads and warm-up timers only wake it.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/bgp/speaker"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/health"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Options configure a gateway. ConfigPath and LoadDatapath are required by Run.
type Options struct {
	// ConfigPath is the YAML configuration file (xlb run --config); a reload reads it again.
	ConfigPath string
	// LoadDatapath loads the datapath the configuration asks for (datapath.kind): cmd/xlb's
	// loader gives the XDP or the AF_XDP datapath.
	LoadDatapath func(cfg *config.Config, log *slog.Logger) (datapath.Gateway, error)
	// CleanupOnExit makes a stop remove the datapath (programs detached, pins removed) and
	// withdraw the routes, instead of leaving forwarding in place.
	CleanupOnExit bool
	// Reload delivers reload requests (SIGHUP): each reads ConfigPath again. Nil: none.
	Reload <-chan os.Signal
	// Log is where the gateway logs, in the configuration's format and level. Nil: os.Stderr.
	Log io.Writer
	// Listener, if set, serves /metrics, /healthz, /readyz and /bgp in place of the
	// configuration's listen address (tests).
	Listener net.Listener
	// KubeClient, if set, is the Kubernetes client of Kubernetes mode in place of one built
	// from kubernetes.kubeconfig (tests and benchmarks).
	KubeClient kubernetes.Interface
	// KubeDynamic, if set with KubeClient, is the client of xlb.dev objects (AddressPool,
	// GatewayStatus); nil with KubeClient set means none are watched or written.
	KubeDynamic dynamic.Interface
	// Version is xlb's version, reported on the gateway's GatewayStatus object.
	Version string
}

// Run runs the appliance until ctx ends: it loads ConfigPath, loads and attaches the datapath,
// and runs a Gateway on it. At the end the datapath is closed (its pins keep forwarding) or,
// with CleanupOnExit, removed; the routes are withdrawn first, or kept for graceful restart
// (bgp.withdrawOnExit).
func Run(ctx context.Context, opts Options) error {
	// A reload requested during start-up is handled once running (opts.Reload buffers it).
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	log := newLogger(cfg.Log, opts.Log)
	var site siteState
	if opts.KubeClient == nil {
		site = startSite(cfg, log)
	}
	dp, err := opts.LoadDatapath(cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if opts.CleanupOnExit {
			if err := dp.Remove(); err != nil {
				log.Error("cleanup", "error", err)
			}
			log.Info("stopped; programs detached and pins removed", "datapath", cfg.Datapath.Kind)
			return
		}
		dp.Close()
		if dp.Persistent() {
			log.Info("stopped; forwarding continues from the pinned datapath")
		} else {
			log.Info("stopped; the AF_XDP datapath stopped with the process")
		}
	}()
	if err := attach(dp, cfg, log); err != nil {
		return err
	}
	g, err := New(cfg, dp, log, opts)
	if err != nil {
		return err
	}
	g.site = site
	return g.Run(ctx)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level}
	if c.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// attach attaches dp to the configured interfaces and detaches it from those no longer
// configured, carrying on past a failure so one bad interface does not block the others.
func attach(dp datapath.Gateway, cfg *config.Config, log *slog.Logger) error {
	var errs []error
	want := map[string]bool{}
	for _, i := range cfg.Interfaces {
		want[i.Name] = true
		if err := dp.Attach(i.Name, i.Mode, i.Role); err != nil {
			errs = append(errs, err)
		}
	}
	have, err := dp.Interfaces()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range have {
		if !want[n] {
			if err := dp.Detach(n); err != nil {
				errs = append(errs, err)
				continue
			}
			log.Info("detached", "interface", n)
		}
	}
	return errors.Join(errs...)
}

// Gateway is one appliance: a configuration served on a datapath. Reconcile is its one
// reconcile pass; Run runs it with its loop, health checks, BGP speaker, Kubernetes controller
// and HTTP server.
type Gateway struct {
	log     *slog.Logger
	opts    Options
	dp      datapath.Gateway
	rec     *reconcile.Reconciler
	checker *health.Checker
	coll    *datapathCollector
	reg     *prometheus.Registry

	// planOpts are the plan settings the datapath was loaded with (seed, table size): like the
	// datapath's, they change only at a restart, so a reload cannot remap every flow twice. The
	// forwarding mode is not among them: a reload applies the config's (plan).
	planOpts lb.PlanOptions

	mu  sync.Mutex
	cfg *config.Config // the config being served (the last valid one)
	// known: backend endpoints the datapath already serves (that take new flows: in a Maglev
	// table). A health-checked backend whose first probe has not finished counts as healthy if it
	// is known (a restarted daemon must not pull every backend out of service), and as unhealthy
	// if it is not (new, or out of service). Replaced after each successful apply.
	known map[netip.AddrPort]bool

	wake  chan struct{}
	ready atomic.Bool

	reconciles      *prometheus.CounterVec
	reconcileTime   prometheus.Histogram
	configReloads   *prometheus.CounterVec
	servicesInvalid prometheus.Gauge
	serving         *prometheus.GaugeVec
	// localVIPs: VIPs found among the gateway's own addresses, warned about once (under mu).
	localVIPs map[netip.Addr]bool
	// down: frontends that had no backend taking new flows at the last reconcile (logged on change).
	down map[datapath.Frontend]bool

	// speaker announces the VIPs over BGP; nil when the config has no bgp section.
	speaker *speaker.Speaker
	// running is set (under mu) once the start has succeeded, just before the main loop.
	running bool
	// bgpCfg is the bgp section the speaker serves (under mu): its peers and route attributes
	// follow reloads, its routerID, asn, listenPort and gracefulRestart are the start's.
	bgpCfg *config.BGP
	// announced: the VIP prefixes of the last SetRoutes (loop goroutine only, for the log).
	announced map[netip.Prefix]bool

	// l2 is L2 mode's announcer (config section l2), nil otherwise.
	l2 *l2Mode

	// warm holds back backends new to a serving service (loop goroutine only).
	warm warmup
	// warmTimer wakes the loop when the first held-back backend is due.
	warmTimer *time.Timer

	// kube is Kubernetes mode (config section kubernetes), nil otherwise: its Services join the
	// file's in every reconcile.
	kube *kubeMode
	// report is what the last reconcile did (under mu), for the GatewayStatus object.
	report report
	// reporter writes the GatewayStatus object in Kubernetes mode; nil otherwise.
	reporter *kube.StatusReporter
	// peers follows the BGPPeer objects that select this gateway (Kubernetes mode); nil
	// otherwise. peersChanged tells Run to apply them.
	peers        *kube.PeerSource
	peersChanged chan struct{}
	// peerProblems are the BGPPeers not used, last time they were applied (under mu).
	peerProblems []string
	// site is the SiteSettings object in use (under mu); siteChanged tells Run to reload.
	site        siteState
	siteChanged chan struct{}
	// started are the datapath settings the datapath was loaded with (the timeouts a
	// SiteSettings change waits a restart for).
	started datapath.Settings
}

// New returns a gateway serving cfg on dp, attached already, adopting the state dp holds (an
// earlier process's pinned maps): its reconciler, health checker and metrics. It starts
// nothing: Run does, and Reconcile runs one pass.
func New(cfg *config.Config, dp datapath.Gateway, log *slog.Logger, opts Options) (*Gateway, error) {
	g := &Gateway{log: log, opts: opts, dp: dp, cfg: cfg, planOpts: cfg.PlanOptions(), wake: make(chan struct{}, 1),
		peersChanged: make(chan struct{}, 1), siteChanged: make(chan struct{}, 1), started: cfg.Datapath.Settings.WithDefaults()}
	warnSharedEndpoints(log, cfg.Services, cfg.Datapath.Forwarding)
	var err error
	if g.rec, err = reconcile.New(dp, log); err != nil {
		return nil, err
	}
	g.known = g.rec.Serving()
	g.checker = health.New(health.Options{Logger: log, OnChange: func(u health.Update) {
		log.Info("backend health changed", "target", u.Key, "health", u.Health.String(), "reason", u.Reason)
		g.trigger()
	}})
	if err := g.checker.Set(healthTargets(cfg)); err != nil {
		return nil, fmt.Errorf("health checks: %w", err)
	}
	g.newMetrics()
	return g, nil
}

// Run runs the gateway until ctx ends: it starts the BGP speaker and the Kubernetes controller
// that the configuration asks for, the HTTP server, the health checker and the loop, and
// handles reloads. When ctx ends it stops them, withdrawing the routes or leaving them for
// graceful restart; the datapath is the caller's.
func (g *Gateway) Run(ctx context.Context) error {
	cfg := g.cfg
	if cfg.BGP != nil {
		if err := g.startBGP(ctx, cfg.BGP); err != nil {
			return err
		}
		// Deferred first, so it runs last: after the loop stopped, the routes are withdrawn (or
		// left for graceful restart) before the caller closes or removes the datapath.
		defer g.stopBGP(g.opts.CleanupOnExit)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if cfg.L2 != nil {
		name := "gateway"
		if cfg.Kubernetes != nil {
			name, _ = cfg.Kubernetes.Identity()
		} else if h, err := os.Hostname(); err == nil {
			name = h
		}
		m, err := newL2Mode(cfg.L2, name, g.log, g.reg)
		if err != nil {
			return err
		}
		g.l2 = m
		wg.Add(1)
		go func() { defer wg.Done(); m.run(ctx) }()
		g.log.Info("l2: announcing VIPs by ARP and NDP", "interface", cfg.L2.Interface, "address", cfg.L2.Address,
			"peers", len(cfg.L2.Peers), "dead_after", cfg.L2.DeadAfter(), "failback", cfg.L2.Failback)
	}
	if cfg.Kubernetes != nil {
		if err := g.startKube(ctx, cfg, &wg); err != nil {
			return err
		}
	}
	g.registerStarted()
	srv, err := g.serveHTTP(cfg.Listen)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())

	wg.Add(2)
	go func() { defer wg.Done(); g.checker.Run(ctx) }()
	go func() { defer wg.Done(); g.loop(ctx) }()
	if g.speaker != nil {
		wg.Add(1)
		go func() { defer wg.Done(); watchSessions(ctx, g.speaker, g.log) }()
	}

	g.mu.Lock()
	g.running = true
	g.mu.Unlock()
	g.log.Info("xlb running", "config", g.opts.ConfigPath, "services", len(cfg.Services), "listen", cfg.Listen)
	g.trigger()
	for {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil
		case <-g.opts.Reload:
			g.reload()
		case <-g.peersChanged:
			g.applyPeers()
		case <-g.siteChanged:
			g.reload()
		}
	}
}
