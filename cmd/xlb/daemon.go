package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/bgp/speaker"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/health"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// daemon is the standalone appliance: config file -> model (+ health) -> plan -> reconciler ->
// datapath. One goroutine (loop) owns reconciliation; everything else only wakes it.
type daemon struct {
	log     *slog.Logger
	cfgPath string
	dp      gatewayDatapath
	rec     *reconcile.Reconciler
	checker *health.Checker
	coll    *datapathCollector

	// planOpts are the plan settings the datapath was loaded with (seed, table size): like the
	// datapath's, they change only at a restart, so a reload cannot remap every flow twice.
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

	// warm holds back backends new to a serving service (loop goroutine only).
	warm warmup
	// warmTimer wakes the loop when the first held-back backend is due.
	warmTimer *time.Timer

	// kube is Kubernetes mode (config section kubernetes), nil otherwise: its Services join the
	// file's in every reconcile.
	kube *kubeMode
}

func runDaemon(ctx context.Context, cfgPath string, cleanupOnExit bool, stderr io.Writer) error {
	// Catch SIGHUP first: its default action ends the process, and loading the datapath takes a
	// while. A SIGHUP that comes during start-up is handled (a reload) once running.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	dp, err := loadDatapath(cfg, log)
	if err != nil {
		return err
	}
	d := &daemon{log: log, cfgPath: cfgPath, dp: dp, cfg: cfg, planOpts: cfg.PlanOptions(), known: map[netip.AddrPort]bool{},
		wake: make(chan struct{}, 1)}
	warnSharedEndpoints(log, cfg.Services)
	defer func() {
		if cleanupOnExit {
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
	if err := d.attach(cfg); err != nil {
		return err
	}
	if d.rec, err = reconcile.New(dp, log); err != nil {
		return err
	}
	d.known = servingBackends(dp)
	d.checker = health.New(health.Options{Logger: log, OnChange: func(u health.Update) {
		log.Info("backend health changed", "target", u.Key, "health", u.Health.String(), "reason", u.Reason)
		d.trigger()
	}})
	if err := d.checker.Set(healthTargets(cfg)); err != nil {
		return fmt.Errorf("health checks: %w", err)
	}

	if cfg.BGP != nil {
		if err := d.startBGP(ctx, cfg.BGP); err != nil {
			return err
		}
		// Registered after the datapath's deferred close, so it runs first: the routes are
		// withdrawn (or left for graceful restart) before the datapath is closed or removed.
		defer d.stopBGP(cleanupOnExit)
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if cfg.Kubernetes != nil {
		if err := d.startKube(ctx, cfg, &wg); err != nil {
			return err
		}
	}

	reg := prometheus.NewRegistry()
	d.registerMetrics(reg)
	srv, err := d.serveHTTP(cfg.Listen, reg)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())

	wg.Add(2)
	go func() { defer wg.Done(); d.checker.Run(ctx) }()
	go func() { defer wg.Done(); d.loop(ctx) }()
	if d.speaker != nil {
		wg.Add(1)
		go func() { defer wg.Done(); watchSessions(ctx, d.speaker, log) }()
	}

	d.mu.Lock()
	d.running = true
	d.mu.Unlock()
	log.Info("xlb running", "config", cfgPath, "services", len(cfg.Services), "listen", cfg.Listen)
	d.trigger()
	for {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil
		case <-hup:
			d.reload()
		}
	}
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level}
	if c.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// attach attaches to the configured interfaces and detaches from those no longer configured,
// carrying on past a failure so one bad interface does not block the others.
func (d *daemon) attach(cfg *config.Config) error {
	var errs []error
	want := map[string]bool{}
	for _, i := range cfg.Interfaces {
		want[i.Name] = true
		if err := d.dp.Attach(i.Name, i.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	have, err := d.dp.Interfaces()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range have {
		if !want[n] {
			if err := d.dp.Detach(n); err != nil {
				errs = append(errs, err)
				continue
			}
			d.log.Info("detached", "interface", n)
		}
	}
	return errors.Join(errs...)
}

// promLog sends the metrics handler's errors to the daemon's log.
type promLog struct{ log *slog.Logger }

func (l promLog) Println(v ...any) { l.log.Error("metrics", "error", fmt.Sprint(v...)) }

// wakeAt makes the loop reconcile at t (loop goroutine only).
func (d *daemon) wakeAt(t time.Time) {
	if d.warmTimer != nil {
		d.warmTimer.Stop()
	}
	d.warmTimer = time.AfterFunc(time.Until(t)+time.Millisecond, d.trigger)
}

// trigger asks the loop to reconcile.
func (d *daemon) trigger() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop reconciles whenever woken, and retries failures with backoff.
func (d *daemon) loop(ctx context.Context) {
	backoff := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-retry:
		}
		if err := d.reconcile(); err != nil {
			backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
			d.log.Error("reconcile failed; will retry", "error", err, "retry_in", backoff)
			retry = time.After(backoff)
			continue
		}
		backoff, retry = 0, nil
	}
}

// reconcile plans the current config with the current health and applies it.
func (d *daemon) reconcile() error {
	start := time.Now()
	if d.kube != nil && !d.kube.ctrl.Synced() {
		// Until every Service is modelled, applying would tear down the forwarding of those
		// not modelled yet (a restart keeps it in the pinned maps): wait.
		return nil
	}
	d.mu.Lock()
	cfg := d.cfg
	services, pending := d.withHealth(cfg)
	known := d.known // replaced, never changed in place
	d.mu.Unlock()
	if d.kube != nil {
		services = append(services, d.kube.ctrl.Services()...)
		d.syncKubeRoutes(d.log)
	}
	services, due := d.warm.apply(services, known, warmupOf(cfg.Datapath), time.Now())
	if !due.IsZero() {
		d.wakeAt(due)
	}
	desired, errs := lb.Plan(services, d.planOpts)
	d.servicesInvalid.Set(float64(len(errs)))
	for _, err := range errs {
		d.log.Error("service not served", "error", err)
	}
	res, err := d.rec.Apply(desired)
	d.reconcileTime.Observe(time.Since(start).Seconds())
	names := map[datapath.Frontend]string{}
	down := map[datapath.Frontend]bool{}
	d.serving.Reset()
	for f, p := range desired.Frontends {
		names[datapath.Frontend{Addr: f.Addr, Port: f.Port, Proto: datapath.Protocol(f.Proto)}] = p.Service
		d.serving.WithLabelValues(p.Service, f.String()).Set(float64(p.Serving))
		if p.Serving == 0 {
			down[f] = true
			if !d.down[f] {
				d.log.Warn("frontend has no backend taking new flows", "frontend", f.String(), "service", p.Service)
			}
		} else if d.down[f] {
			d.log.Info("frontend has backends again", "frontend", f.String(), "service", p.Service, "backends", p.Serving)
		}
	}
	d.down = down
	d.coll.setServices(names)
	if err != nil {
		d.reconciles.WithLabelValues("error").Inc()
		return err
	}
	d.reconciles.WithLabelValues("ok").Inc()
	// Only the backends that take new flows are known: one held out (unhealthy, or new and not
	// probed yet) must not count as served when its verdict is Unknown again.
	known = map[netip.AddrPort]bool{}
	for _, p := range desired.Frontends {
		for _, b := range p.Backends {
			if b.Weight > 0 {
				known[b.Key] = true
			}
		}
	}
	d.mu.Lock()
	d.known = known
	bgpCfg := d.bgpCfg
	d.mu.Unlock()
	if d.speaker != nil {
		if err := d.announce(vipRoutes(desired, bgpCfg)); err != nil {
			return err
		}
	}
	if res.Changes() > 0 {
		d.log.Info("reconciled", "changes", res.Changes(), "vips", res.VIPsWritten, "tables", res.TablesWritten,
			"backends", res.BackendsWritten, "deleted_vips", res.VIPsDeleted, "took", time.Since(start))
	}
	// Ready once the datapath holds the config with a verdict for every backend: a new backend
	// is held out until its first probe, and a daemon that said ready before then would serve
	// its VIPs with no backend at all.
	if pending == 0 && !d.ready.Load() {
		d.ready.Store(true)
		d.log.Info("ready")
	}
	return nil
}

// withHealth returns the config's services with health-check verdicts applied: unhealthy
// backends (and new ones not yet probed) take no new flows. pending counts the backends held
// out only because their first probe has not finished. d.mu must be held.
func (d *daemon) withHealth(cfg *config.Config) (services []lb.Service, pending int) {
	out := make([]lb.Service, len(cfg.Services))
	for i, s := range cfg.Services {
		out[i] = s
		if _, checked := cfg.HealthChecks[s.Name]; !checked {
			continue
		}
		out[i].Backends = append([]lb.Backend(nil), s.Backends...)
		for j, b := range out[i].Backends {
			st, ok := d.checker.Status(healthKey(s.Name, b.Addr))
			if !ok || b.State != lb.Active {
				continue
			}
			switch st.Health {
			case health.Unhealthy:
				out[i].Backends[j].State = lb.Unhealthy
			case health.Unknown:
				if !d.knownBackend(s, b) {
					out[i].Backends[j].State = lb.Unhealthy
					pending++
				}
			}
		}
	}
	return out, pending
}

// knownBackend reports whether the datapath already serves backend b of service s.
func (d *daemon) knownBackend(s lb.Service, b lb.Backend) bool {
	for _, e := range endpoints(s, b) {
		if d.known[e] {
			return true
		}
	}
	return false
}

// servingBackends returns the endpoints of the backends that dp's Maglev tables use: those an
// earlier daemon left in service. Backends that are only in the backends map (held out, but
// kept for their established flows) are not among them.
func servingBackends(dp reconcile.Datapath) map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	bes, err := dp.Backends()
	if err != nil {
		return out
	}
	tables, err := dp.MaglevTables()
	if err != nil {
		return out
	}
	for _, table := range tables {
		for _, id := range table {
			if b, ok := bes[id]; ok {
				out[netip.AddrPortFrom(b.Addr, b.Port)] = true
			}
		}
	}
	return out
}

