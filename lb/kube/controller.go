// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
)

// Finalizer is the finalizer xlb puts on the Services it serves (KEP-1959), so that their
// address is released and their route withdrawn only once the Service is really gone.
const Finalizer = "service.kubernetes.io/load-balancer-cleanup"

// ConditionAllocated is the type of the status condition xlb keeps on its Services: True when
// every address the Service needs is allocated, False with the reason when not.
const ConditionAllocated = "xlb.dev/AddressAllocated"

// DefaultClass is the loadBalancerClass xlb serves unless configured otherwise.
const DefaultClass = "xlb.dev/xdp"

// Pool is an address pool and the BGP attributes of the routes of its addresses.
type Pool struct {
	// Pool is the pool as the allocator sees it.
	ipam.Pool
	// Route holds the BGP attributes of the host routes of the pool's addresses.
	Route lb.RouteAttributes
}

// Options configure a Controller. The zero value of every field but Pools works.
type Options struct {
	// Class is the spec.loadBalancerClass the controller serves; "" means DefaultClass.
	Class string
	// DefaultClass makes the controller also serve LoadBalancer Services with no class (only
	// when xlb is the cluster's default load balancer).
	DefaultClass bool
	// IPMode is written as status.loadBalancer.ingress[].ipMode; "" means VIP: kube-proxy then
	// delivers in-cluster traffic to the VIP itself. Proxy sends it through a gateway, which
	// DNATs to the Pod without SNAT. In the return-path mode the Pod answers the client Pod
	// directly, past the gateway's reverse NAT, so Proxy works only when the cluster routes
	// replies back through the gateways. In the DSR mode (Forwarding) the reply is translated
	// at the Pod's node, whatever its route (for a client Pod on the same node too: the agent
	// rewrites on the interfaces toward local Pods), so Proxy works for the endpoints on nodes
	// with a DSR-capable agent (see docs/kubernetes.md).
	IPMode corev1.LoadBalancerIPMode
	// Forwarding is the site's forwarding mode (datapath.forwarding, dsrFallback). In the DSR
	// mode the controller writes ConditionDSR on its Services and records ReasonDSRFallback
	// when some endpoints' nodes cannot serve it, and only the backends that return through the
	// gateways count for ReasonSharedEndpoints. Backends get their node's capability
	// (lb.Backend.DSR, NodeDSR) in every mode.
	Forwarding lb.Forwarding
	// Pools are the address pools of the config file, in configuration order. The pools of
	// AddressPool objects follow them (Dynamic).
	Pools []Pool
	// Dynamic, if set, is the client the controller watches xlb.dev objects with (AddressPool)
	// and writes their status through; nil uses the config file's pools only.
	Dynamic dynamic.Interface
	// Leader configures the election of the one gateway that allocates addresses and writes
	// Service status and Events. Every gateway forwards and announces, leader or not.
	Leader LeaderOptions
	// NodeHealth probes nodes for externalTrafficPolicy: Local; nil probes nothing and takes
	// every node as healthy.
	NodeHealth NodeHealth
	// Changed is called, without blocking, whenever the model Services returns has changed.
	Changed func()
	// Log receives the controller's log; nil discards it.
	Log *slog.Logger
	// Resync is the informers' resync period; 0 means none (the work queue retries failures).
	Resync time.Duration
}

// NodeHealth is what the controller asks of the node health prober.
type NodeHealth interface {
	// LocalHealthy reports whether node may take new flows of service (externalTrafficPolicy:
	// Local): its kube-proxy health checks pass.
	LocalHealthy(node string, service types.NamespacedName) bool
	// SetTargets replaces the set of probes: each node's addresses, and per eTP=Local service
	// its healthCheckNodePort.
	SetTargets(nodes []NodeTarget, services []ServiceTarget)
}

// NodeTarget is a node to probe.
type NodeTarget struct {
	// Name is the Node's name.
	Name string
	// Addr is the node's InternalIP.
	Addr netip.Addr
}

// ServiceTarget is a Service whose health check node port is probed on every node.
type ServiceTarget struct {
	// Service names the Service.
	Service types.NamespacedName
	// Port is its spec.healthCheckNodePort.
	Port uint16
	// Nodes are the nodes its endpoints run on, sorted: the only ones whose answer matters (on
	// any other node kube-proxy answers 503, and no endpoint of the Service is there); nil
	// means every node.
	Nodes []string
}

