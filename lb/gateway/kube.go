// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/health"
	"github.com/xlb-dev/xlb/lb/ipam"
	"github.com/xlb-dev/xlb/lb/kube"
)

// kubeMode is the daemon's Kubernetes side (config section kubernetes): the LoadBalancer-class
// controller, whose Services join the file's in every reconcile, and the node health prober.
type kubeMode struct {
	ctrl   *kube.Controller
	prober *kube.NodeProber
	cfg    *config.Kubernetes
}

// kubePools converts the file's pools to the controller's.
func kubePools(cfg *config.Config) []kube.Pool {
	out := make([]kube.Pool, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		out = append(out, kube.Pool{Pool: p.IPAM(), Route: p.Route})
	}
	return out
}

// startKube starts Kubernetes mode; its goroutines stop with ctx and are counted in wg.
func (g *Gateway) startKube(ctx context.Context, cfg *config.Config, wg *sync.WaitGroup) error {
	k := cfg.Kubernetes
	// client-go logs (leader election, reflectors) through klog: send them to our log.
	klog.SetSlogLogger(g.log.With("component", "client-go"))
	var client kubernetes.Interface = g.opts.KubeClient
	dyn := g.opts.KubeDynamic
	if client == nil {
		rc, err := kube.RestConfig(k.Kubeconfig)
		if err != nil {
			return err
		}
		rc.UserAgent = "xlb"
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("kubernetes: client: %w", err)
		}
		if dyn, err = dynamic.NewForConfig(rc); err != nil {
			return fmt.Errorf("kubernetes: dynamic client: %w", err)
		}
	}
	if len(cfg.Pools) > 0 {
		g.log.Warn("the config file has pools: in Kubernetes mode they belong in AddressPool objects (`xlb convert --pools` writes them from this file); the file's are still used, before the objects'",
			"config", g.opts.ConfigPath, "pools", len(cfg.Pools))
	}
	identity, err := k.Identity()
	if err != nil {
		return err
	}
	m := &kubeMode{cfg: k}
	var onHealth func()
	m.prober = kube.NewNodeProber(kube.NodeProberOptions{
		ProxyHealthPort: k.NodeHealthPort, SkipProxyHealth: k.NodeHealthPort == 0,
		Interval: k.HealthCheckInterval, Timeout: k.HealthCheckTimeout,
		OnChange: func(c kube.NodeHealthChange) {
			if onHealth != nil {
				onHealth()
			}
		},
		Logger: g.log.With("component", "node-health"),
	})
	m.ctrl, err = kube.New(client, kube.Options{
		Class: k.LoadBalancerClass, DefaultClass: k.DefaultClass, IPMode: corev1.LoadBalancerIPMode(k.IPMode),
		Forwarding: cfg.Datapath.Forwarding,
		Pools:      kubePools(cfg),
		Dynamic:    dyn,
		Leader: kube.LeaderOptions{Namespace: k.LeaderElection.Namespace, Name: k.LeaderElection.LeaseName,
			Identity: identity, LeaseDuration: k.LeaderElection.LeaseDuration,
			RenewDeadline: k.LeaderElection.RenewDeadline, RetryPeriod: k.LeaderElection.RetryPeriod},
		NodeHealth: m.prober,
		Changed:    g.trigger,
		Log:        g.log.With("component", "kubernetes"),
	})
	if err != nil {
		return err
	}
	onHealth = m.ctrl.NodeHealthChanged
	g.kube = m
	if dyn != nil {
		if g.peers, err = kube.NewPeerSource(kube.PeerSourceOptions{Client: client, Dynamic: dyn, Gateway: identity,
			Namespace: k.LeaderElection.Namespace, Log: g.log.With("component", "bgp-peers"),
			Changed: func() {
				select {
				case g.peersChanged <- struct{}{}:
				default:
				}
			}}); err != nil {
			return err
		}
		wg.Add(2)
		go func() { defer wg.Done(); g.peers.Run(ctx) }()
		go func() { defer wg.Done(); g.pollSite(ctx, dyn) }()
		if g.reporter, err = kube.NewStatusReporter(kube.StatusReporterOptions{
			Client: dyn, Name: identity, Snapshot: g.statusSnapshot, Leading: m.ctrl.Leading,
			Log: g.log.With("component", "gateway-status"),
		}); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); g.reporter.Run(ctx) }()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := m.prober.Run(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("node health prober stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := m.ctrl.Run(ctx); err != nil {
			g.log.Error("kubernetes controller stopped", "error", err)
		}
	}()
	g.log.Info("kubernetes mode", "class", m.ctrl.Class(), "identity", identity, "pools", len(cfg.Pools))
	return nil
}