func healthKey(service string, addr netip.Addr) string {
	return service + "|" + addr.Unmap().String()
}

// healthTargets lists a health-check target per backend of every service with a check.
func healthTargets(cfg *config.Config) []health.Target {
	var out []health.Target
	for _, s := range cfg.Services {
		hc, ok := cfg.HealthChecks[s.Name]
		if !ok {
			continue
		}
		for _, b := range s.Backends {
			port := hc.Port
			if port == 0 && len(s.Ports) > 0 {
				p := s.Ports[0]
				port = p.TargetPort
				if t, ok := b.TargetPorts[p.Name]; ok {
					port = t
				} else if port == 0 {
					port = p.Port
				}
			}
			out = append(out, health.Target{Key: healthKey(s.Name, b.Addr),
				Addr: netip.AddrPortFrom(b.Addr.Unmap(), port), Check: healthCheck(hc)})
		}
	}
	return out
}

// healthCheck converts a configured check to the checker's.
func healthCheck(hc config.HealthCheck) health.Check {
	kind, _ := health.ParseKind(string(hc.Type)) // config validated the type
	return health.Check{Kind: kind, Port: hc.Port, Path: hc.Path, ExpectStatus: hc.ExpectStatus,
		Payload: hc.Payload, Expect: hc.Expect, Interval: hc.Interval, Timeout: hc.Timeout,
		Rise: hc.Rise, Fall: hc.Fall}
}

