package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/xlb-dev/xlb/lb"
)

// ClusterIPModel models svc for the node agent running on node: the addresses Pods reach it at
// (its clusterIPs, its externalIPs and its load balancer's ingress IPs of ipMode VIP), its TCP
// and UDP ports, and its endpoints from endpointSlices
// with their states as for a LoadBalancer Service (ready endpoints serve; serving-terminating
// ones only when no ready one of their family is left). With internalTrafficPolicy: Local only
// the endpoints on node serve (endpoints without a nodeName are on no node); with none there,
// connections are refused where kube-proxy would drop them. The last result is false for a
// Service without cluster IP (headless, or of type ExternalName) or without a TCP or UDP port:
// there is nothing to balance. Problems are the Service's, as ServiceModel
// reports them (the agent logs them; the gateway's controller makes the Events).
func ClusterIPModel(svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice, node string) (lb.Service, []Problem, bool) {
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return lb.Service{}, nil, false
	}
	var pb problems
	var vips []netip.Addr
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip == corev1.ClusterIPNone {
			return lb.Service{}, nil, false
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			pb.warn("InvalidClusterIP", "spec.clusterIPs: %q is not an IP address; it is not balanced", ip)
			continue
		}
		vips = append(vips, a.Unmap())
	}
	if len(vips) == 0 {
		return lb.Service{}, pb.done(), false
	}
	// The Service's other addresses, as Pods reach them too: a connection to a load balancer's
	// address from inside the cluster would otherwise come back from the Pod, past the
	// gateway's reverse NAT. ipMode Proxy addresses are left to the load balancer (as
	// kube-proxy leaves them).
	other := slices.Clone(svc.Spec.ExternalIPs)
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" && (in.IPMode == nil || *in.IPMode == corev1.LoadBalancerIPModeVIP) {
			other = append(other, in.IP)
		}
	}
	for _, ip := range other {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			pb.warn("InvalidExternalIP", "%q (spec.externalIPs or status.loadBalancer.ingress) is not an IP address; it is not balanced", ip)
			continue
		}
		if a = a.Unmap(); !slices.Contains(vips, a) {
			vips = append(vips, a)
		}
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	out := lb.Service{Name: key.String(), VIPs: vips}
	local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if local {
		out.TrafficPolicy = lb.TrafficLocal
	}
	out.Affinity, out.AffinityTimeout = affinity(svc, &pb)
	out.Ports = servicePorts(svc, &pb)
	if len(out.Ports) == 0 {
		return lb.Service{}, pb.done(), false
	}
	// With a Local policy only this node's endpoints serve; one without a nodeName is on no
	// node, so not on this one (as kube-proxy sees it).
	out.Backends = backends(endpointSlices, key, out.Ports, local, onNode(node), &pb)
	return out, pb.done(), true
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
	// Apply is called with every Service that has a cluster IP, modelled by ClusterIPModel,
	// once the caches have synced and then after every change (a burst of changes costs one
	// call). An error is logged and the same state is applied again after RetryInterval.
	// Required.
	Apply func([]lb.Service) error
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
	changed  chan struct{}
	// reported: Service key → its problems as last logged, so that each is logged once, until it
	// changes.
	reported map[string]string
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
	a := &Agent{opts: opts, log: opts.Log, changed: make(chan struct{}, 1), reported: map[string]string{}}
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
	models := make([]lb.Service, 0, len(svcs))
	var lbs []lb.Service
	seen := map[string]bool{}
	for _, svc := range svcs {
		k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		m, problems, ok := ClusterIPModel(svc, bySvc[k], a.opts.Node)
		a.report(k.String(), problems)
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
	for k := range a.reported {
		if !seen[k] {
			delete(a.reported, k)
		}
	}
	byName := func(x, y lb.Service) int { return strings.Compare(x.Name, y.Name) }
	slices.SortFunc(models, byName)
	err = a.opts.Apply(models)
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
