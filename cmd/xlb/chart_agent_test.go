// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/helmtest"
	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// TestChartAgentCapabilities runs xlb agent as the Helm chart's agent DaemonSet runs it, with
// direct server return on: the chart (RBAC, admission policy, DaemonSet) applied to a real
// kube-apiserver, the agent as the ServiceAccount xlb-agent of node n1, the container's
// arguments read back from the DaemonSet, and its securityContext and mounts as a runtime
// applies them: uid 0 with exactly the capabilities the container adds (every other one out
// of the bounding set), no new privileges, the root file system and every mount the chart
// does not mount read-write remounted read-only in a mount namespace of its own (the host's
// cgroup and the Pods' network namespaces read-only, bpffs read-write). Under them the agent
//   - becomes healthy, with its programs attached to a (read-only) cgroup;
//   - balances a real TCP connection from a Pod to a cluster IP (socket LB);
//   - annotates its Node and answers a carried datagram from the VIP (direct server return);
//   - with closePodUDPSockets (the default), closes a Pod's connected UDP socket whose endpoint
//     left (in the Pod's network namespace).
//
// Then the same without each capability in turn: it no longer does all of it (it fails to
// start, or, without SYS_ADMIN, the Pod's socket stays open), so the chart grants none that
// the agent does without. With closePodUDPSockets the chart adds SYS_ADMIN alone (which the
// bpf system call accepts for BPF, PERFMON and NET_ADMIN), without it those three.
func TestChartAgentCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (BPF, netns, bpffs, mount namespaces)")
	}
	for _, bin := range []string{"setpriv", "prlimit", "nsenter", "unshare", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s (util-linux): %v", bin, err)
		}
	}
	h, err := helmtest.Find()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := helmtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p, ext, node, podA, podB := newDSRSite(t)
	podB.ServeName(t, "tcp", netip.AddrPortFrom(dsrPodB, 8080), "b")
	ctx := t.Context()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(), NetNS: node.Name,
		APIServerFlags: []string{"--service-cluster-ip-range=198.18.96.0/24"}})
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	kubeconfig := filepath.Join(t.TempDir(), "agent.kubeconfig")
	agentCfg := cp.As("system:serviceaccount:xlb-system:xlb-agent", "system:serviceaccounts", "system:serviceaccounts:xlb-system")
	agentCfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}
	if err := kubetest.WriteKubeconfig(kubeconfig, agentCfg); err != nil {
		t.Fatal(err)
	}
	for name, cidr := range map[string]string{"n1": "198.18.4.0/24", "n2": "198.18.9.0/24"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// web: a ClusterIP Service on Pod B's TCP 8080. dns: a LoadBalancer Service of the gateways'
	// class with its VIP in status, on Pod B's UDP 5353 (its cluster IP is balanced too).
	web, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class, no, udp, yes, n1 := kube.DefaultClass, false, corev1.ProtocolUDP, true, "n1"
	dns, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: udp, TargetPort: intstr.FromInt32(5353)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dns.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: dsrDNS.Addr().String()}}
	if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, dns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	webIP := netip.AddrPortFrom(netip.MustParseAddr(web.Spec.ClusterIP), 80).String()
	dnsIP := netip.AddrPortFrom(netip.MustParseAddr(dns.Spec.ClusterIP), 53).String()
	httpName, httpPort, dnsName, dnsPort := "http", int32(8080), "dns", int32(5353)
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &httpName, Port: &httpPort}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{dsrPodB.String()}, NodeName: &n1, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsSlice := func(addr string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &dnsName, Port: &dnsPort, Protocol: &udp}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, NodeName: &n1, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
		}
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, dnsSlice(dsrPodB.String()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setDNS := func(addr string) {
		t.Helper()
		s, err := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "dns-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Endpoints = dnsSlice(addr).Endpoints
		if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setAnnotation := func(v string) {
		t.Helper()
		n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v == "" {
			delete(n.Annotations, kube.AnnotationDSR)
		} else {
			metav1.SetMetaDataAnnotation(&n.ObjectMeta, kube.AnnotationDSR, v)
		}
		if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	root, err := socklb.RootCgroup()
	if err != nil {
		t.Fatal(err)
	}
	cgroup := filepath.Join(root, "xlb-test-"+p)
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netlab.RemoveCgroup(cgroup); err != nil {
			t.Error(err)
		}
	})
	sockPin, dsrPin := filepath.Join("/sys/fs/bpf", "xlb-test-"+p+"-agent"), filepath.Join("/sys/fs/bpf", "xlb-test-"+p+"-dsr")
	unpin := func() {
		for _, pin := range []string{sockPin, dsrPin} {
			if err := cleanupPins(pin); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unpin)

	// client connects from Pod A's namespace, in the cgroup, to addr and returns the answer.
	client := func(addr string) string {
		cmd := exec.Command("ip", "netns", "exec", podA.Name, os.Args[0])
		cmd.Env = append(os.Environ(), envAgentClient+"="+addr)
		cg, err := netlab.InCgroup(cmd, cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out))
	}
	eventually := func(cond func() bool) bool {
		for deadline := time.Now().Add(pollTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if cond() {
				return true
			}
		}
		return false
	}
	// job runs the agent with caps under the chart's settings and says what it did not do ("":
	// all of it), with its log.
	job := func(t *testing.T, s chartAgentSettings, caps []string) (failed, log string) {
		unpin()
		setAnnotation("")
		setDNS(dsrPodB.String())
		d := startChartAgent(t, node, s.args, s.readOnly, caps)
		defer d.kill(t)
		for deadline := time.Now().Add(2 * readyTimeout); ; time.Sleep(50 * time.Millisecond) {
			if code, _, err := node.HTTPGet(nodeAgentListen, "/healthz", reqTimeout); err == nil && code == http.StatusOK {
				break
			}
			if d.exitedNow() || time.Now().After(deadline) {
				return fmt.Sprintf("healthy (exited: %v)", d.exitedNow()), d.out.String()
			}
		}
		if !eventually(func() bool { return client(webIP) == "b "+webIP }) {
			return "a connection to the cluster IP balanced to Pod B", d.out.String()
		}
		if !eventually(func() bool {
			n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			return err == nil && n.Annotations[kube.AnnotationDSR] == kube.DSRCarrierVersion
		}) {
			return "xlb.dev/dsr on its Node", d.out.String()
		}
		if !eventually(func() bool {
			got, from := carriedExchange(t, ext, ext, netip.AddrPortFrom(dsrExt, 40021), netip.AddrPortFrom(dsrPodB, 5353), dsrDNS)
			return got == "b" && from == dsrDNS
		}) {
			return "a carried datagram answered from the VIP", d.out.String()
		}
		if s.closesPod {
			var held *heldUDP
			if !eventually(func() bool {
				if held != nil {
					held.close()
				}
				held = holdUDP(t, podA, cgroup, dnsIP)
				return held.first == "b"
			}) {
				return "a Pod's UDP socket to the dns cluster IP answered", d.out.String()
			}
			defer held.close()
			setDNS("198.18.9.9")
			if !eventually(func() bool {
				got := held.ask()
				return strings.Contains(got, "EDESTADDRREQ") || strings.Contains(got, "ECONNABORTED")
			}) {
				return "the Pod's connected UDP socket closed when its endpoint left", d.out.String()
			}
		}
		d.signal(t, syscall.SIGTERM)
		d.waitExit(t, "after SIGTERM")
		return "", d.out.String()
	}

	for _, closes := range []bool{true, false} {
		t.Run(fmt.Sprintf("closePodUDPSockets=%v", closes), func(t *testing.T) {
			values := fmt.Sprintf(`agent:
  listen: %s
  pinPath: %s
  maxSockets: 16384
  closePodUDPSockets: %v
  dsr: {enabled: true, interfaces: [n0], pinPath: %s, flows: 16384}
`, nodeAgentListen, sockPin, closes, dsrPin)
			dir := t.TempDir()
			applyChart(t, h, cp, repo, dir, values)
			ds, err := admin.AppsV1().DaemonSets("xlb-system").Get(ctx, "xlb-agent", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			caps, s := agentContainer(t, ds, cgroup, kubeconfig)
			s.closesPod = closes
			if got := slices.Contains(caps, "SYS_ADMIN"); got != closes {
				t.Errorf("closePodUDPSockets %v: the chart adds SYS_ADMIN: %v", closes, got)
			}
			t.Logf("the chart's agent: capabilities %v, args %q, read-only %q", caps, s.args, s.readOnly)
			if failed, log := job(t, s, caps); failed != "" {
				t.Fatalf("xlb agent with the chart's capabilities %v and settings did not do this: %s\n%s", caps, failed, log)
			}
			for _, drop := range caps {
				fewer := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
				failed, log := job(t, s, fewer)
				if failed == "" {
					t.Errorf("xlb agent did all of its job without %s (with %v): the chart grants more than it needs\n%s", drop, fewer, tail(log, 15))
					continue
				}
				t.Logf("without %s: not %s; %s", drop, failed, strings.TrimSpace(tail(log, 2)))
			}
		})
	}
}

// chartAgentSettings is how the chart's agent container runs, translated to the test's host.
type chartAgentSettings struct {
	args      []string // xlb's arguments ("agent" first)
	readOnly  []string // host paths the container mounts read-only
	closesPod bool     // the chart has it close the Pods' connected UDP sockets
}

// agentContainer checks the chart's agent container's securityContext (every default
// capability dropped, no privilege escalation, a read-only root, only bpffs mounted
// read-write) and returns the capabilities it adds and how to run it here: its arguments with
// the test's node and kubeconfig, the host's cgroup tree (its hostPath /sys/fs/cgroup) being
// the test's cgroup, and the host paths of its read-only mounts.
func agentContainer(t *testing.T, ds *appsv1.DaemonSet, cgroup, kubeconfig string) ([]string, chartAgentSettings) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].SecurityContext == nil || spec.Containers[0].SecurityContext.Capabilities == nil {
		t.Fatalf("the agent DaemonSet's containers: %+v", spec.Containers)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Fatalf("the agent container keeps the runtime's default capabilities: drop %v", sc.Capabilities.Drop)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Fatal("the agent container allows privilege escalation")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Fatal("the agent container's root file system is writable")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatal("the agent container is privileged")
	}
	var caps []string
	for _, a := range sc.Capabilities.Add {
		caps = append(caps, string(a))
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	var s chartAgentSettings
	cgroupMount := ""
	for _, m := range c.VolumeMounts {
		host, ok := hostPaths[m.Name]
		if !ok {
			t.Fatalf("the agent mounts %s, not a host path", m.Name)
		}
		if host == "/sys/fs/cgroup" {
			cgroupMount, host = m.MountPath, cgroup
		} else if host != m.MountPath {
			t.Fatalf("the agent mounts the host's %s at %s: not translated by this test", host, m.MountPath)
		}
		switch {
		case m.ReadOnly:
			s.readOnly = append(s.readOnly, host)
		case host != "/sys/fs/bpf":
			t.Errorf("the agent mounts the host's %s read-write: only bpffs must be", host)
		}
	}
	if cgroupMount == "" {
		t.Fatal("the agent does not mount the host's cgroup tree")
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--cgroup="); ok {
			if v != cgroupMount {
				t.Fatalf("the agent's --cgroup %s is not its mount of the host's cgroup tree %s", v, cgroupMount)
			}
			a = "--cgroup=" + cgroup
		}
		s.args = append(s.args, a)
	}
	s.args = append(s.args, "--kubeconfig="+kubeconfig)
	return caps, s
}