// Controller is xlb's LoadBalancer-class controller. It watches Services, EndpointSlices and
// Nodes, keeps the lb model of every Service of its class (Services), and, while it leads,
// allocates their addresses and writes their status, finalizer and Events.
type Controller struct {
	client kubernetes.Interface
	opts   Options
	log    *slog.Logger

	factory  informers.SharedInformerFactory
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	nodes    corelisters.NodeLister
	queue    workqueue.TypedRateLimitingInterface[string]

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	mu sync.Mutex
	// models: Service key (namespace/name) → its lb model, for every Service of ours that has
	// at least one address.
	models map[string]lb.Service
	// endpoints indexes the models' backend endpoints whose replies return through the
	// gateways (Forwarding.ReturnPath), to tell the Services that share Pod ports
	// (ReasonSharedEndpoints).
	endpoints *lb.EndpointIndex
	// reported: Service key → topic ("alloc", or "problem:" + a Problem's reason) → the message
	// last reported as an Event, so that each is reported once, until it changes.
	reported map[string]map[string]string
	// pending: the Services whose allocation failed, retried when an address is freed.
	pending map[string]bool
	// targets is signalled when the node prober's targets must be rebuilt (coalesced: a burst
	// of Service events costs one rebuild).
	targets chan struct{}
	// filePools are the config file's pools (Options.Pools, then SetPools); opts.Pools are the
	// pools in use: these and the AddressPool objects' (ObjectPools).
	filePools []Pool
	// pobj is the AddressPool objects' state.
	pobj poolObjects
	// poolsGen counts SetPools calls, so that a leader's allocator built from older pools is
	// brought up to date when installed.
	poolsGen uint64
	// alloc is the address allocator while leading (rebuilt from the Services' status each time
	// leadership is won), nil otherwise.
	alloc *ipam.Allocator
	// leading says whether this controller holds the lease.
	leading bool
	// ready is set once every Service was modelled (Synced).
	ready atomic.Bool
	// lastSync: Service key → when its model was last rebuilt (for the latency metric).
	synced time.Time
}

// New returns a controller that talks to the apiserver through client. Run starts it.
func New(client kubernetes.Interface, opts Options) (*Controller, error) {
	if opts.Class == "" {
		opts.Class = DefaultClass
	}
	if opts.IPMode == "" {
		opts.IPMode = corev1.LoadBalancerIPModeVIP
	}
	if opts.IPMode != corev1.LoadBalancerIPModeProxy && opts.IPMode != corev1.LoadBalancerIPModeVIP {
		return nil, fmt.Errorf("kube: ipMode %q: want VIP or Proxy", opts.IPMode)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := opts.Forwarding.Validate(); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if _, err := newAllocator(opts.Pools); err != nil {
		return nil, err
	}
	if err := opts.Leader.check(); err != nil {
		return nil, err
	}
	c := &Controller{
		client:    client,
		opts:      opts,
		log:       opts.Log,
		models:    map[string]lb.Service{},
		endpoints: lb.NewEndpointIndex(),
		reported:  map[string]map[string]string{},
		pending:   map[string]bool{},
		targets:   make(chan struct{}, 1),
		filePools: opts.Pools,
		pobj:      poolObjects{changed: make(chan struct{}, 1), reported: map[string]PoolVerdict{}},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "xlb-services"}),
	}
	c.factory = informers.NewSharedInformerFactory(client, opts.Resync)
	c.services = c.factory.Core().V1().Services().Lister()
	c.slices = c.factory.Discovery().V1().EndpointSlices().Lister()
	c.nodes = c.factory.Core().V1().Nodes().Lister()
	return c, nil
}

// newAllocator returns an allocator holding pools.
func newAllocator(pools []Pool) (*ipam.Allocator, error) {
	a := ipam.New()
	ps := make([]ipam.Pool, 0, len(pools))
	for _, p := range pools {
		ps = append(ps, p.Pool)
	}
	if _, err := a.SetPools(ps); err != nil {
		return nil, fmt.Errorf("kube: pools: %w", err)
	}
	return a, nil
}

