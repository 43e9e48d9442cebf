// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"context"
	"os"
	"strings"
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
	// Cancelled after Close (cleanups run last first): the control plane lives as long as ctx.
	t.Cleanup(cancel)
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
	closeAndCheck(t, c)
}

// closeAndCheck tears the cluster down and fails on what it left: a namespace, a cgroup in
// any hierarchy, a mount, a process in a node's cgroups.
func closeAndCheck(t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("teardown: %v", err)
	}
	for _, ns := range append([]string{c.CtlNS}, nodeNetNS(c)...) {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left after Close", ns)
		}
	}
	for _, n := range c.Nodes {
		for _, d := range n.CgroupDirs() {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("cgroup %s left after Close", d)
			}
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mounts), c.Dir()) {
		t.Errorf("mounts under %s left after Close", c.Dir())
	}
}

func nodeNetNS(c *Cluster) []string {
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.NetNS)
	}
	return names
}
