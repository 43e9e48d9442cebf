// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/proxyhealth"
)

// Kubernetes mode's part of the address plan and settings.
var (
	// ControlAddr4 and ControlAddr6 are the control namespace's addresses on the cluster L2;
	// the apiserver listens on ControlAddr4.
	ControlAddr4 = netip.MustParseAddr("198.18.3.200")
	ControlAddr6 = netip.MustParseAddr("2001:db8:3::200")
	// PoolRange4 and PoolRange6 are the gateways' address pool "lab": the VIPs the controller
	// hands out (inside VIPPrefix4 and VIPPrefix6, so Static routing covers them too).
	PoolRange4 = netip.MustParsePrefix("198.18.100.0/24")
	PoolRange6 = netip.MustParsePrefix("2001:db8:100::/112")
	// ExampleDualVIP4 and ExampleDualVIP6 are the addresses the example Service default/web-dual
	// asks for (annotation xlb.dev/load-balancer-ips).
	ExampleDualVIP4 = netip.MustParseAddr("198.18.100.100")
	ExampleDualVIP6 = netip.MustParseAddr("2001:db8:100::100")
)

const (
	// PoolName is the gateways' one address pool.
	PoolName = "lab"
	// serviceClusterIPRange4 and serviceIPv6Range are the apiserver's ClusterIP ranges (IPv6
	// for dual-stack Services): lab ranges, since the pods reach them through the node agents.
	serviceClusterIPRange4 = "198.18.96.0/24"
	serviceIPv6Range       = "2001:db8:ffff:96::/112"
	// kubeSetupTimeout bounds the control plane's start and the objects' creation.
	kubeSetupTimeout = 120 * time.Second
	// serviceAddrTimeout bounds the wait for a Service's status addresses.
	serviceAddrTimeout = 20 * time.Second
)

// Kube is a Kubernetes-mode site's control side: the control namespace with etcd and
// kube-apiserver, the admin client, and what the lab plays of the cluster: the kubelet (Node
// objects), the EndpointSlice controller (slices following the Services and the pods'
// labels and states) and kube-proxy's health servers on every node.
type Kube struct {
	// NS is the control namespace "<prefix>-ctl", on the cluster L2 at ControlAddr4/6.
	NS *netlab.NS
	// CP is the control plane running in NS (etcd on its 127.0.0.1, the apiserver on
	// ControlAddr4).
	CP *kubetest.ControlPlane
	// Client is the administrator's client (it connects from inside NS).
	Client kubernetes.Interface
	// AdminKubeconfig is a kubeconfig file of the administrator, for a person's kubectl run
	// inside NS (ip netns exec <NS> kubectl --kubeconfig <file> get svc).
	AdminKubeconfig string
	// DeployDir holds rbac.yaml and examples/.
	DeployDir string

	site   *Site
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	syncMu sync.Mutex // one Sync at a time
	mu     sync.Mutex
	// proxies: node name → its kube-proxy health servers.
	proxies map[string]*nodeProxy
}

// nodeProxy is one node's kube-proxy health servers: the node server on
// proxyhealth.DefaultNodePort and a per-Service server on each eTP=Local Service's
// healthCheckNodePort, all on every address of the node's namespace.
type nodeProxy struct {
	node *Node
	srv  *proxyhealth.Server
	// svcs: healthCheckNodePort → the Service served there and how to stop it.
	svcs map[int32]*healthListener
}

type healthListener struct {
	svc    types.NamespacedName
	cancel context.CancelFunc
	done   chan struct{}
}