// reload re-reads the config file; an invalid one is logged and the old one keeps serving.
func (d *daemon) reload() {
	cfg, err := config.Load(d.cfgPath)
	if err != nil {
		d.configReloads.WithLabelValues("rejected").Inc()
		d.log.Error("config reload rejected; still serving the previous config", "config", d.cfgPath, "error", err)
		return
	}
	// Every service must plan: a reload must not take a VIP:port from a service that serves it
	// now (conflicts go to the service whose name sorts first) or silently drop a service.
	if _, errs := lb.Plan(cfg.Services, d.planOpts); len(errs) > 0 {
		d.configReloads.WithLabelValues("rejected").Inc()
		d.log.Error("config reload rejected: services; still serving the previous config", "config", d.cfgPath,
			"error", errors.Join(errs...))
		return
	}
	if cfg.BGP != nil && d.speaker != nil {
		if err := bgpConfig(cfg.BGP).Validate(); err != nil {
			d.configReloads.WithLabelValues("rejected").Inc()
			d.log.Error("config reload rejected: bgp; still serving the previous config", "config", d.cfgPath, "error", err)
			return
		}
	}
	// Check the health targets before Set: Set applies the valid ones even when it fails, and
	// a rejected reload must leave the checker with the previous config's targets.
	targets := healthTargets(cfg)
	var terrs []error
	keys := map[string]bool{}
	for _, t := range targets {
		if err := t.Validate(); err != nil {
			terrs = append(terrs, err)
		} else if keys[t.Key] {
			terrs = append(terrs, fmt.Errorf("target %q: listed twice", t.Key))
		}
		keys[t.Key] = true
	}
	if len(terrs) == 0 {
		err = d.checker.Set(targets)
	} else {
		err = errors.Join(terrs...)
	}
	if err != nil {
		d.configReloads.WithLabelValues("rejected").Inc()
		d.log.Error("config reload rejected: health checks; still serving the previous config", "config", d.cfgPath, "error", err)
		return
	}
	if err := d.reloadKube(cfg); err != nil {
		d.configReloads.WithLabelValues("rejected").Inc()
		d.log.Error("config reload rejected: pools; still serving the previous config", "config", d.cfgPath, "error", err)
		return
	}
	if cfg.Datapath.Kind != d.cfg.Datapath.Kind {
		d.log.Warn("datapath kind changed; it takes effect at the next restart", "kind", d.cfg.Datapath.Kind,
			"next", cfg.Datapath.Kind)
	} else if a, b := cfg.Datapath, d.cfg.Datapath; func() bool { a.BackendWarmup, b.BackendWarmup = 0, 0; return a != b }() {
		d.log.Warn("datapath settings (sizes, timeouts, seed, table size) changed; they take effect at the next restart")
	}
	if cfg.Listen != d.cfg.Listen {
		d.log.Warn("listen address changed; it takes effect at the next restart", "listen", d.cfg.Listen)
	}
	if err := d.attach(cfg); err != nil {
		d.log.Error("config reload: interfaces", "error", err)
	}
	bgpCfg := d.reloadBGP(cfg.BGP)
	d.mu.Lock()
	d.cfg = cfg
	d.bgpCfg = bgpCfg
	d.mu.Unlock()
	d.configReloads.WithLabelValues("applied").Inc()
	d.log.Info("config reloaded", "services", len(cfg.Services))
	warnSharedEndpoints(d.log, cfg.Services)
	d.trigger()
}

