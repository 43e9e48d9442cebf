// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/xlb-dev/xlb/lb"
)

// Reasons of the node agent's Warning Events on a Service (AgentOptions.Events): what of the
// Service is not balanced at the node's sockets, and why.
const (
	// ReasonExternalIPRefused: an address of spec.externalIPs is inside a service CIDR or outside
	// the allowed prefixes (AddressPolicy).
	ReasonExternalIPRefused = "ExternalIPRefused"
	// ReasonLoadBalancerIPRefused: an address of status.loadBalancer.ingress is inside a service
	// CIDR.
	ReasonLoadBalancerIPRefused = "LoadBalancerIPRefused"
	// ReasonFrontendConflict: a frontend (address, port, protocol) of the Service is another
	// Service's: its cluster IP, or claimed by an older Service (lb.PlanConnect).
	ReasonFrontendConflict = "FrontendConflict"
)

// AddressPolicy says which addresses of a Service besides its cluster IPs the node agent
// balances. Cluster IPs are always balanced: the apiserver allocates them, one Service each.
type AddressPolicy struct {
	// ServiceCIDRs are the cluster's cluster IP ranges (its ServiceCIDR objects and the
	// agent's --service-cidr). An external or load-balancer address inside one is refused: it
	// is, or may become, another Service's cluster IP.
	ServiceCIDRs []netip.Prefix
	// ExternalIPs are the prefixes an address of spec.externalIPs must be inside to be
	// balanced (--external-ip-allow); none refuses every external IP. Any user who may write a
	// Service may set spec.externalIPs (CVE-2020-8554): only the administrator's prefixes are
	// trusted.
	ExternalIPs []netip.Prefix
}

// serviceCIDR returns the service CIDR that holds a, if any.
func (p AddressPolicy) serviceCIDR(a netip.Addr) (netip.Prefix, bool) {
	for _, c := range p.ServiceCIDRs {
		if c.Contains(a) {
			return c, true
		}
	}
	return netip.Prefix{}, false
}

// externalAllowed reports whether a is inside one of the allowed external IP prefixes.
func (p AddressPolicy) externalAllowed(a netip.Addr) bool {
	return slices.ContainsFunc(p.ExternalIPs, func(c netip.Prefix) bool { return c.Contains(a) })
}