// FindDeployDir returns the repository's deploy directory (with rbac.yaml and examples/),
// looked for upwards from the working directory, then from the running program's directory.
func FindDeployDir() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for range 10 {
			if _, err := os.Stat(filepath.Join(d, "deploy", "examples", "services.yaml")); err == nil {
				return filepath.Join(d, "deploy"), nil
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return "", errors.New("lab: deploy/examples/services.yaml not found above the working directory or the program (run from the repository, or set Options.DeployDir)")
}

// addControl makes the control namespace on the cluster L2 and starts the control plane in
// it, in the background: waitControl returns it.
func (s *Site) addControl() (wait func() error, err error) {
	deploy := s.Opts.DeployDir
	if deploy == "" {
		if deploy, err = FindDeployDir(); err != nil {
			return nil, err
		}
	}
	ns, err := s.addNS(s.nsName("ctl"), false)
	if err != nil {
		return nil, err
	}
	if err := veth(ns, "eth0", s.L2, "ctl"); err != nil {
		return nil, err
	}
	if err := ipc(s.L2, "link set ctl master br0"); err != nil {
		return nil, err
	}
	if err := ipc(ns,
		fmt.Sprintf("addr add %s/%d dev eth0", ControlAddr4, ClusterPrefix4.Bits()),
		fmt.Sprintf("addr add %s/%d dev eth0 nodad", ControlAddr6, ClusterPrefix6.Bits())); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kube{NS: ns, DeployDir: deploy, site: s, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1),
		proxies: map[string]*nodeProxy{}}
	s.Kube = k
	// Runs after the gateways' closers (registered later, run first): xlb stops before the
	// apiserver it talks to.
	s.onClose(k.stop)
	type result struct {
		cp  *kubetest.ControlPlane
		err error
	}
	done := make(chan result, 1)
	started := time.Now()
	go func() {
		cp, err := kubetest.Start(ctx, kubetest.Options{
			Dir: filepath.Join(s.Dir, "kube"), NetNS: ns.Name, Address: ControlAddr4,
			StartTimeout:   s.bound(kubeSetupTimeout),
			APIServerFlags: []string{"--service-cluster-ip-range", serviceClusterIPRange4 + "," + serviceIPv6Range},
		})
		done <- result{cp, err}
	}()
	return func() error {
		r := <-done
		if r.err != nil {
			return fmt.Errorf("lab: control plane: %w", r.err)
		}
		k.CP = r.cp
		s.logf("control plane: kube-apiserver %s + etcd %s in %s at %s, ready in %v", kubetest.KubeVersion,
			kubetest.EtcdVersion, ns.Name, r.cp.URL(), time.Since(started).Round(time.Millisecond))
		return nil
	}, nil
}

// stop ends the lab's controllers and health servers and the control plane.
func (k *Kube) stop() error {
	k.cancel()
	k.wg.Wait()
	if k.CP != nil {
		return k.CP.Stop()
	}
	return nil
}

// setup runs once the control plane is up and the nodes and pods exist: RBAC, Nodes,
// kube-proxy's node servers, the example Services, the EndpointSlice controller, and the
// kubeconfigs.
func (k *Kube) setup() error {
	s := k.site
	ctx, cancel := context.WithTimeout(k.ctx, k.site.bound(kubeSetupTimeout))
	defer cancel()
	admin := k.CP.Admin()
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	k.Client = client
	k.AdminKubeconfig = filepath.Join(s.Dir, "admin.kubeconfig")
	if err := kubetest.WriteKubeconfig(k.AdminKubeconfig, admin); err != nil {
		return err
	}
	if err := kubetest.ApplyFile(ctx, admin, filepath.Join(k.DeployDir, "rbac.yaml")); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if err := k.registerNode(ctx, n); err != nil {
			return err
		}
		if err := k.startNodeProxy(n); err != nil {
			return err
		}
	}
	// xlb's CRDs and the lab's AddressPool, before any gateway starts (as `helm install` and a
	// kubectl apply of the operator's pools would).
	if err := kubetest.InstallCRDs(ctx, admin, filepath.Join(k.DeployDir, "helm", "xlb", "crds")); err != nil {
		return err
	}
	if err := kubetest.ApplyFile(ctx, admin, filepath.Join(k.DeployDir, "examples", "addresspools.yaml")); err != nil {
		return err
	}
	if s.Opts.Routing.BGP() {
		var peers []*unstructured.Unstructured
		for _, p := range s.BGPPeerObjects() {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
			if err != nil {
				return fmt.Errorf("lab: BGPPeer %s: %w", p.Name, err)
			}
			peers = append(peers, &unstructured.Unstructured{Object: m})
		}
		if err := kubetest.Apply(ctx, admin, peers...); err != nil {
			return err
		}
	}
	if err := kubetest.ApplyFile(ctx, admin, filepath.Join(k.DeployDir, "examples", "services.yaml")); err != nil {
		return err
	}
	if err := k.Sync(); err != nil {
		return err
	}
	if err := k.runEndpointController(ctx); err != nil {
		return err
	}
	s.logf("kubernetes: RBAC, xlb's CRDs, the AddressPool %q (and with BGP a BGPPeer per gateway and family), %d nodes, the example Services and their EndpointSlices applied", PoolName, len(s.Nodes))
	for _, g := range s.Gateways {
		if err := kubetest.WriteKubeconfig(g.kubeconfigPath(), k.CP.Controller()); err != nil {
			return err
		}
	}
	return nil
}

