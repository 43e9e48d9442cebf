// SPDX-License-Identifier: Apache-2.0
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The fields of the kubernetes section and of its leaderElection.
var (
	kubernetesFields = []string{"kubeconfig", "loadBalancerClass", "defaultClass", "ipMode", "nodeHealthPort",
		"healthCheckInterval", "healthCheckTimeout", "leaderElection", "podRoutes", "gatewayName"}
	leaderElectionFields = []string{"namespace", "leaseName", "leaseDuration", "renewDeadline", "retryPeriod"}
)

// Defaults of the kubernetes section.
const (
	// DefaultLoadBalancerClass is kubernetes.loadBalancerClass when absent.
	DefaultLoadBalancerClass = "xlb.dev/xdp"
	// DefaultIPMode is kubernetes.ipMode when absent (see Kubernetes.IPMode for why).
	DefaultIPMode = IPModeVIP
	// DefaultNodeHealthPort is kubernetes.nodeHealthPort when absent: kube-proxy's
	// healthz port.
	DefaultNodeHealthPort = 10256
	// DefaultNodeCheckInterval and DefaultNodeCheckTimeout are kubernetes.healthCheckInterval
	// and healthCheckTimeout when absent.
	DefaultNodeCheckInterval = 2 * time.Second
	DefaultNodeCheckTimeout  = time.Second
	// DefaultLeaseNamespace and DefaultLeaseName name the leader election Lease when absent.
	DefaultLeaseNamespace = "xlb-system"
	DefaultLeaseName      = "xlb-controller"
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod are the leader
	// election timings when absent (client-go's usual values).
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Kubernetes configures Kubernetes mode (key kubernetes): the controller gives VIPs from
// pools to the Services of its class, writes their status, and balances them over their
// EndpointSlices; the services of the file are balanced next to them.
type Kubernetes struct {
	// Kubeconfig (key kubeconfig) is the kubeconfig file to reach the API server with; a
	// relative path is taken from the config file's directory (and stored joined to it). It is
	// read when the daemon starts, not when the file is parsed. Absent means the in-cluster
	// configuration (the Pod's service account).
	Kubeconfig string
	// LoadBalancerClass (key loadBalancerClass) is the spec.loadBalancerClass of the Services
	// xlb handles, a label-style name (an optional DNS prefix and '/', then a name of at most
	// 63 characters); default DefaultLoadBalancerClass. Services of another class are never
	// touched.
	LoadBalancerClass string
	// DefaultClass (key defaultClass) makes xlb also handle LoadBalancer Services without a
	// class, as the cluster's default implementation; default false (another implementation
	// may own them).
	DefaultClass bool
	// IPMode (key ipMode) is the status.loadBalancer.ingress[].ipMode written with each VIP:
	// IPModeVIP or IPModeProxy; default DefaultIPMode (VIP). With VIP, kube-proxy routes
	// in-cluster traffic to a VIP straight to the Service's endpoints, as for a ClusterIP.
	// With Proxy, in-cluster clients go through the gateway like external ones; xlb
	// forwards to Pod IPs without SNAT. In the return-path mode a Pod's reply to another Pod
	// would not come back through the gateway for the reverse NAT, and the connection would
	// fail: choose Proxy only when in-cluster replies do return through the gateways. In the
	// DSR mode (datapath.forwarding: dsr) the reply is translated at the Pod's node instead
	// (on the interface toward the client Pod when both are on one node), so Proxy works for
	// the endpoints on nodes whose agent serves DSR.
	IPMode IPMode
	// NodeHealthPort (key nodeHealthPort) is the port of kube-proxy's node health server
	// probed at each Node's InternalIP (/healthz): a Node that fails it gets no new flows;
	// default DefaultNodeHealthPort; 0 disables the probe.
	NodeHealthPort uint16
	// HealthCheckInterval (key healthCheckInterval) is the time between node probes, at least
	// MinCheckInterval; default DefaultNodeCheckInterval.
	HealthCheckInterval time.Duration
	// HealthCheckTimeout (key healthCheckTimeout) is how long a node probe may take, above
	// zero and below the interval; default DefaultNodeCheckTimeout.
	HealthCheckTimeout time.Duration
	// LeaderElection (key leaderElection) configures the election of the one gateway that
	// writes Service status; the others only balance.
	LeaderElection LeaderElection
	// PodRoutes (key podRoutes) makes the gateway route each Node's podCIDRs via the Node's
	// InternalIP, for clusters whose Pod networks the gateway cannot otherwise reach; default
	// false.
	PodRoutes bool
	// GatewayName (key gatewayName) is this gateway's identity: the Lease holder and the
	// source of events. Empty (the default) means the host name (see Identity). Every gateway
	// of a site needs its own.
	GatewayName string
}

// LeaderElection configures the leader election Lease (key kubernetes.leaderElection).
type LeaderElection struct {
	// Namespace (key namespace) is the Lease's namespace, a DNS label; default
	// DefaultLeaseNamespace.
	Namespace string
	// LeaseName (key leaseName) is the Lease's name, a DNS subdomain; default
	// DefaultLeaseName. Every gateway of a site uses the same.
	LeaseName string
	// LeaseDuration (key leaseDuration) is how long the other gateways wait before taking
	// over from a silent leader; longer than renewDeadline; default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline (key renewDeadline) is how long the leader keeps trying to renew before it
	// steps down; more than 1.2 × retryPeriod; default DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod (key retryPeriod) is the time between attempts to acquire or renew; default
	// DefaultRetryPeriod.
	RetryPeriod time.Duration
}

// IPMode is the ipMode of a Service's status.loadBalancer.ingress (key kubernetes.ipMode).
type IPMode string

// The ipModes.
const (
	// IPModeVIP ("VIP") lets kube-proxy deliver in-cluster traffic to the VIP itself.
	IPModeVIP IPMode = "VIP"
	// IPModeProxy ("Proxy") sends in-cluster traffic to the VIP through the load balancer.
	IPModeProxy IPMode = "Proxy"
)

// Identity returns GatewayName, or the host name when it is empty.
func (k *Kubernetes) Identity() (string, error) {
	if k.GatewayName != "" {
		return k.GatewayName, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("kubernetes.gatewayName is not set and the host name is unknown: %w", err)
	}
	return h, nil
}

// leaderJitter is client-go's JitterFactor: the renew deadline must exceed it times the
// retry period.
const leaderJitter = 1.2

// kubernetes walks the kubernetes section.
func (d *decoder) kubernetes(n *yaml.Node, path string) *Kubernetes {
	o, ok := d.object(n, path, kubernetesFields)
	if !ok {
		return nil
	}
	k := &Kubernetes{
		LoadBalancerClass:   DefaultLoadBalancerClass,
		IPMode:              DefaultIPMode,
		NodeHealthPort:      DefaultNodeHealthPort,
		HealthCheckInterval: DefaultNodeCheckInterval,
		HealthCheckTimeout:  DefaultNodeCheckTimeout,
		LeaderElection: LeaderElection{Namespace: DefaultLeaseNamespace, LeaseName: DefaultLeaseName,
			LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod},
	}
	if v := o.get("kubeconfig"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("kubeconfig")); ok {
			if !filepath.IsAbs(s) {
				s = filepath.Join(filepath.Dir(d.file), s)
			}
			k.Kubeconfig = s
		}
	}
	if v := o.get("loadBalancerClass"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("loadBalancerClass")); ok {
			if err := checkQualifiedName(s, "load balancer class"); err != nil {
				d.fail(v, o.at("loadBalancerClass"), err)
			}
			k.LoadBalancerClass = s
		}
	}
	if v := o.get("defaultClass"); v != nil {
		k.DefaultClass, _ = d.boolean(v, o.at("defaultClass"))
	}
	if v := o.get("ipMode"); v != nil {
		if s, ok := d.enum(v, o.at("ipMode"), "ipMode", string(IPModeVIP), string(IPModeProxy)); ok {
			k.IPMode = IPMode(s)
		}
	}
	if v := o.get("nodeHealthPort"); v != nil {
		k.NodeHealthPort, _ = d.uint16Of(v, o.at("nodeHealthPort"), 0)
	}
	intervalOK := true
	if v := o.get("healthCheckInterval"); v != nil {
		t, ok := d.positiveDuration(v, o.at("healthCheckInterval"))
		if ok && t < MinCheckInterval {
			d.failf(v, o.at("healthCheckInterval"), "%s is below the minimum of %s", t, MinCheckInterval)
			ok = false
		}
		intervalOK = ok
		if ok {
			k.HealthCheckInterval = t
		}
	}
	if v := o.get("healthCheckTimeout"); v != nil {
		if t, ok := d.positiveDuration(v, o.at("healthCheckTimeout")); ok {
			k.HealthCheckTimeout = t
		}
	}
	if t := o.get("healthCheckTimeout"); intervalOK && k.HealthCheckTimeout >= k.HealthCheckInterval {
		at, node := "healthCheckTimeout", t
		if node == nil {
			at, node = "healthCheckInterval", o.get("healthCheckInterval")
		}
		d.failf(node, o.at(at), "timeout %s is not below interval %s", k.HealthCheckTimeout, k.HealthCheckInterval)
	}
	if v := o.get("leaderElection"); v != nil {
		d.leaderElection(v, o.at("leaderElection"), &k.LeaderElection)
	}
	if v := o.get("podRoutes"); v != nil {
		k.PodRoutes, _ = d.boolean(v, o.at("podRoutes"))
	}
	if v := o.get("gatewayName"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("gatewayName")); ok {
			if len(s) > 253 || !dnsSubdomain.MatchString(s) {
				d.failf(v, o.at("gatewayName"), "%q is not a DNS subdomain (lower-case letters, digits, '-' and '.'), as a Lease holder and event source must be", s)
			}
			k.GatewayName = s
		}
	}
	return k
}

