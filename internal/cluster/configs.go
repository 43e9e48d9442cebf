// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"fmt"
	"path/filepath"
)

// containerdConfig is a node's containerd 2.x configuration: state and sockets under /run
// (the node's own tmpfs), images and snapshots under the node's directory, runc with cgroupfs,
// the CNI plugins of Debian, and the locally built pause image as the sandbox.
func containerdConfig(n *Node) string {
	return fmt.Sprintf(`version = 3
root = %q
state = "/run/containerd"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[plugins.'io.containerd.cri.v1.runtime']
  # This host's processes lack CAP_SYS_RESOURCE: never ask for a lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
`, filepath.Join(n.dir, "containerd"), cniBinDir, filepath.Join(n.dir, "cni"), PauseImage)
}

// cniConfig is ptp + host-local: each Pod a veth with a /32 route in the node's namespace (so
// Service traffic between Pods of one node crosses the node's nftables, no bridge netfilter
// needed), addresses from the node's Pod range.
func cniConfig(n *Node) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "xlb-cluster",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/var/lib/cni/networks"
      }
    }
  ]
}
`, n.PodCIDR4.String())
}

// kubeletConfig is a node's KubeletConfiguration: cgroup v1 with cgroupfs under the node's
// own cgroupRoot, logs and plugins under the node's directory, no evictions on a busy shared
// machine, the kubelet API open to the apiserver (anonymous: the lab L2 only).
func kubeletConfig(n *Node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: %q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: ["198.18.96.10"]
clusterDomain: cluster.local
resolvConf: %q
podLogsDir: %q
volumePluginDir: %q
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
rotateCertificates: false
serverTLSBootstrap: false
maxPods: 110
`, n.cgroupRoot, n.IP4.String(), filepath.Join(n.dir, "resolv.conf"), filepath.Join(n.dir, "pod-logs"), filepath.Join(n.dir, "volume-plugins"))
}

// kubeProxyConfig is kube-proxy in nftables mode, health servers on every node address,
// leaving the conntrack sysctls alone (global ones are the host's, not the node's).
func kubeProxyConfig(n *Node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: 0.0.0.0
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %q
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, n.Name, PodCIDR4.String())
}