// ClusterIPModel models svc for the node agent running on node: the addresses Pods reach it at
// (its clusterIPs, which it owns whole, then its externalIPs and its load balancer's ingress
// IPs of ipMode VIP that policy lets through), its TCP and UDP ports, its creationTimestamp
// (the older Service has a frontend both claim, lb.PlanConnect), and its endpoints from
// endpointSlices with their states as for a LoadBalancer Service (ready endpoints serve;
// serving-terminating ones only when no ready one of their family is left). With
// internalTrafficPolicy: Local only the endpoints on node serve (endpoints without a nodeName
// are on no node); with none there, connections are refused where kube-proxy would drop them.
// The last result is false for a Service without cluster IP (headless, or of type
// ExternalName) or without a TCP or UDP port: there is nothing to balance. Problems are the
// Service's, as ServiceModel reports them, with ReasonExternalIPRefused and
// ReasonLoadBalancerIPRefused for the addresses policy refuses.
func ClusterIPModel(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice, node string, policy AddressPolicy) (lb.ConnectService, []Problem, bool) {
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return lb.ConnectService{}, nil, false
	}
	var pb problems
	var vips []netip.Addr
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip == corev1.ClusterIPNone {
			return lb.ConnectService{}, nil, false
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			pb.warn("InvalidClusterIP", "spec.clusterIPs: %q is not an IP address; it is not balanced", ip)
			continue
		}
		vips = append(vips, a.Unmap())
	}
	if len(vips) == 0 {
		return lb.ConnectService{}, pb.done(), false
	}
	owned := slices.Clone(vips)
	// The Service's other addresses, as Pods reach them too: a connection to a load balancer's
	// address from inside the cluster would otherwise come back from the Pod, past the
	// gateway's reverse NAT. ipMode Proxy addresses are left to the load balancer (as
	// kube-proxy leaves them). Any user who may write the Service sets spec.externalIPs: they
	// pass the policy first. The status is written by controllers only, yet no address inside
	// a service CIDR is taken from it either.
	const inCIDR = "never an address inside a service CIDR: it is, or may become, a cluster IP"
	for _, ip := range svc.Spec.ExternalIPs {
		a, ok := otherAddr(ip, &pb)
		switch {
		case !ok || slices.Contains(vips, a):
		case inServiceCIDR(policy, a):
			cidr, _ := policy.serviceCIDR(a)
			pb.count(ReasonExternalIPRefused, "spec.externalIPs not balanced",
				externalAdvice(policy), fmt.Sprintf("%s is inside the service CIDR %s", a, cidr))
		case !policy.externalAllowed(a):
			pb.count(ReasonExternalIPRefused, "spec.externalIPs not balanced",
				externalAdvice(policy), fmt.Sprintf("%s is outside the allowed prefixes", a))
		default:
			vips = append(vips, a)
		}
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" || (in.IPMode != nil && *in.IPMode != corev1.LoadBalancerIPModeVIP) {
			continue
		}
		a, ok := otherAddr(in.IP, &pb)
		switch {
		case !ok || slices.Contains(vips, a):
		case inServiceCIDR(policy, a):
			cidr, _ := policy.serviceCIDR(a)
			pb.count(ReasonLoadBalancerIPRefused, "status.loadBalancer.ingress addresses not balanced", inCIDR,
				fmt.Sprintf("%s is inside the service CIDR %s", a, cidr))
		default:
			vips = append(vips, a)
		}
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	out := lb.ConnectService{Service: lb.Service{Name: key.String(), VIPs: vips}, Owned: owned, Created: svc.CreationTimestamp.Time}
	local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if local {
		out.TrafficPolicy = lb.TrafficLocal
	}
	out.Affinity, out.AffinityTimeout = affinity(svc, &pb)
	out.Ports = servicePorts(svc, &pb)
	if len(out.Ports) == 0 {
		return lb.ConnectService{}, pb.done(), false
	}
	// With a Local policy only this node's endpoints serve; one without a nodeName is on no
	// node, so not on this one (as kube-proxy sees it).
	out.Backends = backends(endpointSlices, key, out.Ports, local, onNode(node), &pb)
	return out, pb.done(), true
}