func (d *daemon) registerMetrics(reg *prometheus.Registry) {
	d.coll = newDatapathCollector(d.dp)
	d.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xlb_reconciles_total",
		Help: "Reconciliations of the datapath, by result (ok, error)."}, []string{"result"})
	d.reconcileTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xlb_reconcile_duration_seconds",
		Help: "Time to plan and apply the desired state.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)})
	d.configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xlb_config_reloads_total",
		Help: "SIGHUP reloads, by result (applied, rejected)."}, []string{"result"})
	d.servicesInvalid = prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_services_invalid",
		Help: "Configured services left out because they are invalid or conflict with another."})
	d.serving = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xlb_frontend_serving_backends",
		Help: "Backends taking new flows per frontend; 0 means the VIP:port is down."}, []string{"service", "frontend"})
	if d.kube != nil {
		reg.MustRegister(kubeCollector{d})
	}
	if d.speaker != nil {
		reg.MustRegister(speaker.NewCollector(d.speaker))
	}
	reg.MustRegister(d.coll, d.reconciles, d.reconcileTime, d.configReloads, d.servicesInvalid, d.serving,
		&healthCollector{d: d}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// healthCollector exports the health checker's verdicts.
type healthCollector struct{ d *daemon }

var healthDesc = prometheus.NewDesc("xlb_backend_healthy", "1 if the backend passes its health check, 0 if not, -1 before its first probe.",
	[]string{"service", "backend"}, nil)

func (h *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- healthDesc }
func (h *healthCollector) Collect(ch chan<- prometheus.Metric) {
	for key, st := range h.d.checker.Snapshot() {
		svc, be, _ := strings.Cut(key, "|")
		v := map[health.Health]float64{health.Healthy: 1, health.Unhealthy: 0, health.Unknown: -1}[st.Health]
		ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, v, svc, be)
	}
}

