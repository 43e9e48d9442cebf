// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/xlb-dev/xlb/lb/health"
)

// Defaults of [NodeProberOptions]' zero fields.
const (
	// DefaultProxyHealthPort is kube-proxy's node health server port (/healthz).
	DefaultProxyHealthPort = 10256
	// DefaultNodeProbeInterval is the time between two probes of one node's check: a dead
	// node stops getting new flows within Fall intervals.
	DefaultNodeProbeInterval = 2 * time.Second
	// DefaultNodeProbeTimeout bounds one probe: kube-proxy answers from memory, so a node that
	// takes longer is in trouble.
	DefaultNodeProbeTimeout = time.Second
	// DefaultNodeRise is the number of passing probes that make a failing check pass again:
	// one, since a node's endpoints are Ready by Kubernetes' own account and every interval
	// without them costs capacity.
	DefaultNodeRise = 1
	// DefaultNodeFall is the number of failed probes that make a passing check fail: two, so
	// that one lost probe does not move every flow off a node.
	DefaultNodeFall = 2
)

// NodeProberOptions configure a [NodeProber]. The zero value probes kube-proxy's /healthz on
// port 10256 and each Service's healthCheckNodePort every 2 s.
type NodeProberOptions struct {
	// ProxyHealthPort is the port of kube-proxy's node health server, probed with GET
	// /healthz on every node; 0 means DefaultProxyHealthPort.
	ProxyHealthPort uint16
	// SkipProxyHealth turns the /healthz probe off (a cluster without kube-proxy, or one whose
	// health server is not reachable from the gateways); a configuration's "port 0" maps to
	// it. Per-Service probes still run.
	SkipProxyHealth bool
	// Interval is the time between two probes of one check; 0 means
	// DefaultNodeProbeInterval, and it is at least health.MinInterval.
	Interval time.Duration
	// Timeout bounds one probe; 0 means DefaultNodeProbeTimeout. It is cut to Interval.
	Timeout time.Duration
	// Rise and Fall are the consecutive passing and failing probes that change a verdict;
	// 0 means DefaultNodeRise and DefaultNodeFall. A check's first probe alone decides.
	Rise, Fall int
	// MaxConcurrent bounds the probes in flight; 0 means health.DefaultMaxConcurrent.
	MaxConcurrent int
	// Jitter spreads the probes (see health.Options.Jitter); 0 means health.DefaultJitter.
	Jitter float64
	// OnChange, when not nil, is told of every verdict change, from one goroutine, never
	// concurrently with itself; it should return quickly (the controller requeues the
	// Services concerned).
	OnChange func(NodeHealthChange)
	// Logger receives verdict changes; nil means slog.Default().
	Logger *slog.Logger
}

// NodeHealthChange says that a check of a node changed its verdict.
type NodeHealthChange struct {
	// Node is the node's name.
	Node string
	// Service is the Service whose healthCheckNodePort check changed; the zero value when
	// it is the node's kube-proxy /healthz check, which concerns every Service.
	Service types.NamespacedName
	// Healthy is the check's new verdict as LocalHealthy counts it.
	Healthy bool
	// Reason says why, e.g. "2 consecutive probes failed, the last: GET /healthz: status 503".
	Reason string
}

// NodeProber probes kube-proxy's health servers on every node for externalTrafficPolicy: Local
// Services: GET /healthz on ProxyHealthPort (the node: proxy in sync, Node not being deleted)
// and, per Service, GET / on its healthCheckNodePort (the node has a ready endpoint of it and
// its proxy is healthy). A 200 passes; anything else (503, a timeout, a refused connection)
// fails. It implements the controller's NodeHealth and answers NodeView.LocalHealthy.
//
// A check that has not finished its first probe counts as passing, and so does a node or
// Service it was not given: a Ready endpoint is presumed good until a probe says otherwise, so
// a restarting gateway does not blackhole every Local Service until its probes come back (at
// most one Interval plus one Timeout after SetTargets), while a dead node stops getting new
// flows as soon as its first probe fails, or after Fall failures once it had passed.
type NodeProber struct {
	checker   *health.Checker
	proxyPort uint16
	skipProxy bool
	check     health.Check
	onChange  func(NodeHealthChange)
	log       *slog.Logger

	mu sync.Mutex
	// checks: checker key → the node and Service (zero for /healthz) it checks, for every
	// target of the last SetTargets.
	checks map[string]nodeCheck
}

// nodeCheck is what one checker target checks.
type nodeCheck struct {
	node    string
	service types.NamespacedName
}

// key returns the checker key of c, as logs show it: "node-1 /healthz" or "node-1 shop/web"
// (node names have no spaces, and a Service's namespace/name never starts with "/").
func (c nodeCheck) key() string {
	if c.service == (types.NamespacedName{}) {
		return c.node + " /healthz"
	}
	return c.node + " " + c.service.Namespace + "/" + c.service.Name
}