// startChartAgent runs xlb agent args in node's network namespace as the chart's container
// runs: in a mount namespace of its own whose root and every other mount but bpffs, /proc and
// /dev are read-only (and readOnly, the chart's read-only mounts), uid 0 with only caps in
// its bounding set, no new privileges, 8 MiB of locked memory. It is killed when t ends.
func startChartAgent(t *testing.T, node *netlab.NS, args, readOnly, caps []string) *daemonProc {
	t.Helper()
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + strings.ToLower(c)
	}
	// The mounts to make read-only: every one but the kernel's file systems the runtime
	// mounts read-write (/proc, /dev) and the chart's read-write volume (bpffs).
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var ro []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		m := fields[4]
		under := func(dirs ...string) bool {
			return slices.ContainsFunc(dirs, func(d string) bool { return m == d || strings.HasPrefix(m, d+"/") })
		}
		if strings.Contains(m, `\`) || under("/proc", "/dev", "/sys/fs/bpf", "/run/netns") || slices.Contains(ro, m) {
			continue
		}
		ro = append(ro, m)
	}
	f.Close()
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, m := range ro {
		// Some mounts refuse a remount (and a missing one does not matter): only the root's
		// and the chart's read-only mounts are checked below.
		fmt.Fprintf(&script, "mount -o remount,bind,ro %q 2>/dev/null || true\n", m)
	}
	for _, m := range readOnly {
		fmt.Fprintf(&script, "mount --rbind %q %q\nmount -o remount,bind,ro %q\n", m, m, m)
	}
	script.WriteString("if touch /.xlb-rw-probe 2>/dev/null; then rm -f /.xlb-rw-probe; echo 'the root is writable' >&2; exit 97; fi\n")
	for _, m := range readOnly {
		fmt.Fprintf(&script, "if mkdir %q/xlb-rw-probe 2>/dev/null; then rmdir %q/xlb-rw-probe; echo '%s is writable' >&2; exit 97; fi\n", m, m, m)
	}
	fmt.Fprintf(&script, `exec nsenter --net=/run/netns/%s prlimit --memlock=8388608:8388608 setpriv --bounding-set=%s --no-new-privs -- "$@"`,
		node.Name, bounding)
	d := &daemonProc{out: &logBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "sh", "-c", script.String(), "sh", os.Args[0]}, args...)...)
	d.cmd.Env = append(os.Environ(), envDaemon+"=1", "NODE_NAME=n1")
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { d.kill(t) })
	return d
}
