package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestClusterNodes brings up a two-node cluster (real kubelets on containerd, kube-proxy,
// controller manager, scheduler) and checks that each kubelet registered its Node with the
// address the cluster gave it and reports Ready, then that teardown leaves nothing behind.
func TestClusterNodes(t *testing.T) {
	netlab.RequireRoot(t, "a cluster needs network namespaces, cgroups and containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Nodes: 2, Logf: t.Logf, KeepDir: os.Getenv("XLB_CLUSTER_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close()
		}
	})
	t.Logf("cluster up in %s (dir %s)", c.StartDur.Round(time.Second), c.Dir())
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		nd, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ip string
		for _, a := range nd.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		if ip != n.IP4.String() {
			t.Errorf("node %s InternalIP %q, want %s", n.Name, ip, n.IP4)
		}
		if nd.Status.NodeInfo.KubeletVersion != "v1.37.2" || nd.Status.NodeInfo.ContainerRuntimeVersion == "" {
			t.Errorf("node %s runs kubelet %q on %q", n.Name, nd.Status.NodeInfo.KubeletVersion, nd.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("teardown: %v", err)
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat("/run/netns/" + n.NetNS); err == nil {
			t.Errorf("namespace %s left after Close", n.NetNS)
		}
		if _, err := os.Stat("/sys/fs/cgroup/pids" + n.cgroupRoot); err == nil {
			t.Errorf("cgroup %s left after Close", n.cgroupRoot)
		}
	}
}