// leaderElection walks kubernetes.leaderElection into le (which holds the defaults).
func (d *decoder) leaderElection(n *yaml.Node, path string, le *LeaderElection) {
	o, ok := d.object(n, path, leaderElectionFields)
	if !ok {
		return
	}
	if v := o.get("namespace"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("namespace")); ok {
			if len(s) > 63 || !dnsLabel.MatchString(s) {
				d.failf(v, o.at("namespace"), "%q is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)", s)
			}
			le.Namespace = s
		}
	}
	if v := o.get("leaseName"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("leaseName")); ok {
			if len(s) > 253 || !dnsSubdomain.MatchString(s) {
				d.failf(v, o.at("leaseName"), "%q is not a Lease name (a DNS subdomain: lower-case letters, digits, '-' and '.')", s)
			}
			le.LeaseName = s
		}
	}
	ok = true
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"leaseDuration", &le.LeaseDuration}, {"renewDeadline", &le.RenewDeadline}, {"retryPeriod", &le.RetryPeriod}} {
		if v := o.get(f.key); v != nil {
			t, good := d.positiveDuration(v, o.at(f.key))
			if good {
				*f.dst = t
			}
			ok = ok && good
		}
	}
	if !ok {
		return
	}
	// blame returns the key to report an ordering problem at: the first of keys set in the
	// file (the other values are defaults).
	blame := func(keys ...string) (*yaml.Node, string) {
		for _, k := range keys {
			if v := o.get(k); v != nil {
				return v, o.at(k)
			}
		}
		return o.node, path
	}
	if le.RenewDeadline >= le.LeaseDuration {
		v, p := blame("renewDeadline", "leaseDuration")
		d.failf(v, p, "renewDeadline %s is not shorter than leaseDuration %s", le.RenewDeadline, le.LeaseDuration)
	}
	if float64(le.RenewDeadline) <= leaderJitter*float64(le.RetryPeriod) {
		v, p := blame("retryPeriod", "renewDeadline")
		d.failf(v, p, "renewDeadline %s is not more than %.1f × retryPeriod %s", le.RenewDeadline, leaderJitter, le.RetryPeriod)
	}
}

