// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlb-dev/xlb/internal/lab"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestClusterLoadBalancer runs an xlb gateway (Kubernetes mode, return path) against the real
// cluster: a LoadBalancer Service of class xlb.dev/xdp over two Pods on two nodes gets a VIP
// from the AddressPool and the cleanup finalizer, a client on another /16 reaches both Pods
// through the VIP with its own address as the source the Pods see, and once the Service is
// deleted the VIP no longer answers and the finalizer let it go.
func TestClusterLoadBalancer(t *testing.T) {
	netlab.RequireRoot(t, "a cluster needs network namespaces, cgroups and containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	// Cancelled after Close (cleanups run last first): the control plane lives as long as ctx.
	t.Cleanup(cancel)
	xlb := os.Getenv("XLB_BIN")
	if xlb == "" {
		var err error
		if xlb, err = lab.Build(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	deploy, err := lab.FindDeployDir()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Options{Nodes: 2, Logf: t.Logf, KeepDir: os.Getenv("XLB_CLUSTER_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAndCheck(t, c) })
	t.Logf("cluster up in %s (dir %s)", c.StartDur.Round(time.Second), c.Dir())
	began := time.Now()
	gw, err := c.StartGateway(ctx, GatewayOptions{XLB: xlb, DeployDir: deploy})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("xlb gateway ready in %s", time.Since(began).Round(100*time.Millisecond))
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	createEchoPods(ctx, t, cs, "web", labels, 2)
	class := "xlb.dev/xdp"
	if _, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPodsRunning(ctx, t, c, labels, 2, 3*time.Minute)
	created := time.Now()
	var svc *corev1.Service
	var vip netip.Addr
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		svc, err = cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 {
			if vip, err = netip.ParseAddr(ing[0].IP); err != nil {
				t.Fatalf("Service web ingress %+v: %v", ing, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Service web has no ingress address after 1 min:\n%s", gw.Log(30))
		}
	}
	t.Logf("VIP %s assigned %s after the Pods were Ready", vip, time.Since(created).Round(100*time.Millisecond))
	if !netip.MustParsePrefix("198.18.100.0/24").Contains(vip) {
		t.Errorf("VIP %s not from the AddressPool lab", vip)
	}
	if !slices.Contains(svc.Finalizers, "service.kubernetes.io/load-balancer-cleanup") {
		t.Errorf("Service web finalizers %v, want the load-balancer cleanup finalizer", svc.Finalizers)
	}
	// The client reaches both Pods through the VIP (the first answers may wait for the
	// gateway's reconcile of the endpoints), and they see its own address.
	seen := map[string]bool{}
	var last string
	for deadline := time.Now().Add(30 * time.Second); len(seen) < 2 && time.Now().Before(deadline); {
		out, err := gw.Curl("http://" + vip.String() + "/hostname")
		if err == nil {
			seen[out] = true
		} else {
			last = err.Error() + " " + out
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !seen[pods[0].Name] || !seen[pods[1].Name] || len(seen) != 2 {
		t.Fatalf("VIP %s from the client reached %v, want both pods (last error %s)\n%s", vip, seen, last, gw.Log(30))
	}
	out, err := gw.Curl("http://" + vip.String() + "/clientip")
	if err != nil || !strings.HasPrefix(out, ClientAddr4.String()+":") {
		t.Errorf("a Pod saw the client as %q (%v), want %s", out, err, ClientAddr4)
	}
	// Deleted: the finalizer goes once xlb has released the address, and the VIP stops
	// answering.
	if err := cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if _, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Service web still there 30 s after its deletion (finalizer kept):\n%s", gw.Log(30))
		}
	}
	answered := true
	for deadline := time.Now().Add(10 * time.Second); answered && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		_, err := gw.Curl("--max-time", "1", "http://"+vip.String()+"/hostname")
		answered = err == nil
	}
	if answered {
		t.Errorf("VIP %s still answers 10 s after its Service was deleted", vip)
	}
}