// reloadKube applies a reloaded config's pools (the rest of the kubernetes section takes effect
// at the next restart).
func (g *Gateway) reloadKube(cfg *config.Config) error {
	if g.kube == nil {
		if cfg.Kubernetes != nil {
			g.log.Warn("kubernetes section added; Kubernetes mode starts at the next restart")
		}
		return nil
	}
	if cfg.Kubernetes == nil {
		g.log.Warn("kubernetes section removed; Kubernetes mode goes on until the next restart")
		return nil
	}
	if err := g.kube.ctrl.SetPools(kubePools(cfg)); err != nil {
		return err
	}
	if err := g.kube.ctrl.SetForwarding(cfg.Datapath.Forwarding); err != nil {
		return err
	}
	if *cfg.Kubernetes != *g.kube.cfg {
		g.log.Warn("kubernetes settings other than pools changed; they take effect at the next restart")
	}
	return nil
}

// kubeCollector exports the controller's state.
type kubeCollector struct{ g *Gateway }

var (
	kubeLeaderDesc = prometheus.NewDesc("xlb_kube_leader",
		"1 while this gateway leads (allocates addresses and writes Service status).", nil, nil)
	kubeServicesDesc = prometheus.NewDesc("xlb_kube_services",
		"LoadBalancer Services of xlb's class that have an address and are balanced.", nil, nil)
	kubePoolDesc = prometheus.NewDesc("xlb_kube_pool_addresses",
		"Addresses of each pool and family: size (assignable) and used (leader only).", []string{"pool", "family", "state"}, nil)
	kubeNodeHealthDesc = prometheus.NewDesc("xlb_node_healthy",
		"1 if the node passes its check, 0 if not, -1 before its first probe: its kube-proxy /healthz (service \"\"), or an externalTrafficPolicy: Local Service's healthCheckNodePort.",
		[]string{"node", "service"}, nil)
)

func (k kubeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kubeLeaderDesc
	ch <- kubeServicesDesc
	ch <- kubePoolDesc
	ch <- kubeNodeHealthDesc
}

func (k kubeCollector) Collect(ch chan<- prometheus.Metric) {
	m := k.g.kube
	if m == nil {
		return
	}
	leading := 0.0
	if m.ctrl.Leading() {
		leading = 1
	}
	ch <- prometheus.MustNewConstMetric(kubeLeaderDesc, prometheus.GaugeValue, leading)
	ch <- prometheus.MustNewConstMetric(kubeServicesDesc, prometheus.GaugeValue, float64(len(m.ctrl.Services())))
	for _, u := range m.ctrl.Usage() {
		fam := "ipv4"
		if u.Family == ipam.IPv6 {
			fam = "ipv6"
		}
		ch <- prometheus.MustNewConstMetric(kubePoolDesc, prometheus.GaugeValue, float64(u.Size), u.Pool, fam, "size")
		ch <- prometheus.MustNewConstMetric(kubePoolDesc, prometheus.GaugeValue, float64(u.Used), u.Pool, fam, "used")
	}
	for _, v := range m.prober.Verdicts() {
		svc := ""
		if v.Service.Name != "" {
			svc = v.Service.String()
		}
		val := map[health.Health]float64{health.Healthy: 1, health.Unhealthy: 0, health.Unknown: -1}[v.Health]
		ch <- prometheus.MustNewConstMetric(kubeNodeHealthDesc, prometheus.GaugeValue, val, v.Node, svc)
	}
}

// syncKubeRoutes programs the Pod CIDR routes when kubernetes.podRoutes is set.
func (g *Gateway) syncKubeRoutes(log *slog.Logger) {
	if g.kube == nil || !g.kube.cfg.PodRoutes || !g.kube.ctrl.Synced() {
		return
	}
	if err := syncPodRoutes(g.kube.ctrl.PodRoutes()); err != nil {
		log.Error("pod routes", "error", err)
	}
}