// registerNode creates n's Node with its status, as its kubelet would.
func (k *Kube) registerNode(ctx context.Context, n *Node) error {
	want := NodeObject(n)
	got, err := k.Client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("lab: create node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	got.Status = want.Status
	for i := range got.Status.Conditions {
		got.Status.Conditions[i].LastHeartbeatTime, got.Status.Conditions[i].LastTransitionTime = now, now
	}
	if _, err := k.Client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("lab: node %s status: %w", n.Name, err)
	}
	return nil
}

// listenIn opens a TCP listener on port (all addresses) inside ns.
func listenIn(ns *netlab.NS, port int) (net.Listener, error) {
	var l net.Listener
	err := ns.Do(func() (err error) {
		l, err = net.Listen("tcp", ":"+strconv.Itoa(port))
		return err
	})
	return l, err
}

// startNodeProxy starts n's kube-proxy node health server (/healthz, /livez on 10256).
func (k *Kube) startNodeProxy(n *Node) error {
	srv := proxyhealth.New(proxyhealth.Options{Families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}})
	l, err := listenIn(n.NS, proxyhealth.DefaultNodePort)
	if err != nil {
		return fmt.Errorf("lab: node %s: kube-proxy health server: %w", n.Name, err)
	}
	k.mu.Lock()
	k.proxies[n.Name] = &nodeProxy{node: n, srv: srv, svcs: map[int32]*healthListener{}}
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		if err := srv.ServeNode(k.ctx, l); err != nil {
			k.site.logf("node %s: kube-proxy node health server: %v", n.Name, err)
		}
	}()
	return nil
}

// Proxy returns node's kube-proxy health servers, to make them fail (SetHealthy(false): the
// proxy is out of sync, /healthz and every per-Service check answer 503; SetEligible(false):
// the Node is being deleted, /healthz answers 503).
func (k *Kube) Proxy(node *Node) *proxyhealth.Server {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.proxies[node.Name]; p != nil {
		return p.srv
	}
	return nil
}

// runEndpointController watches the Services and re-syncs the slices at every change (the
// pods' changes call Sync themselves), until the site closes.
func (k *Kube) runEndpointController(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(k.Client, 0)
	inf := f.Core().V1().Services().Informer()
	kick := func(any) {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
	}); err != nil {
		return err
	}
	f.Start(k.ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("lab: the Service informer did not sync")
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer f.Shutdown()
		for {
			select {
			case <-k.ctx.Done():
				return
			case <-k.kick:
			}
			if err := k.Sync(); err != nil && k.ctx.Err() == nil {
				k.site.logf("endpointslices: %v", err)
			}
		}
	}()
	return nil
}

