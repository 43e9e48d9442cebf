// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/kube"
)

// TestRunDSR runs the agent with direct server return against a real kube-apiserver, as its
// own ServiceAccount under deploy/agent.yaml (RBAC and the admission policy; its token naming
// node n1), on datapaths in memory (no root: xdp/dsr's tests and cmd/xlb's hold the real one):
//   - the pairs are the node's endpoints of the LoadBalancer Services of the gateways' class
//     only (not n2's, not another class's), and follow an EndpointSlice change;
//   - once they are applied, xlb.dev/dsr=v1 is on the Node;
//   - the interfaces toward the Pods are looked up for every local endpoint (ClusterIP
//     Services' too) and the Node's Pod CIDRs;
//   - a plain stop leaves the annotation and the pinned datapath; a stop with Cleanup
//     withdraws the annotation, then removes the datapath; an agent started without DSR
//     withdraws an annotation an earlier one left.
func TestRunDSR(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(),
		APIServerFlags: []string{"--service-cluster-ip-range=198.18.96.0/24"}})
	if err != nil {
		t.Fatalf("start kube-apiserver %s: %v", kubetest.KubeVersion, err)
	}
	t.Cleanup(func() { cp.Stop() })
	_, file, _, _ := runtime.Caller(0)
	for _, f := range []string{"rbac.yaml", "agent.yaml"} {
		if err := kubetest.ApplyFile(ctx, cp.Admin(), filepath.Join(filepath.Dir(file), "..", "..", "deploy", f)); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := kubernetes.NewForConfig(cp.Admin())
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.As("system:serviceaccount:xlb-system:xlb-agent", "system:serviceaccounts", "system:serviceaccounts:xlb-system")
	cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 20 s: %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for name, cidr := range map[string]string{"n1": "198.18.4.0/24", "n2": "198.18.5.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotation := func() string {
		n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[kube.AnnotationDSR]
	}
	// web (our class) and other (another class), with VIPs in their status; plain, a ClusterIP
	// Service. Each has an endpoint on n1 and web one on n2 too.
	no := false
	mkService := func(name, class, vip string, addrs ...string) *discoveryv1.EndpointSlice {
		t.Helper()
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if class != "" {
			s.Spec.Type, s.Spec.LoadBalancerClass, s.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeLoadBalancer, &class, &no
		}
		s, err := admin.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if vip != "" {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: vip}}
			if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pn, port, yes := "http", int32(8080), true
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port}},
		}
		for i := 0; i < len(addrs); i += 2 {
			node := addrs[i+1]
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{addrs[i]}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
		}
		if sl, err = admin.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return sl
	}
	webSlice := mkService("web", kube.DefaultClass, "198.18.100.1", "198.18.4.2", "n1", "198.18.5.2", "n2")
	mkService("other", "example.org/lb", "198.18.100.2", "198.18.4.5", "n1")
	mkService("plain", "", "", "198.18.4.7", "n1")

	dsr := newFakeDSR()
	routes := &fakeRoutes{table: map[netip.Prefix][]string{}}
	routes.set("198.18.4.0/24", "v0", "v1")
	sock := newFakeSocketLB()
	// run starts an agent and returns its listener and what stops it and waits for Run.
	run := func(opts Options) (net.Listener, func()) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log, _ := newLogs(t)
		opts.Node, opts.Client, opts.Datapath, opts.Listener, opts.Log = "n1", client, sock, ln, log
		opts.PinPath = "/sys/fs/bpf/xlb-agent-test"
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- Run(rctx, opts) }()
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			rcancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("Run did not return within 15 s of its context's end")
			}
		}
		t.Cleanup(stop)
		return ln, stop
	}
	dsrOpts := func() *DSROptions {
		return &DSROptions{Datapath: dsr, Uplinks: []string{"n0"}, PinPath: "/sys/fs/bpf/xlb-dsr-test", Routes: routes}
	}

	ln, stop := run(Options{DSR: dsrOpts()})
	web := "198.18.100.1:80/TCP -> 198.18.4.2:8080"
	eventually("web's pair of n1, and nothing else", func() bool { return slices.Equal(dsr.held(), []string{web}) })
	eventually("xlb.dev/dsr=v1 on the Node", func() bool { return annotation() == kube.DSRCarrierVersion })
	eventually("the interfaces toward n1's Pods looked up from its endpoints and Pod CIDR", func() bool {
		return slices.Equal(routes.lastAsked(), prefixes("198.18.4.0/24", "198.18.4.2/32", "198.18.4.5/32", "198.18.4.7/32"))
	})
	if ifs := dsr.Interfaces(); len(ifs) != 3 || ifs["n0"] != 3 || ifs["v0"] != 2 || ifs["v1"] != 2 {
		t.Errorf("interfaces %v: want n0 both, v0 and v1 egress", ifs)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "xlb_agent_dsr_pairs 1\n") || !strings.Contains(string(body), "xlb_agent_frontends ") {
		t.Errorf("/metrics:\n%s", body)
	}
	// An endpoint joins on n1, the first leaves.
	webSlice.Endpoints = append(webSlice.Endpoints[1:], discoveryv1.Endpoint{Addresses: []string{"198.18.4.3"},
		NodeName: webSlice.Endpoints[0].NodeName, Conditions: webSlice.Endpoints[0].Conditions})
	if _, err = admin.DiscoveryV1().EndpointSlices("default").Update(ctx, webSlice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	web = "198.18.100.1:80/TCP -> 198.18.4.3:8080"
	eventually("the pairs follow the slice", func() bool { return slices.Equal(dsr.held(), []string{web}) })

	// A plain stop: the pinned datapath keeps serving, the annotation stays.
	stop()
	if !dsr.closed || dsr.removed || annotation() != kube.DSRCarrierVersion {
		t.Errorf("after a plain stop: closed %v removed %v annotation %q; want closed, the annotation kept", dsr.closed, dsr.removed, annotation())
	}
	// The next agent, with Cleanup: it adopts, and at exit withdraws the annotation first.
	dsr.closed = false
	_, stop = run(Options{DSR: dsrOpts(), Cleanup: true})
	eventually("the restarted agent's pass", func() bool { return slices.Equal(dsr.held(), []string{web}) && annotation() == kube.DSRCarrierVersion })
	stop()
	if !dsr.removed || annotation() != "" {
		t.Errorf("after a stop with Cleanup: removed %v annotation %q; want removed and withdrawn", dsr.removed, annotation())
	}
	// An agent without DSR withdraws what an earlier one left.
	if _, err := kube.SetNodeDSR(ctx, admin, "n1", true); err != nil {
		t.Fatal(err)
	}
	_, stop = run(Options{})
	eventually("an agent without DSR withdraws the annotation", func() bool { return annotation() == "" })
	stop()
}