// NewNodeProber returns a prober with no targets; Run starts it.
func NewNodeProber(opts NodeProberOptions) *NodeProber {
	p := &NodeProber{
		proxyPort: opts.ProxyHealthPort,
		skipProxy: opts.SkipProxyHealth,
		onChange:  opts.OnChange,
		log:       opts.Logger,
		checks:    map[string]nodeCheck{},
	}
	if p.proxyPort == 0 {
		p.proxyPort = DefaultProxyHealthPort
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	interval := opts.Interval
	if interval == 0 {
		interval = DefaultNodeProbeInterval
	}
	interval = max(interval, health.MinInterval)
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultNodeProbeTimeout
	}
	p.check = health.Check{
		Kind:     health.HTTP,
		Interval: interval,
		Timeout:  min(timeout, interval),
		Rise:     cmpOr(opts.Rise, DefaultNodeRise),
		Fall:     cmpOr(opts.Fall, DefaultNodeFall),
	}
	p.checker = health.New(health.Options{
		MaxConcurrent: opts.MaxConcurrent,
		Jitter:        opts.Jitter,
		OnChange:      p.changed,
		Logger:        p.log,
	})
	return p
}

// cmpOr returns v if it is positive, else def.
func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Run probes until ctx is done; see health.Checker.Run. It returns nil, or an error at once if
// called twice.
func (p *NodeProber) Run(ctx context.Context) error {
	return p.checker.Run(ctx)
}

// SetTargets replaces what is probed: kube-proxy's /healthz on each node (unless
// SkipProxyHealth) and each Service's healthCheckNodePort on each node. Checks that stay the
// same (same node, Service, address and port) keep their verdicts and schedules; new ones
// start unknown. Nodes without a valid address and Services with port 0 are skipped; of two
// nodes or Services with the same name the first is used.
func (p *NodeProber) SetTargets(nodes []NodeTarget, services []ServiceTarget) {
	checks := map[string]nodeCheck{}
	var targets []health.Target
	add := func(c nodeCheck, addr netip.Addr, port uint16, path string) {
		k := c.key()
		if _, dup := checks[k]; dup {
			return
		}
		checks[k] = c
		chk := p.check
		chk.Path = path
		targets = append(targets, health.Target{Key: k, Addr: netip.AddrPortFrom(addr, port), Check: chk})
	}
	for _, n := range nodes {
		a := n.Addr.Unmap()
		if n.Name == "" || !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			continue
		}
		if !p.skipProxy {
			add(nodeCheck{node: n.Name}, a, p.proxyPort, "/healthz")
		}
		for _, s := range services {
			if s.Port == 0 || s.Service == (types.NamespacedName{}) {
				continue
			}
			if s.Nodes != nil && !slices.Contains(s.Nodes, n.Name) {
				continue // no endpoint of the Service on this node
			}
			add(nodeCheck{node: n.Name, service: s.Service}, a, s.Port, "/")
		}
	}
	p.mu.Lock()
	p.checks = checks
	p.mu.Unlock()
	if err := p.checker.Set(targets); err != nil {
		p.log.Warn("node health: some checks were refused", "err", err)
	}
}

// LocalHealthy reports whether node passes its checks for service: kube-proxy's /healthz and
// service's healthCheckNodePort. A check not probed yet, or not given, passes (see
// NodeProber).
func (p *NodeProber) LocalHealthy(node string, service types.NamespacedName) bool {
	for _, c := range []nodeCheck{{node: node}, {node: node, service: service}} {
		if st, ok := p.checker.Status(c.key()); ok && st.Health == health.Unhealthy {
			return false
		}
	}
	return true
}

// NodeVerdict is one node check's current verdict (NodeProber.Verdicts).
type NodeVerdict struct {
	// Node is the node's name; Service the Service of a healthCheckNodePort check, the zero
	// value for the node's kube-proxy /healthz.
	Node    string
	Service types.NamespacedName
	// Health is the check's verdict (health.Unknown before its first probes).
	Health health.Health
}

// Verdicts returns every node check's verdict, in no particular order.
func (p *NodeProber) Verdicts() []NodeVerdict {
	p.mu.Lock()
	checks := make(map[string]nodeCheck, len(p.checks))
	for k, c := range p.checks {
		checks[k] = c
	}
	p.mu.Unlock()
	out := make([]NodeVerdict, 0, len(checks))
	for key, st := range p.checker.Snapshot() {
		if c, ok := checks[key]; ok {
			out = append(out, NodeVerdict{Node: c.node, Service: c.service, Health: st.Health})
		}
	}
	return out
}

// changed turns a checker update into a NodeHealthChange.
func (p *NodeProber) changed(u health.Update) {
	p.mu.Lock()
	c, ok := p.checks[u.Key]
	p.mu.Unlock()
	if !ok || p.onChange == nil {
		return
	}
	p.onChange(NodeHealthChange{Node: c.node, Service: c.service, Healthy: u.Health != health.Unhealthy, Reason: u.Reason})
}