// Sync brings the lab's EndpointSlices in step with the Services (those with a selector) and
// the pods (labels, states), and each node's kube-proxy health servers with the eTP=Local
// Services: a per-Service server on its healthCheckNodePort answering by the node's ready
// endpoints. The lab calls it on every change; it is safe to call at any time.
func (k *Kube) Sync() error {
	k.syncMu.Lock()
	defer k.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(k.ctx, 10*time.Second)
	defer cancel()
	svcs, err := k.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("lab: list services: %w", err)
	}
	have, err := k.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + SliceManager})
	if err != nil {
		return fmt.Errorf("lab: list endpointslices: %w", err)
	}
	pods := k.site.podList()
	want := map[string]*discoveryv1.EndpointSlice{}
	var order []string
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.DeletionTimestamp != nil {
			continue
		}
		for _, sl := range EndpointSlices(svc, pods) {
			key := sl.Namespace + "/" + sl.Name
			want[key] = sl
			order = append(order, key)
		}
	}
	var errs []error
	for i := range have.Items {
		cur := &have.Items[i]
		key := cur.Namespace + "/" + cur.Name
		w, ok := want[key]
		if !ok {
			if err := k.Client.DiscoveryV1().EndpointSlices(cur.Namespace).Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		delete(want, key)
		if cur.AddressType == w.AddressType && equality.Semantic.DeepEqual(cur.Endpoints, w.Endpoints) &&
			equality.Semantic.DeepEqual(cur.Ports, w.Ports) {
			continue
		}
		w.ResourceVersion = cur.ResourceVersion
		if _, err := k.Client.DiscoveryV1().EndpointSlices(w.Namespace).Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("lab: update endpointslice %s: %w", key, err))
		}
	}
	for _, key := range order {
		w, ok := want[key]
		if !ok {
			continue
		}
		if _, err := k.Client.DiscoveryV1().EndpointSlices(w.Namespace).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("lab: create endpointslice %s: %w", key, err))
		}
	}
	errs = append(errs, k.syncProxies(svcs.Items, pods))
	return errors.Join(errs...)
}