// otherAddr parses an external or load-balancer address, reporting one that is not an IP.
func otherAddr(ip string, pb *problems) (netip.Addr, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Zone() != "" {
		pb.warn("InvalidExternalIP", "%q (spec.externalIPs or status.loadBalancer.ingress) is not an IP address; it is not balanced", ip)
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// inServiceCIDR reports whether a is inside one of policy's service CIDRs.
func inServiceCIDR(policy AddressPolicy, a netip.Addr) bool {
	_, ok := policy.serviceCIDR(a)
	return ok
}

// externalAdvice says what external IPs policy lets through.
func externalAdvice(policy AddressPolicy) string {
	if len(policy.ExternalIPs) == 0 {
		return "the node agents balance no external IP: their --external-ip-allow is empty"
	}
	allow := make([]string, len(policy.ExternalIPs))
	for i, p := range policy.ExternalIPs {
		allow[i] = p.String()
	}
	return "the node agents balance external IPs outside the service CIDRs and inside --external-ip-allow " + strings.Join(allow, ", ")
}

// onNode is the NodeView of a node agent: no node is excluded (that label concerns external
// load balancers), and with a Local policy only the agent's own node counts as healthy (not
// "", an endpoint's missing nodeName).
type onNode string

func (n onNode) Excluded(string) bool { return false }

func (n onNode) LocalHealthy(node string, _ types.NamespacedName) bool { return node == string(n) }

func (n onNode) DSR(string) bool { return false }

// LoadBalancerModel models a LoadBalancer Service for a node agent's side of direct server
// return: the addresses of its status.loadBalancer.ingress (whatever their ipMode: the gateways
// carry the flows of each) as VIPs, its TCP and UDP ports, and every endpoint of endpointSlices
// as a backend with its node, as ServiceModel makes them (no node excluded: the gateways
// decide who gets new flows; a node accepts carriers for every endpoint it runs). The result is
// false for a Service with no address in its status yet. Whether the Service is of the
// gateways' class is the caller's question (Ours).
func LoadBalancerModel(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) (lb.Service, bool) {
	if svc == nil {
		return lb.Service{}, false
	}
	vips := statusAddrs(svc)
	if len(vips) == 0 {
		return lb.Service{}, false
	}
	m, _ := ServiceModel(Input{Service: svc, Slices: endpointSlices, VIPs: vips}, nil)
	return m, len(m.Ports) > 0
}

// AgentOptions configure an Agent.
type AgentOptions struct {
	// Node is the name of the node the agent runs on (for internalTrafficPolicy: Local);
	// required.
	Node string
	// Apply is called with the plan of every Service that has a cluster IP (ClusterIPs), once
	// the caches have synced and then after every change (a burst of changes costs one call).
	// An error is logged and the same state is applied again after RetryInterval. Required.
	Apply func(ClusterIPs) error
	// Policy says which external and load-balancer addresses are balanced (AddressPolicy). Its
	// ServiceCIDRs are completed in every pass with those of the cluster's ServiceCIDR objects
	// (networking.k8s.io/v1), when the apiserver serves them and the agent may list them.
	Policy AddressPolicy
	// LoadBalancers, if set, is called in every pass after Apply with the models of the
	// LoadBalancer Services of Class (LoadBalancerModel): the node agent derives from them the
	// direct server return pairs of its node. An error is retried as Apply's is.
	LoadBalancers func([]lb.Service) error
	// Class is the loadBalancerClass of the gateways whose Services LoadBalancers gets; ""
	// means DefaultClass. DefaultClass also gives it the LoadBalancer Services without a class
	// (as the gateways' kubernetes.defaultClass).
	Class        string
	DefaultClass bool
	// Log receives what the agent does; nil discards it.
	Log *slog.Logger
	// Debounce is how long the agent waits after a change for more before applying; 0 means
	// 50 ms.
	Debounce time.Duration
	// RetryInterval is how long after a failed Apply it first tries again; 0 means 1 s. It
	// doubles with each failure in a row, up to 30 s.
	RetryInterval time.Duration
}

// ClusterIPs is one pass of the agent over every Service: what AgentOptions.Apply gets.
type ClusterIPs struct {
	// Plan is the node's socket load balancer's desired state: every Service's frontends, each
	// one claimed by several Services given to its owner (lb.PlanConnect).
	Plan lb.ConnectPlan
	// Services are the models the plan was made from (ClusterIPModel), sorted by name.
	Services []lb.Service
	// Refused counts the Services with something not balanced, by reason
	// (ReasonExternalIPRefused, ReasonLoadBalancerIPRefused, ReasonFrontendConflict).
	Refused map[string]int
}

// maxRetryInterval bounds the agent's backoff after failed Applies.
const maxRetryInterval = 30 * time.Second

// Agent is the node agent's controller: it watches every Service and EndpointSlice of the
// cluster and hands their cluster IP models to AgentOptions.Apply. It keeps no state of its own
// beyond the informers' caches: each Apply is rebuilt from them whole.
type Agent struct {
	opts     AgentOptions
	log      *slog.Logger
	factory  informers.SharedInformerFactory
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	cidrs    networkinglisters.ServiceCIDRLister // nil: the cluster's ServiceCIDRs are not watched
	client   kubernetes.Interface
	events   *serviceEvents
	changed  chan struct{}
	// reported: Service key → its problems as last logged, so that each is logged once, until it
	// changes.
	reported map[string]string
	// lastErrs: the planning errors last logged, one per line.
	lastErrs string
}

// NewAgent returns an agent that talks to the apiserver through client. Run starts it.
func NewAgent(client kubernetes.Interface, opts AgentOptions) (*Agent, error) {
	if opts.Node == "" {
		return nil, fmt.Errorf("kube: agent: no node name (set it from the Pod's spec.nodeName)")
	}
	if opts.Apply == nil {
		return nil, fmt.Errorf("kube: agent: no Apply function")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce == 0 {
		opts.Debounce = 50 * time.Millisecond
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = time.Second
	}
	if opts.Class == "" {
		opts.Class = DefaultClass
	}
	for _, p := range slices.Concat(opts.Policy.ServiceCIDRs, opts.Policy.ExternalIPs) {
		if !p.IsValid() {
			return nil, fmt.Errorf("kube: agent: invalid prefix %v in the address policy", p)
		}
	}
	a := &Agent{opts: opts, log: opts.Log, client: client, changed: make(chan struct{}, 1), reported: map[string]string{},
		events: newServiceEvents(client, opts.Node, opts.Log)}
	a.factory = informers.NewSharedInformerFactory(client, 0)
	a.services = a.factory.Core().V1().Services().Lister()
	a.slices = a.factory.Discovery().V1().EndpointSlices().Lister()
	return a, nil
}

// Run watches until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	signal := func() {
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}
	if _, err := a.factory.Core().V1().Services().Informer().AddEventHandler(h); err != nil {
		return fmt.Errorf("kube: agent: watching services: %w", err)
	}
	if _, err := a.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(h); err != nil {
		return fmt.Errorf("kube: agent: watching endpointslices: %w", err)
	}
	if err := a.watchServiceCIDRs(ctx); err != nil {
		a.log.Warn("not watching the cluster's ServiceCIDRs: the service CIDRs are --service-cidr's alone",
			"err", err, "service_cidrs", prefixStrings(a.opts.Policy.ServiceCIDRs))
	} else if _, err := a.factory.Networking().V1().ServiceCIDRs().Informer().AddEventHandler(h); err != nil {
		return fmt.Errorf("kube: agent: watching servicecidrs: %w", err)
	}
	go a.events.run(ctx)
	a.factory.Start(ctx.Done())
	defer a.factory.Shutdown()
	for typ, ok := range a.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kube: agent: the %v cache did not sync", typ)
		}
	}
	a.log.Info("kubernetes caches synced", "node", a.opts.Node)
	// The first pass now: the events of the initial listing are folded into it.
	select {
	case <-a.changed:
	default:
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	delay := a.opts.RetryInterval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.changed:
			// More changes of the same burst (within Debounce of its first) are folded into
			// this pass.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(a.opts.Debounce):
			}
			select {
			case <-a.changed:
			default:
			}
		case <-retry.C:
		}
		if err := a.apply(); err != nil {
			a.log.Error("applying cluster IPs failed; retrying", "err", err, "in", delay)
			retry.Reset(delay)
			delay = min(2*delay, maxRetryInterval)
			continue
		}
		retry.Stop() // a retry still pending has nothing left to do
		delay = a.opts.RetryInterval
	}
}

