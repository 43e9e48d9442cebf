// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestClusterPods brings up a two-node cluster and proves every part is real: the scheduler
// places one agnhost Pod per node (anti-affinity), the kubelets run them in containerd with
// Pod IPs from their node's range, and each Pod reaches the other node's Pod directly and the
// Service's cluster IP reaches both (kube-proxy's nftables), from a node and from inside a Pod.
func TestClusterPods(t *testing.T) {
	netlab.RequireRoot(t, "a cluster needs network namespaces, cgroups and containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	// Cancelled after Close (cleanups run last first): the control plane lives as long as ctx.
	t.Cleanup(cancel)
	c, err := Start(ctx, Options{Nodes: 2, Logf: t.Logf, KeepDir: os.Getenv("XLB_CLUSTER_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAndCheck(t, c) })
	t.Logf("cluster up in %s (dir %s)", c.StartDur.Round(time.Second), c.Dir())
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "echo"}
	created := time.Now()
	createEchoPods(ctx, t, cs, "echo", labels, 2)
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := waitPodsRunning(ctx, t, c, labels, 2, 3*time.Minute)
	t.Logf("2 Pods Running and Ready %s after their creation", time.Since(created).Round(100*time.Millisecond))
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Fatalf("both pods on %s despite anti-affinity", pods[0].Spec.NodeName)
	}
	for _, p := range pods {
		node := c.Node(p.Spec.NodeName)
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if node == nil || err != nil || !node.PodCIDR4.Contains(ip) {
			t.Errorf("pod %s IP %q not in its node %q's range", p.Name, p.Status.PodIP, p.Spec.NodeName)
		}
	}
	// From node 1's namespace (kube-proxy's rules apply there too): both Pods, then the
	// Service until both Pods have answered.
	n1 := c.Nodes[0]
	get := func(u string) (string, error) {
		out, err := n1.Cmd("curl", "-s", "--max-time", "5", u).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, p := range pods {
		if out, err := get("http://" + p.Status.PodIP + ":8080/hostname"); err != nil || out != p.Name {
			t.Errorf("pod %s at %s answered %q, %v", p.Name, p.Status.PodIP, out, err)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		if out, err := get("http://" + svc.Spec.ClusterIP + "/hostname"); err == nil {
			seen[out] = true
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !seen[pods[0].Name] || !seen[pods[1].Name] || len(seen) != 2 {
		t.Errorf("Service %s from node %s reached %v, want both pods", svc.Spec.ClusterIP, n1.Name, seen)
	}
	// From inside Pod 0 (agnhost's /dial makes the Pod itself connect): the other node's Pod,
	// then the cluster IP, several times so that both endpoints answer.
	dial := func(host string, port, tries int) ([]string, error) {
		q := url.Values{"request": {"hostname"}, "protocol": {"http"}, "host": {host},
			"port": {fmt.Sprint(port)}, "tries": {fmt.Sprint(tries)}}
		out, err := get("http://" + pods[0].Status.PodIP + ":8080/dial?" + q.Encode())
		if err != nil {
			return nil, fmt.Errorf("dial %s:%d from %s: %w (%s)", host, port, pods[0].Name, err, out)
		}
		var resp struct {
			Responses []string `json:"responses"`
			Errors    []string `json:"errors"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			return nil, fmt.Errorf("dial %s:%d from %s: %q: %w", host, port, pods[0].Name, out, err)
		}
		if len(resp.Errors) > 0 {
			return resp.Responses, fmt.Errorf("dial %s:%d from %s: %v", host, port, pods[0].Name, resp.Errors)
		}
		return resp.Responses, nil
	}
	if got, err := dial(pods[1].Status.PodIP, 8080, 1); err != nil || len(got) != 1 || got[0] != pods[1].Name {
		t.Errorf("pod %s to pod %s on the other node: %v, %v", pods[0].Name, pods[1].Name, got, err)
	}
	seen = map[string]bool{}
	for i := 0; i < 5 && len(seen) < 2; i++ {
		got, err := dial(svc.Spec.ClusterIP, 80, 10)
		if err != nil {
			t.Logf("%v", err)
		}
		for _, h := range got {
			seen[h] = true
		}
	}
	if !seen[pods[0].Name] || !seen[pods[1].Name] || len(seen) != 2 {
		t.Errorf("Service %s from pod %s reached %v, want both pods", svc.Spec.ClusterIP, pods[0].Name, seen)
	}
}

// createEchoPods creates n agnhost netexec Pods name-0, name-1, … in "default" (HTTP on 8080,
// Ready once it serves), at most one per node.
func createEchoPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, labels map[string]string, n int) {
	t.Helper()
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Labels: labels},
			Spec: corev1.PodSpec{
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
						TopologyKey:   "kubernetes.io/hostname",
					}},
				}},
				Containers: []corev1.Container{{
					Name: "echo", Image: AgnhostImage, ImagePullPolicy: corev1.PullNever,
					Args:  []string{"netexec", "--http-port=8080", "--udp-port=8081"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 8081, Protocol: corev1.ProtocolUDP}},
					// Ready once netexec serves (the kubelet's prober, from the node).
					ReadinessProbe: &corev1.Probe{
						ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitPodsRunning waits until want Pods with labels in "default" are Running and Ready with a
// Pod IP and
// returns them, or fails with their state and the nodes' logs.
func waitPodsRunning(ctx context.Context, t *testing.T, c *Cluster, labels map[string]string, want int, timeout time.Duration) []*corev1.Pod {
	t.Helper()
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	deadline := time.Now().Add(timeout)
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		var pods []*corev1.Pod
		for i := range list.Items {
			p := &list.Items[i]
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue &&
					p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
					pods = append(pods, p)
				}
			}
		}
		if len(pods) == want {
			return pods
		}
		err = c.CheckAlive()
		if err != nil || time.Now().After(deadline) {
			for _, p := range list.Items {
				t.Logf("pod %s on %q: %s %+v %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
			}
			for _, n := range c.Nodes {
				for _, d := range n.daemons {
					t.Logf("%s:\n%s", d.name, d.tail(40))
				}
			}
			t.Fatalf("%d of %d pods Running and Ready after %s (%v)", len(pods), want, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
