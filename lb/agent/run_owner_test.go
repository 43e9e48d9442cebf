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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestRunFrontendOwnership runs two agents (nodes n1 and n2, each on its own in-memory
// datapath) against a real kube-apiserver whose service CIDR they learn from its ServiceCIDR
// object alone (no --service-cidr), with external IPs allowed in 198.18.99.0/24:
//   - the cluster-IP takeover: a Service aaa-tenant/evil, named to sort first, with the
//     kube-dns cluster IP as an external IP on 53/UDP, does not get kube-dns's frontends; it
//     gets one ExternalIPRefused Event (one for both agents, and not one per pass), the agents
//     count it on /metrics, and evil's own cluster IP serves;
//   - two Services claiming one external IP: the older has the port both claim, the younger
//     (named to sort first) keeps its other port and gets a FrontendConflict Event.
//
// Without the apiserver's binaries it fails, never skips.
func TestRunFrontendOwnership(t *testing.T) {
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
	policy := kube.AddressPolicy{ExternalIPs: []netip.Prefix{netip.MustParsePrefix("198.18.99.0/24")}}
	type running struct {
		dp *fakeSocketLB
		ln net.Listener
	}
	var agents []running
	for _, node := range []string{"n1", "n2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log, _ := newLogs(t)
		dp := newFakeSocketLB()
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(rctx, Options{Node: node, Client: admin, Datapath: dp, Listener: ln, Log: log, PinPath: "/sys/fs/bpf/xlb-agent-test", Policy: policy})
		}()
		t.Cleanup(func() {
			rcancel()
			if err := <-done; err != nil {
				t.Errorf("Run (%s): %v", node, err)
			}
		})
		agents = append(agents, running{dp, ln})
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
	// endpoints is what agent i's datapath holds for f.
	endpoints := func(i int, f datapath.Frontend) (eps []string, ok bool) {
		agents[i].dp.with(func() {
			var cf datapath.ConnectFrontend
			if cf, ok = agents[i].dp.held[f]; ok {
				for _, e := range cf.Endpoints {
					eps = append(eps, e.String())
				}
			}
		})
		return eps, ok
	}
	holds := func(f datapath.Frontend, want ...string) func() bool {
		return func() bool {
			for i := range agents {
				if got, ok := endpoints(i, f); !ok || !slices.Equal(got, want) {
					return false
				}
			}
			return true
		}
	}
	ns := func(name string) {
		t.Helper()
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	yes := true
	// service creates namespace/name with ports and externalIPs, and its EndpointSlice with
	// one ready endpoint at addr (target port = port + 10000).
	service := func(namespace, name, clusterIP string, externalIPs []string, addr string, ports ...corev1.ServicePort) *corev1.Service {
		t.Helper()
		for i := range ports {
			ports[i].TargetPort = intstr.FromInt32(ports[i].Port + 10000)
		}
		svc, err := admin.CoreV1().Services(namespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports, ExternalIPs: externalIPs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var eps []discoveryv1.EndpointPort
		for _, p := range ports {
			target := p.Port + 10000
			eps = append(eps, discoveryv1.EndpointPort{Name: &p.Name, Port: &target, Protocol: &p.Protocol})
		}
		if _, err := admin.DiscoveryV1().EndpointSlices(namespace).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       eps,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	events := func(namespace, name, reason string) []corev1.Event {
		t.Helper()
		l, err := admin.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	metrics := func(i int) string {
		t.Helper()
		resp, err := http.Get("http://" + agents[i].ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	front := func(addr string, port uint16, proto datapath.Protocol) datapath.Frontend {
		return datapath.Frontend{Addr: netip.MustParseAddr(addr), Port: port, Proto: proto}
	}
	dnsPorts := func() []corev1.ServicePort {
		return []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}
	}

	// The takeover.
	ns("kube-system") // the apiserver makes it too, a moment after it starts
	service("kube-system", "kube-dns", "198.18.96.10", nil, "198.18.1.53", dnsPorts()...)
	eventually("both agents balance kube-dns", holds(front("198.18.96.10", 53, datapath.UDP), "198.18.1.53:10053"))
	ns("aaa-tenant")
	evil := service("aaa-tenant", "evil", "", []string{"198.18.96.10"}, "198.18.1.66", corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	eventually("evil's own cluster IP is balanced", holds(front(evil.Spec.ClusterIP, 53, datapath.UDP), "198.18.1.66:10053"))
	eventually("evil gets an ExternalIPRefused Event", func() bool { return len(events("aaa-tenant", "evil", kube.ReasonExternalIPRefused)) > 0 })
	for _, f := range []datapath.Frontend{front("198.18.96.10", 53, datapath.UDP), front("198.18.96.10", 53, datapath.TCP)} {
		if !holds(f, "198.18.1.53:10053")() {
			for i := range agents {
				got, _ := endpoints(i, f)
				t.Errorf("agent %d: kube-dns's %s goes to %v, want kube-dns's endpoint only", i, f, got)
			}
		}
	}
	ev := events("aaa-tenant", "evil", kube.ReasonExternalIPRefused)[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.UID != evil.UID || ev.Source.Component != "xlb-agent" ||
		!strings.Contains(ev.Message, "198.18.96.10 is inside the service CIDR 198.18.96.0/24") {
		t.Errorf("event %s %s %q (object %v, source %v)", ev.Type, ev.Reason, ev.Message, ev.InvolvedObject, ev.Source)
	}
	for i := range agents {
		if m := metrics(i); !strings.Contains(m, `xlb_agent_refused_services{reason="ExternalIPRefused"} 1`+"\n") ||
			!strings.Contains(m, `xlb_agent_refused_services{reason="FrontendConflict"} 0`+"\n") {
			t.Errorf("agent %d /metrics:\n%s", i, m)
		}
	}

	// Oldest first, per frontend. young is made a second after old (creationTimestamp has
	// whole seconds) and named to sort first.
	ns("aa")
	ns("zz")
	http80 := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}
	old := service("zz", "old", "", []string{"198.18.99.7"}, "198.18.1.10", http80)
	time.Sleep(1100 * time.Millisecond)
	young := service("aa", "young", "", []string{"198.18.99.7"}, "198.18.1.20", http80, https)
	eventually("young keeps 198.18.99.7:443 and its cluster IP", func() bool {
		return holds(front("198.18.99.7", 443, datapath.TCP), "198.18.1.20:10443")() &&
			holds(front(young.Spec.ClusterIP, 80, datapath.TCP), "198.18.1.20:10080")() &&
			holds(front(young.Spec.ClusterIP, 443, datapath.TCP), "198.18.1.20:10443")()
	})
	if !holds(front("198.18.99.7", 80, datapath.TCP), "198.18.1.10:10080")() || !holds(front(old.Spec.ClusterIP, 80, datapath.TCP), "198.18.1.10:10080")() {
		got, _ := endpoints(0, front("198.18.99.7", 80, datapath.TCP))
		t.Errorf("198.18.99.7:80 goes to %v, want old's endpoint (old is older)", got)
	}
	eventually("young gets a FrontendConflict Event", func() bool { return len(events("aa", "young", kube.ReasonFrontendConflict)) > 0 })
	if ev := events("aa", "young", kube.ReasonFrontendConflict)[0]; !strings.Contains(ev.Message, "198.18.99.7:80/TCP belongs to zz/old, created earlier") {
		t.Errorf("young's event: %q", ev.Message)
	}
	if evs := events("zz", "old", kube.ReasonFrontendConflict); len(evs) != 0 {
		t.Errorf("old, which has the frontend, got %v", evs)
	}

	// More passes (each change is one, on each agent) record nothing more: one Event per
	// problem for the two agents, once.
	for i := range 3 {
		svc := service("zz", "other"+string(rune('a'+i)), "", nil, "198.18.1.30", http80)
		eventually("the agents take up another change", holds(front(svc.Spec.ClusterIP, 80, datapath.TCP), "198.18.1.30:10080"))
	}
	time.Sleep(time.Second) // for an Event that would be late
	for _, c := range []struct{ ns, name, reason string }{{"aaa-tenant", "evil", kube.ReasonExternalIPRefused}, {"aa", "young", kube.ReasonFrontendConflict}} {
		if evs := events(c.ns, c.name, c.reason); len(evs) != 1 || evs[0].Count != 1 {
			t.Errorf("%s/%s: %d %s Events (first count %v), want one for both agents and every pass", c.ns, c.name, len(evs), c.reason, evs)
		}
	}
	for i := range agents {
		if m := metrics(i); !strings.Contains(m, `xlb_agent_refused_services{reason="FrontendConflict"} 1`+"\n") {
			t.Errorf("agent %d /metrics:\n%s", i, m)
		}
	}
}