// apply models every Service from the caches and hands the models to Apply (and those of the
// gateways' LoadBalancer Services to LoadBalancers).
func (a *Agent) apply() error {
	svcs, err := a.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	all, err := a.slices.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list endpointslices: %w", err)
	}
	bySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, s := range all {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			k := types.NamespacedName{Namespace: s.Namespace, Name: name}
			bySvc[k] = append(bySvc[k], s)
		}
	}
	policy := a.policy()
	models := make([]lb.ConnectService, 0, len(svcs))
	var lbs []lb.Service
	seen := map[string]bool{}
	problemsOf := map[string][]Problem{}
	byKey := map[string]*corev1.Service{}
	for _, svc := range svcs {
		k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		m, problems, ok := ClusterIPModel(svc, bySvc[k], a.opts.Node, policy)
		problemsOf[k.String()], byKey[k.String()] = problems, svc
		seen[k.String()] = true
		if ok {
			models = append(models, m)
		}
		if a.opts.LoadBalancers != nil && Ours(svc, a.opts.Class, a.opts.DefaultClass) {
			if m, ok := LoadBalancerModel(svc, bySvc[k]); ok {
				lbs = append(lbs, m)
			}
		}
	}
	plan, conflicts, errs := lb.PlanConnect(models)
	if msg := joinErrors(errs); msg != a.lastErrs {
		a.lastErrs = msg
		for _, e := range errs {
			a.log.Warn("service not balanced", "err", e)
		}
	}
	for _, c := range conflicts {
		var pb problems
		why := fmt.Sprintf("%s belongs to %s, created earlier", c.Frontend, c.Owner)
		if c.OwnedAddress {
			why = fmt.Sprintf("%s is on the cluster IP of %s", c.Frontend, c.Owner)
		}
		pb.warn(ReasonFrontendConflict, "%s: not balanced for this Service (its other frontends are)", why)
		problemsOf[c.Service] = append(problemsOf[c.Service], pb.done()...)
	}
	refused := map[string]int{}
	for _, k := range slices.Sorted(maps.Keys(problemsOf)) {
		a.report(k, problemsOf[k])
		a.events.report(byKey[k], problemsOf[k])
		for _, r := range agentEventReasons {
			if slices.ContainsFunc(problemsOf[k], func(p Problem) bool { return p.Reason == r }) {
				refused[r]++
			}
		}
	}
	for k := range a.reported {
		if !seen[k] {
			delete(a.reported, k)
		}
	}
	a.events.forget(seen)
	pass := ClusterIPs{Plan: plan, Services: make([]lb.Service, 0, len(models)), Refused: refused}
	for _, m := range models {
		pass.Services = append(pass.Services, m.Service)
	}
	byName := func(x, y lb.Service) int { return strings.Compare(x.Name, y.Name) }
	slices.SortFunc(pass.Services, byName)
	err = a.opts.Apply(pass)
	if a.opts.LoadBalancers != nil {
		slices.SortFunc(lbs, byName)
		err = errors.Join(err, a.opts.LoadBalancers(lbs))
	}
	if err != nil {
		return err
	}
	a.log.Debug("cluster IPs applied", "services", len(models), "load_balancers", len(lbs))
	return nil
}

