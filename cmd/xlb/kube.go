package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/xlb-dev/xlb/lb/config"
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

// restConfig returns the client configuration: the kubeconfig file, or in-cluster.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: no kubeconfig configured and not in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig %s: %w", path, err)
	}
	return c, nil
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
func (d *daemon) startKube(ctx context.Context, cfg *config.Config, wg *sync.WaitGroup) error {
	k := cfg.Kubernetes
	// client-go logs (leader election, reflectors) through klog: send them to our log.
	klog.SetSlogLogger(d.log.With("component", "client-go"))
	rc, err := restConfig(k.Kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "xlb"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes: client: %w", err)
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
		Logger: d.log.With("component", "node-health"),
	})
	m.ctrl, err = kube.New(client, kube.Options{
		Class: k.LoadBalancerClass, DefaultClass: k.DefaultClass, IPMode: corev1.LoadBalancerIPMode(k.IPMode),
		Pools: kubePools(cfg),
		Leader: kube.LeaderOptions{Namespace: k.LeaderElection.Namespace, Name: k.LeaderElection.LeaseName,
			Identity: identity, LeaseDuration: k.LeaderElection.LeaseDuration,
			RenewDeadline: k.LeaderElection.RenewDeadline, RetryPeriod: k.LeaderElection.RetryPeriod},
		NodeHealth: m.prober,
		Changed:    d.trigger,
		Log:        d.log.With("component", "kubernetes"),
	})
	if err != nil {
		return err
	}
	onHealth = m.ctrl.NodeHealthChanged
	d.kube = m
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := m.prober.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("node health prober stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := m.ctrl.Run(ctx); err != nil {
			d.log.Error("kubernetes controller stopped", "error", err)
		}
	}()
	d.log.Info("kubernetes mode", "class", m.ctrl.Class(), "identity", identity, "pools", len(cfg.Pools))
	return nil
}

// reloadKube applies a reloaded config's pools (the rest of the kubernetes section takes effect
// at the next restart).
func (d *daemon) reloadKube(cfg *config.Config) error {
	if d.kube == nil {
		if cfg.Kubernetes != nil {
			d.log.Warn("kubernetes section added; Kubernetes mode starts at the next restart")
		}
		return nil
	}
	if cfg.Kubernetes == nil {
		d.log.Warn("kubernetes section removed; Kubernetes mode goes on until the next restart")
		return nil
	}
	if err := d.kube.ctrl.SetPools(kubePools(cfg)); err != nil {
		return err
	}
	if *cfg.Kubernetes != *d.kube.cfg {
		d.log.Warn("kubernetes settings other than pools changed; they take effect at the next restart")
	}
	return nil
}

// kubeCollector exports the controller's state.
type kubeCollector struct{ d *daemon }

var (
	kubeLeaderDesc = prometheus.NewDesc("xlb_kube_leader",
		"1 while this gateway leads (allocates addresses and writes Service status).", nil, nil)
	kubeServicesDesc = prometheus.NewDesc("xlb_kube_services",
		"LoadBalancer Services of xlb's class that have an address and are balanced.", nil, nil)
	kubePoolDesc = prometheus.NewDesc("xlb_kube_pool_addresses",
		"Addresses of each pool and family: size (assignable) and used (leader only).", []string{"pool", "family", "state"}, nil)
)

func (k kubeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kubeLeaderDesc
	ch <- kubeServicesDesc
	ch <- kubePoolDesc
}

func (k kubeCollector) Collect(ch chan<- prometheus.Metric) {
	m := k.d.kube
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
}

// syncKubeRoutes programs the Pod CIDR routes when kubernetes.podRoutes is set.
func (d *daemon) syncKubeRoutes(log *slog.Logger) {
	if d.kube == nil || !d.kube.cfg.PodRoutes || !d.kube.ctrl.Synced() {
		return
	}
	if err := syncPodRoutes(d.kube.ctrl.PodRoutes()); err != nil {
		log.Error("pod routes", "error", err)
	}
}
