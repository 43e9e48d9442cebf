package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestClusterPods brings up a two-node cluster and proves every part is real: the scheduler
// places one agnhost Pod per node (anti-affinity), the kubelets run them in containerd with
// Pod IPs from the node's range, the EndpointSlice controller lists both, and a Pod reaches
// the other node's Pod directly and through the Service's cluster IP (kube-proxy's nftables).
func TestClusterPods(t *testing.T) {
	netlab.RequireRoot(t, "a cluster needs network namespaces, cgroups and containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Nodes: 2, Logf: t.Logf, KeepDir: os.Getenv("XLB_CLUSTER_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Logf("cluster up in %s (dir %s)", c.StartDur.Round(time.Second), c.Dir())
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "echo"}
	var pods []*corev1.Pod
	for i := range 2 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("echo-%d", i), Labels: labels},
			Spec: corev1.PodSpec{
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
						TopologyKey:   "kubernetes.io/hostname",
					}},
				}},
				Containers: []corev1.Container{{
					Name: "echo", Image: AgnhostImage, ImagePullPolicy: corev1.PullNever,
					Args:  []string{"netexec", "--http-port=8080"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods = pods[:0]
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for i := range list.Items {
			p := &list.Items[i]
			pods = append(pods, p)
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		if running == 2 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range pods {
				t.Logf("pod %s on %q: %s %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
			}
			for _, n := range c.Nodes {
				for _, d := range n.daemons {
					t.Logf("%s:\n%s", d.name, d.tail(60))
				}
			}
			t.Fatal("pods not Running in 3 min")
		}
		time.Sleep(time.Second)
	}
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Fatalf("both pods on %s despite anti-affinity", pods[0].Spec.NodeName)
	}
	for _, p := range pods {
		var node *Node
		for _, n := range c.Nodes {
			if n.Name == p.Spec.NodeName {
				node = n
			}
		}
		if node == nil || !strings.HasPrefix(p.Status.PodIP, strings.TrimSuffix(node.PodCIDR4.Addr().String(), "0")) {
			t.Errorf("pod %s IP %s not in its node %s's range", p.Name, p.Status.PodIP, p.Spec.NodeName)
		}
	}
	// From node 1's namespace (kube-proxy's rules apply there too): the remote Pod, then the
	// Service until both Pods have answered.
	n1 := c.Nodes[0]
	get := func(url string) (string, error) {
		out, err := n1.Cmd("curl", "-s", "--max-time", "5", url).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, p := range pods {
		if out, err := get("http://" + p.Status.PodIP + ":8080/hostname"); err != nil || out != p.Name {
			t.Errorf("pod %s at %s answered %q, %v", p.Name, p.Status.PodIP, out, err)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		out, err := get("http://" + svc.Spec.ClusterIP + "/hostname")
		if err == nil {
			seen[out] = true
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(seen) != 2 {
		t.Errorf("Service %s reached %v, want both pods", svc.Spec.ClusterIP, seen)
	}
}