// policy is the address policy of this pass: the options', with the service CIDRs of the
// cluster's ServiceCIDR objects.
func (a *Agent) policy() AddressPolicy {
	p := a.opts.Policy
	if a.cidrs == nil {
		return p
	}
	objs, err := a.cidrs.List(labels.Everything())
	if err != nil {
		return p
	}
	p.ServiceCIDRs = slices.Clone(p.ServiceCIDRs)
	for _, o := range objs {
		for _, c := range o.Spec.CIDRs {
			if pr, err := netip.ParsePrefix(c); err == nil && !slices.Contains(p.ServiceCIDRs, pr.Masked()) {
				p.ServiceCIDRs = append(p.ServiceCIDRs, pr.Masked())
			}
		}
	}
	return p
}

// watchServiceCIDRs sets up the watch of the cluster's ServiceCIDR objects, unless the
// apiserver does not serve them (before Kubernetes 1.33, or the API turned off) or the agent
// may not list them: its error says which. Any other error (an apiserver not reachable yet) is
// the informers' to retry, as for Services.
func (a *Agent) watchServiceCIDRs(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := a.client.NetworkingV1().ServiceCIDRs().List(lctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
		return fmt.Errorf("list servicecidrs.networking.k8s.io: %w", err)
	}
	a.cidrs = a.factory.Networking().V1().ServiceCIDRs().Lister()
	return nil
}

// prefixStrings is ps as strings.
func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
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

// report logs a Service's problems when they differ from those last logged.
func (a *Agent) report(key string, problems []Problem) {
	var b strings.Builder
	for _, p := range problems {
		fmt.Fprintf(&b, "%s %s: %s\n", p.Type, p.Reason, p.Message)
	}
	msg := b.String()
	if a.reported[key] == msg {
		return
	}
	a.reported[key] = msg
	for _, p := range problems {
		if p.Type == corev1.EventTypeWarning {
			a.log.Warn("service problem", "service", key, "reason", p.Reason, "message", p.Message)
		}
	}
}
