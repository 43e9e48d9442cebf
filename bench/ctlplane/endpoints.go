package ctlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/xlb-dev/xlb/bench/report"
	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// sliceUpdates is how many EndpointSlice changes the latency is measured over.
const sliceUpdates = 30

// endpointLatency measures the time from an EndpointSlice update (the API call returning) to
// the datapath maps holding the change: the real kube-apiserver, the lb/kube controller, Plan
// and the reconciler applying to an unpinned datapath, as `xlb run` does. It needs the
// kube-apiserver binaries `make kube-bins` builds (it does not build them: that takes minutes).
func endpointLatency() report.Metric {
	const name = "EndpointSlice -> datapath maps latency"
	lat, err := measureEndpointLatency()
	if err != nil {
		return report.Metric{Name: name, Note: fmt.Sprintf("not measured: %v", err)}
	}
	slices.Sort(lat)
	med, worst := lat[len(lat)/2], lat[len(lat)-1]
	return report.Metric{Name: name, Value: float64(med.Microseconds()) / 1000, Unit: "ms",
		Note: fmt.Sprintf("median of %d slice updates (100 endpoints, one changes), max %.1f ms; real kube-apiserver, "+
			"controller, plan and apply (bound 200 ms)", len(lat), float64(worst.Microseconds())/1000)}
}

func measureEndpointLatency() ([]time.Duration, error) {
	bins := kubetest.BinDir()
	if _, err := os.Stat(filepath.Join(bins, "stamp")); err != nil {
		return nil, fmt.Errorf("no kube-apiserver in %s (run make kube-bins)", bins)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "xlb-bench-kube-")
	if err != nil {
		return nil, err
	}
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: dir, Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	klog.LogToStderr(false)
	klog.SetOutput(discard{})
	client, err := kubernetes.NewForConfig(cp.Admin())
	if err != nil {
		return nil, err
	}
	const ns, class = "bench", "xlb.dev/xdp"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "xlb-system"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	r, err := ipam.ParseRange("198.18.100.0/24")
	if err != nil {
		return nil, err
	}
	changed := make(chan struct{}, 1)
	ctrl, err := kube.New(client, kube.Options{
		Pools:  []kube.Pool{{Pool: ipam.Pool{Name: "bench", Ranges: []ipam.Range{r}, AutoAssign: true}}},
		Leader: kube.LeaderOptions{Identity: "bench"},
		Changed: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ctrl.Run(runCtx) }()
	defer func() { stop(); <-done }()

	dp, err := xdp.Load(xdp.Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096}})
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	rec, err := reconcile.New(dp, nil)
	if err != nil {
		return nil, err
	}
	// apply plans the controller's model into the datapath and reports whether backend addr is
	// among the backends written.
	apply := func(addr netip.Addr) (bool, error) {
		d, errs := lb.Plan(ctrl.Services(), lb.PlanOptions{Seed: 1})
		if len(errs) > 0 {
			return false, errs[0]
		}
		if _, err := rec.Apply(d); err != nil {
			return false, err
		}
		for _, p := range d.Frontends {
			for _, b := range p.Backends {
				if b.Key.Addr() == addr && b.Weight > 0 {
					return true, nil
				}
			}
		}
		return false, nil
	}

	no := false
	c := class
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &c, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pn, port, yes := "http", int32(8080), true
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &pn, Port: &port}}}
	for i := range 100 {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.18.40.%d", i+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
	}
	if sl, err = client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var lat []time.Duration
	for i := range sliceUpdates {
		// Replace the last endpoint with a new address, and time until the maps serve it.
		addr := netip.AddrFrom4([4]byte{198, 18, 41, byte(i + 1)})
		sl.Endpoints[len(sl.Endpoints)-1].Addresses = []string{addr.String()}
		start := time.Now()
		if sl, err = client.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		deadline := time.After(5 * time.Second)
		for served := false; !served; {
			select {
			case <-changed:
			case <-time.After(10 * time.Millisecond):
			case <-deadline:
				return nil, errors.New("the datapath did not serve a new endpoint within 5 s")
			}
			if served, err = apply(addr); err != nil {
				return nil, err
			}
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// discard is an io.Writer that drops everything (client-go's klog output).
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
