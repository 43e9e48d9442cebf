// SPDX-License-Identifier: Apache-2.0
package ctlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/gateway"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// sliceUpdates is how many EndpointSlice changes the latency is measured over.
const sliceUpdates = 30

// endpointLatency measures the time from an EndpointSlice update (the API call returning) to
// the datapath maps holding the change (a Maglev table naming the new endpoint): the real
// kube-apiserver and the appliance's own loop (gateway.Run in Kubernetes mode) applying to an
// unpinned datapath, as `xlb run` does. It needs the
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
			"the gateway's loop (bound 200 ms)", len(lat), float64(worst.Microseconds())/1000)}
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
	defer os.RemoveAll(dir)
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
	dp, err := loadDatapath()
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	// served receives the time of each table write that makes a backend serve; the loop below
	// takes the one that names the address it waits for.
	type write struct {
		addrs map[netip.Addr]bool
		at    time.Time
	}
	served := make(chan write, 64)
	dp.tableWritten = func(table []datapath.BackendID, bes map[datapath.BackendID]datapath.Backend, at time.Time) {
		w := write{addrs: map[netip.Addr]bool{}, at: at}
		for _, id := range table {
			w.addrs[bes[id].Addr] = true
		}
		select {
		case served <- w:
		default:
		}
	}
	cfgPath := filepath.Join(dir, "xlb.yaml")
	cfgText := `interfaces: [{name: bench0, role: both}]
datapath: {seed: 1, backendWarmup: "off"}
pools: [{name: bench, addresses: [198.18.100.0/24]}]
kubernetes: {nodeHealthPort: 0, gatewayName: bench}
`
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- gateway.Run(runCtx, gateway.Options{ConfigPath: cfgPath, Listener: ln, KubeClient: client,
			Log: io.Discard, LoadDatapath: func(*config.Config, *slog.Logger) (datapath.Gateway, error) { return dp, nil }})
	}()
	defer func() { stop(); <-done }()

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
	// The first time, the gateway allocates the VIP and writes the whole table: wait for it
	// before timing single changes.
	for ready, first := false, netip.AddrFrom4([4]byte{198, 18, 40, 1}); !ready; {
		select {
		case w := <-served:
			ready = w.addrs[first]
		case err := <-done:
			return nil, fmt.Errorf("the gateway stopped: %v", err)
		case <-ctx.Done():
			return nil, errors.New("the gateway did not serve the Service within the benchmark's time")
		}
	}
	var lat []time.Duration
	for i := range sliceUpdates {
		// Replace the last endpoint with a new address, and time until a table names it.
		addr := netip.AddrFrom4([4]byte{198, 18, 41, byte(i + 1)})
		sl.Endpoints[len(sl.Endpoints)-1].Addresses = []string{addr.String()}
		start := time.Now()
		if sl, err = client.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		deadline := time.After(5 * time.Second)
		for waiting := true; waiting; {
			select {
			case w := <-served:
				if w.addrs[addr] {
					lat, waiting = append(lat, w.at.Sub(start)), false
				}
			case err := <-done:
				return nil, fmt.Errorf("the gateway stopped: %v", err)
			case <-deadline:
				return nil, errors.New("the datapath did not serve a new endpoint within 5 s")
			}
		}
	}
	return lat, nil
}

// discard is an io.Writer that drops everything (client-go's klog output).
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