// Services returns the model of every Service of ours that has an address, sorted by name.
func (c *Controller) Services() []lb.Service {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]lb.Service, 0, len(c.models))
	for _, s := range c.models {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Synced reports whether the model holds every Service of the apiserver (the caches synced and
// each Service was modelled once). Until then Services is incomplete and must not be applied.
func (c *Controller) Synced() bool { return c.ready.Load() }

// Leading reports whether this controller currently holds the leader lease.
func (c *Controller) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// informerStopWait bounds how long Run waits for its informers to stop. client-go's reflector
// backs off between failed watch-list attempts without watching for cancellation (up to 30 s
// with an unreachable apiserver), and a gateway told to stop must not wait that long: its BGP
// withdrawal comes after Run returns.
const informerStopWait = time.Second

// stopInformers shuts the informer factory down, waiting at most informerStopWait.
func (c *Controller) stopInformers() {
	done := make(chan struct{})
	go func() {
		c.factory.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(informerStopWait):
		c.log.Warn("informers still stopping (backing off from a failed watch); not waiting for them",
			"waited", informerStopWait)
	}
}

// Run runs the controller until ctx ends: informers, the work queue, node health targets and
// the leader election. It returns once the caches could not sync or ctx has ended.
func (c *Controller) Run(ctx context.Context) error {
	c.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "xlb"})
	defer c.broadcaster.Shutdown()
	defer c.queue.ShutDown()

	if err := c.watch(); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	defer c.stopInformers()
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil // stopped before the caches synced
			}
			return fmt.Errorf("kube: the %v cache did not sync", typ)
		}
	}
	// The pools of AddressPool objects before any Service is modelled: a leader priming its
	// allocator without them would find their Services' addresses outside every pool.
	// The wait is bounded: a gateway whose ServiceAccount may not list them (RBAC of an older
	// release) must still serve the Services it can, from the file's pools.
	if c.startPoolObjects(ctx) {
		wctx, cancel := context.WithTimeout(ctx, poolSyncWait)
		synced := cache.WaitForCacheSync(wctx.Done(), c.poolObjectsSynced)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil // stopped before the cache synced
		case !synced:
			c.log.Error("AddressPool objects not listed in time (RBAC: list and watch addresspools.xlb.dev?); going on with the pools known so far",
				"waited", poolSyncWait)
		}
		if err := c.applyPools(); err != nil {
			c.log.Error("address pools not applied", "error", err)
		}
	}
	c.log.Info("kubernetes caches synced", "class", c.opts.Class)
	c.updateTargets()
	// A first pass over every Service, as a follower (addresses from status), before Synced says
	// yes: a daemon that applied a model missing Services would tear down their forwarding.
	if svcs, err := c.services.List(labels.Everything()); err == nil {
		for _, s := range svcs {
			key := s.Namespace + "/" + s.Name
			if err := c.sync(ctx, key); err != nil {
				c.queue.Add(key)
			}
		}
	}
	c.ready.Store(true)
	c.log.Info("kubernetes services modelled", "services", len(c.Services()))
	if c.opts.Changed != nil {
		c.opts.Changed()
	}

	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); c.poolStatusLoop(ctx) }()
	go func() { defer wg.Done(); c.targetLoop(ctx) }()
	go func() { defer wg.Done(); c.work(ctx) }()
	go func() { defer wg.Done(); c.elect(ctx) }()
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// watch registers the informers' event handlers: every change enqueues the Services it concerns.
func (c *Controller) watch() error {
	// The node prober's targets change only with a Local Service of ours (not at every status
	// write or at every Service of the cluster).
	svcH := cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			c.enqueueObject(o)
			if _, ok := c.localTarget(o); ok {
				c.requestTargets()
			}
		},
		UpdateFunc: func(old, o any) {
			c.enqueueObject(o)
			a, okA := c.localTarget(old)
			b, okB := c.localTarget(o)
			if okA != okB || a.Service != b.Service || a.Port != b.Port {
				c.requestTargets()
			}
		},
		DeleteFunc: func(o any) {
			c.enqueueObject(o)
			if _, ok := c.localTarget(o); ok {
				c.requestTargets()
			}
		},
	}
	if _, err := c.factory.Core().V1().Services().Informer().AddEventHandler(svcH); err != nil {
		return fmt.Errorf("kube: watching services: %w", err)
	}
	// A slice change moves a Local Service's endpoints between nodes: its probes follow.
	sliceH := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueSliceService(o); c.requestTargets() },
		UpdateFunc: func(old, o any) { c.enqueueSliceService(old); c.enqueueSliceService(o); c.requestTargets() },
		DeleteFunc: func(o any) { c.enqueueSliceService(o); c.requestTargets() },
	}
	if _, err := c.factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(sliceH); err != nil {
		return fmt.Errorf("kube: watching endpointslices: %w", err)
	}
	nodeH := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.nodesChanged() },
		UpdateFunc: func(old, o any) { c.nodeChanged(old, o) },
		DeleteFunc: func(any) { c.nodesChanged() },
	}
	if _, err := c.factory.Core().V1().Nodes().Informer().AddEventHandler(nodeH); err != nil {
		return fmt.Errorf("kube: watching nodes: %w", err)
	}
	return nil
}