func (d *daemon) serveHTTP(addr string, reg *prometheus.Registry) (*http.Server, error) {
	mux := http.NewServeMux()
	// One failing collector must not cost the whole scrape: serve the rest and log the error.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: promLog{d.log}}))
	mux.HandleFunc("/bgp", d.serveBGP)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.ready.Load() {
			http.Error(w, "not reconciled yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("http server", "error", err)
		}
	}()
	return srv, nil
}

// startBGP starts the speaker in the daemon's network namespace (the gateway's) with no route
// and no session: the first successful reconcile sets the VIPs that can be served, and only then
// are the sessions opened (bgp.Config.WaitForRoutes), so that their first UPDATE carries them.
func (d *daemon) startBGP(ctx context.Context, c *config.BGP) error {
	sp, err := speaker.New(bgpConfig(c), d.log)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sp.Start(sctx); err != nil {
		_ = sp.Stop(context.Background(), speaker.Withdraw)
		return err
	}
	d.speaker, d.bgpCfg, d.announced = sp, c, map[netip.Prefix]bool{}
	return nil
}

// stopBGP stops the speaker: withdrawing the routes first if withdrawOnExit or cleanup (the
// datapath is about to go), else leaving them at the routers for graceful restart.
func (d *daemon) stopBGP(cleanup bool) {
	d.mu.Lock()
	// A start that failed leaves the routers what an earlier run left them (graceful restart),
	// unless the datapath goes too: withdrawing before the first reconcile opens sessions. A
	// datapath that stops with the process (AF_XDP) forwards nothing the routers could keep
	// sending to: its routes always go.
	withdraw := cleanup || !d.dp.Persistent() || (d.bgpCfg.WithdrawOnExit && d.running)
	d.mu.Unlock()
	mode, what := speaker.KeepRoutes, "routes kept at the peers for graceful restart"
	if withdraw {
		mode, what = speaker.Withdraw, "routes withdrawn"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.speaker.Stop(ctx, mode); err != nil {
		d.log.Error("bgp stop", "error", err)
		return
	}
	d.log.Info("bgp stopped; "+what, "routes", len(d.announced))
}

// announce makes routes the speaker's routes and logs the VIPs announced and withdrawn.
func (d *daemon) announce(routes []bgp.Route) error {
	if err := d.speaker.SetRoutes(routes); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	now := make(map[netip.Prefix]bool, len(routes))
	for _, r := range routes {
		now[r.Prefix] = true
		if !d.announced[r.Prefix] {
			d.log.Info("bgp: announcing VIP", "prefix", r.Prefix.String())
		}
	}
	for p := range d.announced {
		if !now[p] {
			d.log.Warn("bgp: withdrawing VIP (too few healthy backends)", "prefix", p.String())
		}
	}
	d.announced = now
	return nil
}

// reloadBGP applies a reloaded bgp section to the running speaker (its peers; the route
// attributes apply at the next reconcile) and returns the section to serve from now on.
func (d *daemon) reloadBGP(c *config.BGP) *config.BGP {
	switch {
	case d.speaker == nil:
		if c != nil {
			d.log.Warn("bgp section added; the BGP speaker starts at the next restart")
		}
		return nil
	case c == nil:
		d.log.Warn("bgp section removed; the BGP speaker keeps its settings until the next restart")
		return d.bgpCfg
	}
	if bgpRestartOnly(d.bgpCfg, c) {
		d.log.Warn("bgp routerID, asn, listenPort or gracefulRestart changed; they take effect at the next restart")
	}
	if err := d.speaker.SetPeers(c.Peers); err != nil {
		d.log.Error("config reload: bgp peers unchanged", "error", err)
	}
	return c
}
