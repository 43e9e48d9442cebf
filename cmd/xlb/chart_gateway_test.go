// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"fmt"
	"net/http"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/internal/helmtest"
	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestChartGatewayCapabilities runs xlb run as the Helm chart's gateway DaemonSet runs it: the
// configuration file the chart renders into its ConfigMap, the chart's RBAC applied to a real
// kube-apiserver (Kubernetes mode, as the ServiceAccount xlb), and exactly the capabilities the
// chart's container adds (uid 0 with every other capability out of the bounding set, no new
// privileges: what the runtime gives a container that drops ALL). For the XDP datapath and the
// AF_XDP one (whose capabilities the chart adds when the file asks for it), the gateway loads
// and attaches its datapath and becomes ready; stopped and started again (a Pod replaced in an
// upgrade), an XDP gateway adopts its pinned datapath with the same capabilities. Then the same
// without each of those capabilities in turn: it fails with an error, so the chart grants none
// that xlb run does without.
func TestChartGatewayCapabilities(t *testing.T) {
	const chartReadyTimeout = 90 * time.Second
	if os.Geteuid() != 0 {
		t.Fatal("needs root (BPF, netns, bpffs)")
	}
	for _, bin := range []string{"setpriv", "prlimit", "nsenter"} {
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
	p := netlab.Prefix()
	gw := netlab.New(t, p+"g")
	peer := netlab.New(t, p+"p")
	netlab.Veth(t, gw, "gx0", "02:00:5e:00:02:01", peer, "px0", "02:00:5e:00:02:10")
	gw.MustIP(t, "addr add 198.18.2.1/24 dev gx0")
	peer.MustIP(t, "addr add 198.18.2.10/24 dev px0") // the file's backend: its neighbour entry resolves

	ctx := t.Context()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(), NetNS: gw.Name})
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.Controller()); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	for _, kind := range []string{"xdp", "afxdp"} {
		t.Run(kind, func(t *testing.T) {
			pin := filepath.Join("/sys/fs/bpf", p+kind)
			t.Cleanup(func() { _ = os.RemoveAll(pin) })
			values := fmt.Sprintf(`agent: {enabled: false}
gateway:
  enabled: true
  interfaces: [{name: gx0, role: both}]
  config:
    listen: 127.0.0.1:9610
    datapath: {kind: %s, seed: 1, pinPath: %s}
    kubernetes: {kubeconfig: %s, gatewayName: gw-caps, nodeHealthPort: 0}
    services:
      - {name: bastion, vips: [198.18.99.1], ports: [{port: 22}], backends: [{address: 198.18.2.10}]}
`, kind, pin, kubeconfig)
			dir := t.TempDir()
			applyChart(t, h, cp, repo, dir, values)
			// What the chart's gateway runs with, read back from the apiserver.
			ds, err := admin.AppsV1().DaemonSets("xlb-system").Get(ctx, "xlb-gateway", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			caps, args := gatewayContainer(t, ds)
			cm, err := admin.CoreV1().ConfigMaps("xlb-system").Get(ctx, "xlb-gateway", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cfgPath := configFile(t, cm, args, dir)
			t.Logf("the chart's gateway: capabilities %v, args %q", caps, args)
			g := chartGateway{netns: gw, config: cfgPath, pin: pin, timeout: chartReadyTimeout}

			ready, log := g.run(t, caps, true)
			if !ready {
				t.Fatalf("xlb run with the chart's capabilities %v did not become ready within %v:\n%s", caps, chartReadyTimeout, log)
			}
			// It ran as the ServiceAccount xlb: it took the Lease the chart's Role lets it take
			// (and released it at SIGTERM).
			lease, err := admin.CoordinationV1().Leases("xlb-system").Get(ctx, "xlb-controller", metav1.GetOptions{})
			if err != nil || lease.Spec.AcquireTime == nil {
				t.Errorf("the Lease xlb-system/xlb-controller after the gateway was ready: %+v, %v; want it acquired", lease, err)
			}
			if kind == "xdp" {
				// A new Pod of the gateway adopts what the last one left pinned (the file's
				// service). The AF_XDP datapath pins nothing.
				ready, log = g.run(t, caps, false)
				if !ready || !strings.Contains(log, `msg="adopted datapath state" vips=1 backends=1`) {
					t.Fatalf("xlb run with the chart's capabilities %v over the pinned datapath: ready %v, want it ready with the pinned VIP adopted:\n%s",
						caps, ready, log)
				}
			}
			for _, drop := range caps {
				fewer := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
				ready, log := g.run(t, fewer, false)
				switch {
				case ready:
					t.Errorf("xlb run became ready without %s (with %v): the chart grants more than it needs\n%s", drop, fewer, tail(log, 15))
				case !strings.HasSuffix(log, "(exit status 1)"):
					t.Errorf("xlb run without %s did not fail with an error (exit status 1): a crash?\n%s", drop, tail(log, 40))
				default:
					t.Logf("without %s: not ready; %s", drop, strings.TrimSpace(tail(log, 2)))
				}
			}
		})
	}
}

// chartGateway runs xlb run as the chart's gateway container would.
type chartGateway struct {
	netns   *netlab.NS    // the host's network, here a test namespace
	config  string        // the ConfigMap's file
	pin     string        // datapath.pinPath
	timeout time.Duration // bound of a start
}

// run starts xlb run with exactly caps (uid 0, every other capability out of the bounding
// set, no new privileges, 8 MiB of locked memory), waits until it is ready or gone,
// and stops it (SIGTERM: an XDP datapath stays pinned); unless keep, it removes the pins then.
func (g chartGateway) run(t *testing.T, caps []string, keep bool) (ready bool, log string) {
	t.Helper()
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + strings.ToLower(c)
	}
	var buf bytes.Buffer
	// 8 MiB of locked memory: systemd's default, which container runtimes pass on.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+g.netns.Name,
		"prlimit", "--memlock=8388608:8388608",
		"setpriv", "--bounding-set="+bounding, "--no-new-privs", "--",
		os.Args[0], "run", "--config", g.config)
	cmd.Env = append(os.Environ(), envDaemon+"=1")
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start xlb run: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if keep {
			return
		}
		cleanup := exec.Command("nsenter", "--net=/run/netns/"+g.netns.Name, os.Args[0], "cleanup", "--pin-path", g.pin)
		cleanup.Env = append(os.Environ(), envDaemon+"=1")
		if out, err := cleanup.CombinedOutput(); err != nil {
			t.Errorf("xlb cleanup --pin-path %s: %v: %s", g.pin, err, out)
		}
		// What xlb cleanup leaves is TestDaemonE2E's concern; here each run starts afresh.
		_ = os.RemoveAll(g.pin)
	}()
	// The verifier may take a while over the XDP program on a loaded machine.
	deadline := time.Now().Add(g.timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false, fmt.Sprintf("%s(%v)", buf.String(), cmd.ProcessState)
		default:
		}
		if code, _, err := g.netns.HTTPGet("127.0.0.1:9610", "/readyz", reqTimeout); err == nil && code == http.StatusOK {
			return true, buf.String()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false, buf.String()
}