// enqueueObject enqueues the Service o (or a tombstone of one).
func (c *Controller) enqueueObject(o any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
	if err == nil {
		c.queue.Add(key)
	}
}

// enqueueSliceService enqueues the Service an EndpointSlice belongs to.
func (c *Controller) enqueueSliceService(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		c.queue.Add(s.Namespace + "/" + name)
	}
}

// nodeChanged re-plans when a node changed in a way the model reads (labels, addresses, the
// agent's direct server return capability): not on every status heartbeat. A change of the
// capability alone re-plans only the Services with endpoints on the node.
func (c *Controller) nodeChanged(old, o any) {
	a, ok1 := old.(*corev1.Node)
	b, ok2 := o.(*corev1.Node)
	if ok1 && ok2 && equalLabels(a.Labels, b.Labels) && slices.Equal(a.Status.Addresses, b.Status.Addresses) &&
		slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) && a.DeletionTimestamp.Equal(b.DeletionTimestamp) {
		if NodeDSR(a) != NodeDSR(b) {
			c.enqueueOnNode(b.Name)
		}
		return
	}
	c.nodesChanged()
}

// enqueueOnNode enqueues the modelled Services with a backend on node.
func (c *Controller) enqueueOnNode(node string) {
	c.mu.Lock()
	var keys []string
	for k, m := range c.models {
		if slices.ContainsFunc(m.Backends, func(b lb.Backend) bool { return b.Node == node }) {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// nodesChanged re-plans after a node came, went or changed: the prober's targets, the
// Services of ours (their endpoints' nodes), and the pod routes (through Changed).
func (c *Controller) nodesChanged() {
	c.requestTargets()
	c.enqueueOurs(false)
	if c.opts.Changed != nil {
		c.opts.Changed()
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// enqueueAll enqueues every Service the cache holds.
func (c *Controller) enqueueAll() {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range svcs {
		c.queue.Add(s.Namespace + "/" + s.Name)
	}
}

// NodeHealthChanged asks the controller to re-plan the Services that use node health; the node
// health prober calls it when a verdict changes.
func (c *Controller) NodeHealthChanged() { c.enqueueOurs(true) }

// enqueueOurs enqueues the Services of ours (only those with externalTrafficPolicy: Local when
// localOnly).
func (c *Controller) enqueueOurs(localOnly bool) {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range svcs {
		if Ours(s, c.opts.Class, c.opts.DefaultClass) &&
			(!localOnly || s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal) {
			c.queue.Add(s.Namespace + "/" + s.Name)
		}
	}
}

// work processes the queue, one Service at a time (so that allocations happen in a defined
// order), until the queue shuts down.
func (c *Controller) work(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(ctx, key)
		switch {
		case err == nil:
			c.queue.Forget(key)
		case ctx.Err() != nil:
		default:
			c.log.Warn("service sync failed; retrying", "service", key, "err", err)
			c.queue.AddRateLimited(key)
		}
		c.queue.Done(key)
	}
}

// setModel stores (or, with ok false, removes) the model of Service key and reports a change.
func (c *Controller) setModel(key string, s lb.Service, ok bool) {
	c.mu.Lock()
	old, had := c.models[key]
	if ok {
		c.models[key] = s
	} else {
		delete(c.models, key)
	}
	c.synced = time.Now()
	changed := had != ok || (ok && !sameModel(old, s))
	var touched []string
	if changed {
		if ok {
			touched = c.endpoints.Set(c.opts.Forwarding.ReturnPath(s))
		} else {
			touched = c.endpoints.Delete(key)
		}
	}
	leading := c.leading
	c.mu.Unlock()
	if !changed {
		return
	}
	// The Services this one shares Pod ports with, before or now: their SharedEndpoints
	// Events may have to change (only the leader records Events).
	if leading {
		for _, k := range touched {
			c.queue.Add(k)
		}
	}
	if c.opts.Changed != nil {
		c.opts.Changed()
	}
}

// forget drops Service key: its model (so the datapath and BGP let it go), its allocation and
// its reported problems.
func (c *Controller) forget(key string) {
	c.setModel(key, lb.Service{}, false)
	c.mu.Lock()
	freed := false
	if c.alloc != nil {
		freed = len(c.alloc.Addrs(key)) > 0
		c.alloc.Release(key)
	}
	delete(c.reported, key)
	delete(c.pending, key)
	var retry []string
	if freed {
		retry = c.pendingKeys(key)
	}
	c.mu.Unlock()
	c.retry(retry)
}

// pendingKeys lists the Services waiting for an address, but except. c.mu must be held.
func (c *Controller) pendingKeys(except string) []string {
	var out []string
	for k := range c.pending {
		if k != except {
			out = append(out, k)
		}
	}
	return out
}

// retry enqueues the Services waiting for an address: one was just freed.
func (c *Controller) retry(keys []string) {
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// sync brings Service key's model, allocation, status, finalizer and Events up to date.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made: nothing to do
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	leading := c.Leading()
	if !Ours(svc, c.opts.Class, c.opts.DefaultClass) {
		c.forget(key)
		// Only a Service whose type changed away from LoadBalancer can have been ours: the
		// class of a LoadBalancer Service is immutable, so one of another class never was
		// (another xlb, of another class, may be serving it with the same finalizer).
		if leading && svc.Spec.Type != corev1.ServiceTypeLoadBalancer && c.ownedBefore(svc) {
			return c.letGo(ctx, svc)
		}
		return nil
	}
	if svc.DeletionTimestamp != nil {
		// Out of the model first (its forwarding and route go), then the finalizer. The address
		// is released once the Service is gone (its delete event), not before.
		c.setModel(key, lb.Service{}, false)
		if leading {
			return c.removeFinalizer(ctx, svc)
		}
		return nil
	}
	req, problems := IPRequest(svc)
	var vips []netip.Addr
	// A failed write is returned (and retried) only once the model is up to date: the leader
	// must go on following endpoint changes like the followers, whatever the apiserver says.
	var werr error
	if leading {
		werr = c.addFinalizer(ctx, svc)
		var aerr error
		vips, aerr = c.allocate(ctx, svc, req)
		werr = errors.Join(werr, aerr)
	} else {
		vips = statusAddrs(svc)
	}
	slices_, err := c.slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
	if err != nil {
		return fmt.Errorf("service %s: listing its endpointslices: %w", key, err)
	}
	model, more := ServiceModel(Input{Service: svc, Slices: slices_, VIPs: vips, Route: c.route(vips)}, c.nodeView())
	problems = append(problems, more...)
	if len(vips) == 0 {
		model = lb.Service{}
	}
	c.setModel(key, model, len(vips) > 0)
	if leading {
		c.mu.Lock()
		sh, shared := c.endpoints.Sharing(key)
		c.mu.Unlock()
		if shared {
			problems = append(problems, sharedProblem(sh))
		}
		var cond *metav1.Condition
		c.mu.Lock()
		fwd := c.opts.Forwarding
		c.mu.Unlock()
		if dc, p, ok := DSRStatus(fwd, model); ok && len(vips) > 0 {
			cond = &dc
			if p != nil {
				problems = append(problems, *p)
			}
		}
		// The condition before the Event: whoever sees the Event finds it.
		werr = errors.Join(werr, c.writeDSRCondition(ctx, svc, cond))
		c.report(svc, problems)
	}
	return werr
}

// sharedProblem is the Warning a Service gets while it sends to Pod ports other Services send
// to (their replies name no Service: see lb.Sharing). The message names Services only, so that
// it changes (and is reported again) when the set of sharers does, not at every Pod's change.
func sharedProblem(sh lb.Sharing) Problem {
	const crossing = "a reply that returns through a gateway that did not see its connection's first packet"
	var parts []string
	if len(sh.SamePort) > 0 {
		parts = append(parts, fmt.Sprintf("with %s on the same service port (%s usually cannot be "+
			"translated: the client waits for a retransmission)", strings.Join(sh.SamePort, ", "), crossing))
	}
	if len(sh.OtherPort) > 0 {
		parts = append(parts, fmt.Sprintf("with %s on other service ports (%s gets its VIP from a Maglev "+
			"re-derivation, which fails for about 1 in n of them, n the other Service's backends, and "+
			"always with sessionAffinity ClientIP or more than 4 Services on one Pod port)",
			strings.Join(sh.OtherPort, ", "), crossing))
	}
	return Problem{Type: corev1.EventTypeWarning, Reason: ReasonSharedEndpoints, Message: "shares Pod ports " +
		strings.Join(parts, " and ") + "; give the Services distinct target ports, or route the Pods' " +
		"replies back through the gateway that forwarded the connection"}
}

// ownedBefore reports whether svc, no longer ours, still carries addresses of our pools or our
// condition: the finalizer alone may be another implementation's (it is a shared name).
func (c *Controller) ownedBefore(svc *corev1.Service) bool {
	for _, cond := range svc.Status.Conditions {
		if cond.Type == ConditionAllocated || cond.Type == ConditionDSR {
			return true
		}
	}
	for _, a := range statusAddrs(svc) {
		if _, ok := c.poolOf(a); ok {
			return true
		}
	}
	return false
}

// route returns the BGP attributes of the pool(s) of vips (merged when they differ by family).
func (c *Controller) route(vips []netip.Addr) lb.RouteAttributes {
	var r lb.RouteAttributes
	for _, a := range vips {
		p, ok := c.poolOf(a)
		if !ok {
			continue
		}
		r.Communities = append(r.Communities, p.Route.Communities...)
		r.LargeCommunities = append(r.LargeCommunities, p.Route.LargeCommunities...)
		if r.LocalPref == nil {
			r.LocalPref = p.Route.LocalPref
		}
		if r.MED == nil {
			r.MED = p.Route.MED
		}
	}
	return r
}

// poolOf returns the configured pool holding a.
func (c *Controller) poolOf(a netip.Addr) (Pool, bool) {
	c.mu.Lock()
	pools := c.opts.Pools
	c.mu.Unlock()
	for _, p := range pools {
		for _, r := range p.Ranges {
			if r.Contains(a) {
				return p, true
			}
		}
	}
	return Pool{}, false
}

// statusAddrs returns the addresses in svc's status.loadBalancer.ingress.
func statusAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// errNotLeading is returned by writes attempted after the lease was lost.
var errNotLeading = errors.New("not leading any more")

// Usage returns the address pools' usage while leading (the allocator lives on the leader), or
// nil.
func (c *Controller) Usage() []ipam.PoolUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alloc == nil {
		return nil
	}
	return c.alloc.Usage()
}

// SetPools replaces the config file's address pools (a configuration reload); the AddressPool
// objects' pools follow them. Invalid pools are refused and the old ones stay. Services keep
// the addresses they hold (an address left outside every pool keeps serving, with a Warning,
// until its Service asks for another); every Service is re-synced.
func (c *Controller) SetPools(pools []Pool) error {
	if _, err := newAllocator(pools); err != nil {
		return err
	}
	objs, _ := c.listPoolObjects()
	all, _ := ObjectPools(objs, pools)
	if err := c.installPools(all); err != nil {
		return err
	}
	c.mu.Lock()
	c.filePools = pools
	c.mu.Unlock()
	c.poolStatusSoon()
	return nil
}

// installPools makes pools the pools in use, unless they are invalid, and re-syncs every
// Service when they changed.
func (c *Controller) installPools(pools []Pool) error {
	if _, err := newAllocator(pools); err != nil {
		return err
	}
	c.mu.Lock()
	if reflect.DeepEqual(c.opts.Pools, pools) {
		c.mu.Unlock()
		return nil
	}
	c.opts.Pools = pools
	c.poolsGen++
	if c.alloc != nil {
		ps := make([]ipam.Pool, 0, len(pools))
		for _, p := range pools {
			ps = append(ps, p.Pool)
		}
		if _, err := c.alloc.SetPools(ps); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("kube: pools: %w", err)
		}
	}
	c.mu.Unlock()
	c.log.Info("address pools", "pools", poolNames(pools))
	c.enqueueAll()
	return nil
}

// poolNames returns the pools' names, in order.
func poolNames(pools []Pool) []string {
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.Name)
	}
	return out
}

// SetForwarding replaces the site's forwarding mode (a reload, or SiteSettings): the Services'
// DSR conditions and shared-endpoint reports follow; every Service is re-synced.
func (c *Controller) SetForwarding(f lb.Forwarding) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	c.mu.Lock()
	same := c.opts.Forwarding == f
	c.opts.Forwarding = f
	c.mu.Unlock()
	if !same {
		c.enqueueAll()
	}
	return nil
}

// Class returns the loadBalancerClass the controller serves.
func (c *Controller) Class() string { return c.opts.Class }
