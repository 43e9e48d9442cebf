// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
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
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestRun runs the agent against a real kube-apiserver (cluster IPs from a lab range; the
// datapath in memory, so no traffic and no root): a Service's EndpointSlice reaches the
// datapath, /healthz and /metrics answer on the listener, an endpoint leaving a UDP Service
// closes its connected sockets, and at exit the pinned datapath is closed, not removed. A
// second agent adopts what the first left, writing nothing, and with Cleanup removes it.
// Without the apiserver's binaries it fails, never skips.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(),
		APIServerFlags: []string{"--service-cluster-ip-range=198.18.96.0/24"}})
	if err != nil {
		t.Fatalf("start kube-apiserver %s: %v", kubetest.KubeVersion, err)
	}
	t.Cleanup(func() { cp.Stop() })
	admin, err := kubernetes.NewForConfig(cp.Admin())
	if err != nil {
		t.Fatal(err)
	}
	dp := newFakeSocketLB()

	// run starts an agent on dp and returns what stops it and waits for Run's return.
	run := func(opts Options) (ln net.Listener, stop func()) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log, _ := newLogs(t)
		opts.Node, opts.Client, opts.Datapath, opts.Listener, opts.Log = "n1", admin, dp, ln, log
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- Run(rctx, opts) }()
		stopped := false
		stop = func() {
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
			case <-time.After(10 * time.Second):
				t.Error("Run did not return within 10 s of its context's end")
			}
		}
		t.Cleanup(stop)
		return ln, stop
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
	httpGet := func(ln net.Listener, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	ln, stop := run(Options{PinPath: "/sys/fs/bpf/xlb-agent-test", NetnsDir: "/run/netns-test"})
	dns, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	front := datapath.Frontend{Addr: netip.MustParseAddr(dns.Spec.ClusterIP), Port: 53, Proto: datapath.UDP}
	name, port, udp, yes, node := "dns", int32(5353), corev1.ProtocolUDP, true, "n1"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &udp}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.18.1.20"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"198.18.1.21"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		},
	}
	if sl, err = admin.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	endpoints := func() (eps []string) {
		dp.with(func() {
			for _, e := range dp.held[front].Endpoints {
				eps = append(eps, e.String())
			}
		})
		return eps
	}
	eventually("the datapath holds dns's two endpoints", func() bool {
		return slices.Equal(endpoints(), []string{"198.18.1.20:5353", "198.18.1.21:5353"})
	})
	if code, body := httpGet(ln, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	// dns and the apiserver's default/kubernetes (which may be applied a moment after dns: CI
	// once read 1).
	var body string
	eventually("/metrics counts 2 frontends", func() bool {
		_, body = httpGet(ln, "/metrics")
		return strings.Contains(body, "xlb_agent_frontends 2\n")
	})
	if !strings.Contains(body, "xlb_agent_scrape_errors 0\n") {
		t.Errorf("/metrics:\n%s", body)
	}

	sl.Endpoints = sl.Endpoints[1:]
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("the endpoint that left dns has its connected sockets closed in the NetnsDir", func() bool {
		var calls []string
		dp.with(func() { calls = slices.Clone(dp.closeCalls) })
		return slices.Equal(endpoints(), []string{"198.18.1.21:5353"}) && slices.Equal(calls, []string{"/run/netns-test"})
	})
	stop()
	dp.with(func() {
		if !dp.closedDP || dp.removed {
			t.Errorf("at exit the pinned datapath: closed %v, removed %v; want closed only", dp.closedDP, dp.removed)
		}
		dp.closedDP, dp.sets, dp.deletes, dp.commits = false, 0, 0, 0
	})

	// The next agent adopts what the datapath holds: its first pass writes nothing.
	_, stop = run(Options{PinPath: "/sys/fs/bpf/xlb-agent-test", Cleanup: true})
	eventually("the second agent's first pass", func() bool {
		n := 0
		dp.with(func() { n = dp.commits })
		return n > 0
	})
	stop()
	dp.with(func() {
		if dp.sets != 0 || dp.deletes != 0 {
			t.Errorf("the second agent wrote %d and removed %d frontends, want none (adopted)", dp.sets, dp.deletes)
		}
		if !dp.removed {
			t.Error("with Cleanup the datapath is not removed at exit")
		}
	})
}