// syncProxies sets each node's local endpoint counts of the eTP=Local Services and opens or
// closes their per-Service health servers.
func (k *Kube) syncProxies(svcs []corev1.Service, pods []*Pod) error {
	type local struct {
		svc  types.NamespacedName
		port int32
	}
	var locals []local
	for i := range svcs {
		s := &svcs[i]
		if s.DeletionTimestamp == nil && s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && s.Spec.HealthCheckNodePort > 0 {
			locals = append(locals, local{types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, s.Spec.HealthCheckNodePort})
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, np := range k.proxies {
		wanted := map[int32]bool{}
		for _, l := range locals {
			svc := findService(svcs, l.svc)
			n := 0
			for _, p := range pods {
				if p.Node == np.node && p.State() == PodReady && selects(svc, p.Labels) {
					n++
				}
			}
			np.srv.SetLocalEndpoints(l.svc, n)
			wanted[l.port] = true
			if cur, ok := np.svcs[l.port]; ok && cur.svc == l.svc {
				continue
			} else if ok {
				cur.cancel()
				<-cur.done
				delete(np.svcs, l.port)
			}
			ln, err := listenIn(np.node.NS, int(l.port))
			if err != nil {
				errs = append(errs, fmt.Errorf("lab: node %s: health server of %s on %d: %w", np.node.Name, l.svc, l.port, err))
				continue
			}
			ctx, cancel := context.WithCancel(k.ctx)
			hl := &healthListener{svc: l.svc, cancel: cancel, done: make(chan struct{})}
			np.svcs[l.port] = hl
			go func() {
				defer close(hl.done)
				if err := np.srv.ServeService(ctx, l.svc, ln); err != nil {
					k.site.logf("node %s: health server of %s: %v", np.node.Name, l.svc, err)
				}
			}()
		}
		for port, hl := range np.svcs {
			if !wanted[port] {
				hl.cancel()
				<-hl.done
				np.srv.SetLocalEndpoints(hl.svc, 0)
				delete(np.svcs, port)
			}
		}
	}
	return errors.Join(errs...)
}

func findService(svcs []corev1.Service, key types.NamespacedName) *corev1.Service {
	for i := range svcs {
		if svcs[i].Namespace == key.Namespace && svcs[i].Name == key.Name {
			return &svcs[i]
		}
	}
	return &corev1.Service{}
}

// ServiceAddrs returns the addresses in the Service's status.loadBalancer.ingress.
func (k *Kube) ServiceAddrs(ctx context.Context, namespace, name string) ([]netip.Addr, error) {
	svc, err := k.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return ingressAddrs(svc), nil
}

func ingressAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, ok := viewAddr(in.IP); ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// WaitServiceAddrs waits until the Service has an address of each of its IP families in its
// status, and returns them.
func (k *Kube) WaitServiceAddrs(namespace, name string, timeout time.Duration) ([]netip.Addr, error) {
	deadline := time.Now().Add(timeout)
	var last []netip.Addr
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(k.ctx, 2*time.Second)
		svc, err := k.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		cancel()
		if err == nil {
			last, lastErr = ingressAddrs(svc), nil
			if len(last) >= len(serviceFamilies(svc)) {
				return last, nil
			}
		} else {
			lastErr = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return last, fmt.Errorf("lab: service %s/%s: no address of each family within %v (have %v, %v)", namespace, name, timeout, last, lastErr)
}

// ExampleServices returns the Services of deploy/examples/services.yaml, as the apiserver has
// them now (allocated fields, status).
func (k *Kube) ExampleServices(ctx context.Context) ([]corev1.Service, error) {
	l, err := k.Client.CoreV1().Services(KubeNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Service
	for _, s := range l.Items {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			out = append(out, s)
		}
	}
	return out, nil
}

// waitKubeRoutes waits until every LoadBalancer Service has its addresses and, with BGP
// routing, until the router routes each via every gateway.
func (s *Site) waitKubeRoutes() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	svcs, err := s.Kube.ExampleServices(ctx)
	cancel()
	if err != nil {
		return err
	}
	for _, svc := range svcs {
		vips, err := s.Kube.WaitServiceAddrs(svc.Namespace, svc.Name, s.bound(serviceAddrTimeout))
		if err != nil {
			return err
		}
		if !s.Opts.Routing.BGP() {
			continue
		}
		for _, vip := range vips {
			d, err := s.WaitRouterRoute(vip, s.bound(bgpUpTimeout), s.Gateways...)
			if err != nil {
				return err
			}
			s.logf("router: %s (%s/%s) learned over BGP via %v (%v)", vip, svc.Namespace, svc.Name,
				gatewayNames(s.Gateways), d.Round(time.Millisecond))
		}
	}
	return nil
}

// podList returns the site's pods.
func (s *Site) podList() []*Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.Pods)
}

// SetPodState changes p's endpoint conditions and, in Kubernetes mode, syncs the slices and
// the health servers (PodTerminating: no new flows, established ones stay; PodDeleted: gone
// from the slices).
func (s *Site) SetPodState(p *Pod, st PodState) error {
	p.setState(st)
	s.logf("pod %s: %v", p.Name, st)
	if s.Kube == nil || s.Kube.Client == nil {
		return nil
	}
	return s.Kube.Sync()
}

func (st PodState) String() string {
	switch st {
	case PodReady:
		return "ready"
	case PodTerminating:
		return "terminating (serving)"
	case PodNotReady:
		return "not ready"
	case PodDeleted:
		return "deleted"
	}
	return fmt.Sprintf("PodState(%d)", int(st))
}

// kubeconfigPath is the gateway's kubeconfig (Kubernetes mode).
func (g *Gateway) kubeconfigPath() string {
	return filepath.Join(g.site.Dir, g.Name+".kubeconfig")
}

// GatewayName is gateway g's Kubernetes identity (Lease holder, event source): "gw<g>".
func (g *Gateway) GatewayName() string { return "gw" + strconv.Itoa(g.Index) }