// poolsAndKubernetes walks the pools and kubernetes sections of root object o into cfg, and
// checks what ties them to each other and to the services: pools need Kubernetes mode (which
// may have none in the file: AddressPool objects are the place for them), and the services of the file keep clear of both (no VIP in a pool, no
// name of the form namespace/name).
func (d *decoder) poolsAndKubernetes(o object, cfg *Config) {
	var ranges []poolRange
	if n := o.get("pools"); n != nil {
		cfg.Pools, ranges = d.pools(n, "pools")
	}
	if n := o.get("kubernetes"); n != nil {
		cfg.Kubernetes = d.kubernetes(n, "kubernetes")
	}
	kube, pools := o.get("kubernetes"), o.get("pools")
	switch {
	case kube == nil && pools != nil:
		d.failf(pools, "pools", "only apply in Kubernetes mode (add a kubernetes section, or remove the pools)")
	}
	if kube == nil {
		return
	}
	services := o.get("services")
	if services == nil || resolve(services).Kind != yaml.SequenceNode {
		return
	}
	// Read the services again, quietly: their own errors are reported by d.services.
	quiet := &decoder{file: d.file}
	for i, item := range resolve(services).Content {
		so, ok := quiet.object(item, index("services", i), nil)
		if !ok {
			continue
		}
		if v := so.get("name"); v != nil && v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "/") {
			d.failf(v, so.at("name"), "%q contains '/': in Kubernetes mode, names of the form namespace/name are the Kubernetes Services'", v.Value)
		}
		v := so.get("vips")
		if v == nil || v.Kind != yaml.SequenceNode {
			continue
		}
		for j, vip := range v.Content {
			a, ok := quiet.addr(vip, "")
			if !ok {
				continue
			}
			if k := slices.IndexFunc(ranges, func(r poolRange) bool { return r.r.Contains(a) }); k >= 0 {
				d.failf(vip, index(so.at("vips"), j), "%s is in pool %q (%s, line %d), whose addresses go to Kubernetes Services",
					a, ranges[k].pool, ranges[k].where.path, ranges[k].where.line)
			}
		}
	}
}