// gatewayContainer returns the capabilities the chart's gateway container adds (checking that
// it drops every other) and its arguments.
func gatewayContainer(t *testing.T, ds *appsv1.DaemonSet) ([]string, []string) {
	t.Helper()
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].SecurityContext == nil || cs[0].SecurityContext.Capabilities == nil {
		t.Fatalf("the gateway DaemonSet's containers: %+v", cs)
	}
	c := cs[0]
	if !slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL") {
		t.Fatalf("the gateway container keeps the runtime's default capabilities: drop %v", c.SecurityContext.Capabilities.Drop)
	}
	var caps []string
	for _, a := range c.SecurityContext.Capabilities.Add {
		caps = append(caps, string(a))
	}
	if len(caps) == 0 {
		t.Fatal("the gateway container adds no capabilities")
	}
	return caps, c.Args
}

// configFile writes the file the gateway's --config names from the ConfigMap (mounted at
// /etc/xlb in the Pod) into dir and returns its path.
func configFile(t *testing.T, cm *corev1.ConfigMap, args []string, dir string) string {
	t.Helper()
	var name string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--config=/etc/xlb/"); ok {
			name = v
		}
	}
	data, ok := cm.Data[name]
	if name == "" || !ok {
		t.Fatalf("the gateway's args %q name no file of the ConfigMap (keys %v)", args, keys(cm.Data))
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatalf("the ConfigMap's %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// applyChart renders the chart with values (YAML) as helm template does, writing the values and
// the manifest into dir, and applies the manifest to cp as its administrator.
func applyChart(t *testing.T, h helmtest.Helm, cp *kubetest.ControlPlane, repo, dir, values string) {
	t.Helper()
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := h.Template(t.Context(), helmtest.Render{Chart: filepath.Join(repo, helmtest.ChartDir), ValuesFiles: []string{valuesFile},
		Set: []string{"namespace.create=true"}})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "chart.yaml")
	if err := os.WriteFile(manifest, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.ApplyFile(t.Context(), cp.Admin(), manifest); err != nil {
		t.Fatalf("apply the chart: %v", err)
	}
}
