// SPDX-License-Identifier: Apache-2.0
package helmtest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/internal/helmtest"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestChartLint: helm lint --strict passes the chart with its defaults and with each value
// combination of ci/.
func TestChartLint(t *testing.T) {
	h := findHelm(t)
	for _, c := range combinations(t) {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir(t)}
			if c.file != "" {
				args = append(args, "--values", c.file)
			}
			out, err := h.Run(t.Context(), args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
				t.Fatalf("helm lint: %s", out)
			}
		})
	}
}

// What the agent part, its admission policy, the gateways' RBAC and the gateways render, in
// any combination that has them.
func agentObjects() []string {
	return []string{"ServiceAccount xlb-system/xlb-agent", "ClusterRole xlb-agent", "ClusterRoleBinding xlb-agent",
		"DaemonSet xlb-system/xlb-agent"}
}

func agentPolicy() []string {
	return []string{"ValidatingAdmissionPolicy xlb-agent-node-annotation", "ValidatingAdmissionPolicyBinding xlb-agent-node-annotation"}
}

func gatewayRBAC() []string {
	return []string{"ServiceAccount xlb-system/xlb", "ClusterRole xlb-controller", "ClusterRoleBinding xlb-controller"}
}

func gatewayPods() []string {
	return []string{"DaemonSet xlb-system/xlb-gateway", "ConfigMap xlb-system/xlb-gateway"}
}

// TestChartTemplate renders each value combination and checks what it says: which parts are
// there, the capabilities, mounts and arguments of each DaemonSet, and that xlb's own
// configuration parser accepts every gateway's file.
func TestChartTemplate(t *testing.T) {
	h := findHelm(t)
	repo := repoRoot(t)
	crds := crdNames(t)
	checks := map[string]func(t *testing.T, r rendered){
		"defaults":     checkAgentOnly,
		"agent-only":   checkAgentOnly,
		"gateway-only": checkGatewayOnly,
		"both-dsr":     checkBothDSR,
		"afxdp":        checkAFXDP,
	}
	for _, c := range combinations(t) {
		t.Run(c.name, func(t *testing.T) {
			r := template(t, h, c.render(repo))
			for _, k := range gatewayRBAC() {
				if _, ok := r[k]; !ok {
					t.Errorf("no %s: the gateways' RBAC is always installed", k)
				}
			}
			var got []string
			for _, k := range r.keys() {
				if strings.HasPrefix(k, "CustomResourceDefinition ") {
					got = append(got, strings.TrimPrefix(k, "CustomResourceDefinition "))
				}
				if r[k].GetKind() == "Namespace" {
					t.Errorf("%s rendered: the namespace is helm's (--create-namespace) unless namespace.create", k)
				}
			}
			if slices.Sort(got); !slices.Equal(got, sortedCopy(crds)) {
				t.Errorf("CRDs rendered with --include-crds: %v, want crds/'s %v", got, crds)
			}
			check, ok := checks[c.name]
			if !ok {
				t.Fatalf("no checks for ci/%s-values.yaml: add them to TestChartTemplate", c.name)
			}
			check(t, r)
		})
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func has(t *testing.T, r rendered, want bool, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := r[k]; ok != want {
			if want {
				t.Errorf("no %s among %v", k, r.keys())
			} else {
				t.Errorf("%s rendered, want none", k)
			}
		}
	}
}

// agentDaemonSet checks what every agent DaemonSet has and returns it.
func agentDaemonSet(t *testing.T, r rendered) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	r.typed(t, "DaemonSet xlb-system/xlb-agent", &ds)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != "xlb-agent" {
		t.Errorf("agent: hostNetwork %v, serviceAccount %q; want true, xlb-agent", spec.HostNetwork, spec.ServiceAccountName)
	}
	c := container(t, &ds)
	if added, _ := caps(c); !slices.Equal(added, []string{"BPF", "NET_ADMIN", "PERFMON", "SYS_ADMIN"}) {
		t.Errorf("agent capabilities %v", added)
	}
	for mount, host := range map[string]string{"/sys/fs/bpf": "/sys/fs/bpf", "/host/cgroup": "/sys/fs/cgroup", "/run/netns": "/run/netns"} {
		if got := hostPathMount(t, &ds, mount); got != host {
			t.Errorf("agent: %s mounts host path %q, want %q", mount, got, host)
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "agent" || !slices.Contains(c.Args, "--cgroup=/host/cgroup") {
		t.Errorf("agent args %q", c.Args)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Port.IntValue() != 9612 ||
		c.LivenessProbe.HTTPGet.Host != "127.0.0.1" {
		t.Errorf("agent liveness probe %+v, want /healthz on 127.0.0.1:9612", c.LivenessProbe)
	}
	return &ds
}

// gatewayDaemonSet checks what every gateway DaemonSet has and returns it with its capabilities.
func gatewayDaemonSet(t *testing.T, r rendered) (*appsv1.DaemonSet, []string) {
	t.Helper()
	var ds appsv1.DaemonSet
	r.typed(t, "DaemonSet xlb-system/xlb-gateway", &ds)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != "xlb" {
		t.Errorf("gateway: hostNetwork %v, serviceAccount %q; want true, xlb", spec.HostNetwork, spec.ServiceAccountName)
	}
	c := container(t, &ds)
	added, dropsAll := caps(c)
	if !dropsAll {
		t.Errorf("gateway: the container's default capabilities are not dropped")
	}
	sc := c.SecurityContext
	if sc.Privileged != nil && *sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("gateway security context %+v: want unprivileged, read-only root, no privilege escalation", sc)
	}
	if got := hostPathMount(t, &ds, "/sys/fs/bpf"); got != "/sys/fs/bpf" {
		t.Errorf("gateway: bpffs mount from %q", got)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.ReadinessProbe.HTTPGet.Port.IntValue() != 9610 {
		t.Errorf("gateway readiness probe %+v, want /readyz on 9610", c.ReadinessProbe)
	}
	if ds.Spec.Template.Annotations["checksum/config"] == "" {
		t.Errorf("gateway: no checksum/config: a new configuration would not roll the gateways")
	}
	return &ds, added
}

func checkAgentOnly(t *testing.T, r rendered) {
	has(t, r, true, agentObjects()...)
	has(t, r, true, agentPolicy()...)
	has(t, r, false, gatewayPods()...)
	ds := agentDaemonSet(t, r)
	c := container(t, ds)
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--dsr") }) {
		t.Errorf("agent args %q: direct server return is opt-in", c.Args)
	}
	if c.Image != "xlb.dev/xlb:"+appVersion(t) {
		t.Errorf("agent image %q, want xlb.dev/xlb:%s (the chart's appVersion)", c.Image, appVersion(t))
	}
	// The agent's policy names its ServiceAccount in the release's namespace.
	vap := r["ValidatingAdmissionPolicy xlb-agent-node-annotation"]
	if vap == nil || !strings.Contains(mustJSON(t, vap.Object), "system:serviceaccount:xlb-system:xlb-agent") {
		t.Errorf("the admission policy does not name the agent's ServiceAccount")
	}
}

func checkGatewayOnly(t *testing.T, r rendered) {
	has(t, r, false, agentObjects()...)
	has(t, r, false, agentPolicy()...)
	has(t, r, true, gatewayPods()...)
	ds, added := gatewayDaemonSet(t, r)
	if want := []string{"BPF", "NET_ADMIN", "PERFMON"}; !slices.Equal(added, want) {
		t.Errorf("gateway capabilities %v, want %v", added, want)
	}
	if c := container(t, ds); !slices.Equal(c.Args, []string{"run", "--config=/etc/xlb/xlb.yaml"}) {
		t.Errorf("gateway args %q", c.Args)
	}
	if got := ds.Spec.Template.Spec.NodeSelector; got["xlb.dev/gateway"] != "true" {
		t.Errorf("gateway nodeSelector %v, want xlb.dev/gateway=true", got)
	}
	if ds.Spec.Template.Spec.Affinity != nil {
		t.Errorf("gateway affinity %+v without gateway.nodes", ds.Spec.Template.Spec.Affinity)
	}
	cfgs := gatewayConfigs(t, r)
	c, ok := cfgs["xlb.yaml"]
	if !ok || len(cfgs) != 1 {
		t.Fatalf("gateway configuration files %v, want xlb.yaml", keysOf(cfgs))
	}
	if c.Kubernetes == nil || c.Kubernetes.LeaderElection.Namespace != "xlb-system" {
		t.Errorf("gateway config kubernetes %+v: want Kubernetes mode, the Lease in the release's namespace", c.Kubernetes)
	}
	if got := ifnames(c); !slices.Equal(got, []string{"eth1:both"}) {
		t.Errorf("gateway interfaces %v", got)
	}
	if c.BGP != nil || len(c.Pools) != 0 || c.Datapath.Settings.Seed != 7 {
		t.Errorf("gateway config: bgp %v, pools %v, seed %d", c.BGP, c.Pools, c.Datapath.Settings.Seed)
	}
	// Large numbers go through helm's values as they are (not 3.3554432e+07).
	if c.Datapath.Settings.ConntrackSize != 4194304 || c.Datapath.MaglevSlots != 33554432 {
		t.Errorf("gateway config: conntrackSize %d, maglevSlots %d; want 4194304, 33554432",
			c.Datapath.Settings.ConntrackSize, c.Datapath.MaglevSlots)
	}
}

func checkBothDSR(t *testing.T, r rendered) {
	has(t, r, true, agentObjects()...)
	has(t, r, true, agentPolicy()...)
	has(t, r, true, gatewayPods()...)
	ads := agentDaemonSet(t, r)
	for _, want := range []string{"--dsr-interface=eth0", "--dsr-pin-path=/sys/fs/bpf/xlb-dsr", "--dsr-flows=262144",
		"--external-ip-allow=198.18.99.0/24"} {
		if c := container(t, ads); !slices.Contains(c.Args, want) {
			t.Errorf("agent args %q lack %s", c.Args, want)
		}
	}
	ds, added := gatewayDaemonSet(t, r)
	if want := []string{"BPF", "NET_ADMIN", "PERFMON"}; !slices.Equal(added, want) {
		t.Errorf("gateway capabilities %v, want %v", added, want)
	}
	c := container(t, ds)
	if !slices.Equal(c.Args, []string{"run", "--config=/etc/xlb/$(NODE_NAME).yaml"}) {
		t.Errorf("gateway args %q: want each node's own file", c.Args)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("gateway env %+v lacks NODE_NAME from spec.nodeName", c.Env)
	}
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["node-role.example/edge"] != "gw" {
		t.Errorf("gateway nodeSelector %v", spec.NodeSelector)
	}
	aff := spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("gateway affinity %+v: want the nodes of gateway.nodes", aff)
	}
	// One term per node (terms are ORed; a node field selector takes one value).
	var names []string
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) != 1 || term.MatchFields[0].Key != "metadata.name" || len(term.MatchFields[0].Values) != 1 ||
			len(term.MatchExpressions) != 0 {
			t.Errorf("gateway node affinity term %+v, want metadata.name In [one node]", term)
			continue
		}
		names = append(names, term.MatchFields[0].Values[0])
	}
	if !slices.Equal(names, []string{"gw1", "gw2"}) {
		t.Errorf("gateway node affinity names %v, want gw1, gw2", names)
	}
	var secret bool
	for _, v := range spec.Volumes {
		secret = secret || v.Secret != nil && v.Secret.SecretName == "xlb-bgp"
	}
	if !secret || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/xlb-secrets" && m.ReadOnly }) {
		t.Errorf("gateway: the Secret xlb-bgp is not mounted read-only at /etc/xlb-secrets")
	}
	cfgs := gatewayConfigs(t, r)
	if got := keysOf(cfgs); !slices.Equal(got, []string{"gw1.yaml", "gw2.yaml"}) {
		t.Fatalf("gateway configuration files %v, want gw1.yaml, gw2.yaml", got)
	}
	for name, want := range map[string]struct {
		routerID string
		ifaces   []string
	}{
		"gw1.yaml": {"198.18.0.1", []string{"eth1:client", "eth2:cluster"}},
		"gw2.yaml": {"198.18.0.2", []string{"ens1:both"}},
	} {
		c := cfgs[name]
		if c.BGP == nil || c.BGP.RouterID.String() != want.routerID || c.BGP.ASN != 65001 || len(c.BGP.Peers) != 1 {
			t.Errorf("%s: bgp %+v, want routerID %s, the shared asn and peer", name, c.BGP, want.routerID)
		}
		if got := ifnames(c); !slices.Equal(got, want.ifaces) {
			t.Errorf("%s: interfaces %v, want %v", name, got, want.ifaces)
		}
		if c.Datapath.Forwarding.Mode != datapath.DSR || len(c.Pools) != 2 || c.Kubernetes == nil || !c.Kubernetes.PodRoutes {
			t.Errorf("%s: forwarding %+v, pools %d, kubernetes %+v", name, c.Datapath.Forwarding, len(c.Pools), c.Kubernetes)
		}
	}
}

func checkAFXDP(t *testing.T, r rendered) {
	has(t, r, true, agentObjects()...)
	has(t, r, false, agentPolicy()...)
	has(t, r, true, gatewayPods()...)
	_, added := gatewayDaemonSet(t, r)
	if want := []string{"BPF", "IPC_LOCK", "NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW", "PERFMON"}; !slices.Equal(added, want) {
		t.Errorf("gateway capabilities %v, want %v (AF_XDP sockets and UMEM, BGP's port 179)", added, want)
	}
	ads := agentDaemonSet(t, r)
	c := container(t, ads)
	for _, want := range []string{"--service-cidr=10.96.0.0/12", "--max-sockets=65536", "--netns-dir=/run/netns"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("agent args %q lack %s", c.Args, want)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "198.18.0.10" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("agent env %v: want the apiserver's address", env)
	}
	// The Lease's namespace is the configuration's: the Role follows it.
	var role rbacv1.Role
	r.typed(t, "Role xlb-leases/xlb-leader-election", &role)
	has(t, r, false, "Role xlb-system/xlb-leader-election")
	cfg := gatewayConfigs(t, r)["xlb.yaml"]
	if cfg == nil || cfg.Kubernetes == nil || cfg.Kubernetes.LeaderElection.Namespace != "xlb-leases" || cfg.Datapath.Kind != "afxdp" {
		t.Errorf("gateway config %+v", cfg)
	}
}

// TestChartNodeCapabilities: a gateway whose own entry in gateway.nodes chooses the AF_XDP
// datapath or a BGP port below 1024 gets the capabilities they need (one DaemonSet runs all).
func TestChartNodeCapabilities(t *testing.T) {
	h := findHelm(t)
	both := filepath.Join(chartDir(t), "ci", "both-dsr-values.yaml")
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{nil, []string{"BPF", "NET_ADMIN", "PERFMON"}},
		{[]string{"gateway.nodes.gw2.datapath.kind=afxdp"}, []string{"BPF", "IPC_LOCK", "NET_ADMIN", "NET_RAW", "PERFMON"}},
		{[]string{"gateway.nodes.gw1.bgp.listenPort=179"}, []string{"BPF", "NET_ADMIN", "NET_BIND_SERVICE", "PERFMON"}},
		{[]string{"gateway.nodes.gw1.bgp.listenPort=1179"}, []string{"BPF", "NET_ADMIN", "PERFMON"}},
		{[]string{"gateway.config.listen=:80"}, []string{"BPF", "NET_ADMIN", "NET_BIND_SERVICE", "PERFMON"}},
	} {
		r := template(t, h, helmtest.Render{Chart: chartDir(t), ValuesFiles: []string{both}, Set: tc.set})
		var ds appsv1.DaemonSet
		r.typed(t, "DaemonSet xlb-system/xlb-gateway", &ds)
		if got, _ := caps(container(t, &ds)); !slices.Equal(got, tc.want) {
			t.Errorf("--set %v: gateway capabilities %v, want %v", tc.set, got, tc.want)
		}
	}
}

// TestChartRefuses: values the gateways or agents could not run with fail at helm template,
// with a message that says what is missing, instead of Pods that crash.
func TestChartRefuses(t *testing.T) {
	h := findHelm(t)
	repo := repoRoot(t)
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"gateway without interfaces", []string{"gateway.enabled=true"}, "interfaces"},
		{"a pool without addresses", []string{"gateway.config.pools[0].name=p"}, "addresses"},
		{"dsr without interfaces", []string{"agent.dsr.enabled=true"}, "interfaces"},
		{"a key that does not exist", []string{"agent.dsrInterface=eth0"}, "dsrInterface"},
		{"an interface without a role", []string{"gateway.interfaces[0].name=eth1"}, "role"},
		{"a bad interface role", []string{"gateway.interfaces[0].name=eth1", "gateway.interfaces[0].role=uplink"}, "role"},
		{"a pin path outside bpffs", []string{"agent.pinPath=/tmp/xlb"}, "pinPath"},
		{"a bad listen address", []string{"agent.listen=9612"}, "listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := h.Template(t.Context(), helmtest.Render{Chart: filepath.Join(repo, helmtest.ChartDir), Set: tc.set})
			if err == nil {
				t.Fatalf("helm template accepted --set %v:\n%s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %v: %v; want it to name %q", tc.set, err, tc.want)
			}
		})
	}
}

// appVersion reads the chart's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml's appVersion: %q, %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// TestChartImage: both parts run xlb.dev/xlb, its tag the chart's appVersion unless image.tag
// says otherwise, and a chart packaged as make chart does (helm package --app-version) runs
// the image of that version.
func TestChartImage(t *testing.T) {
	h := findHelm(t)
	repo := repoRoot(t)
	images := func(r rendered) []string {
		var got []string
		for _, k := range []string{"DaemonSet xlb-system/xlb-agent", "DaemonSet xlb-system/xlb-gateway"} {
			var ds appsv1.DaemonSet
			r.typed(t, k, &ds)
			got = append(got, container(t, &ds).Image)
		}
		return got
	}
	both := filepath.Join(chartDir(t), "ci", "both-dsr-values.yaml")
	r := helmtest.Render{Chart: chartDir(t), ValuesFiles: []string{both}}
	want := "xlb.dev/xlb:" + appVersion(t)
	if got := images(template(t, h, r)); !slices.Equal(got, []string{want, want}) {
		t.Errorf("images %v, want %s", got, want)
	}
	r.Set = []string{"image.tag=v1.2.3", "image.repository=registry.example/xlb"}
	if got := images(template(t, h, r)); !slices.Equal(got, []string{"registry.example/xlb:v1.2.3", "registry.example/xlb:v1.2.3"}) {
		t.Errorf("images %v with image.tag and image.repository set", got)
	}

	dir := t.TempDir()
	if _, err := h.Run(t.Context(), "package", chartDir(t), "--app-version", "v9.8.7-3-gabcdef0", "--destination", dir); err != nil {
		t.Fatal(err)
	}
	pkgs, _ := filepath.Glob(filepath.Join(dir, "xlb-*.tgz"))
	if len(pkgs) != 1 {
		t.Fatalf("helm package wrote %v", pkgs)
	}
	r = helmtest.Render{Chart: pkgs[0], ValuesFiles: []string{both}}
	if got := images(template(t, h, r)); !slices.Equal(got, []string{"xlb.dev/xlb:v9.8.7-3-gabcdef0", "xlb.dev/xlb:v9.8.7-3-gabcdef0"}) {
		t.Errorf("images of the packaged chart %v, want its app version's", got)
	}
	_ = repo
}

// TestNothingSaysBuildYourOwn: nothing a user reads (README.md, docs/, deploy/ with the chart)
// tells them to build their own image: make image builds it.
func TestNothingSaysBuildYourOwn(t *testing.T) {
	repo := repoRoot(t)
	n := 0
	for _, top := range []string{"README.md", "docs", "deploy"} {
		err := filepath.WalkDir(filepath.Join(repo, top), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n++
			if s := strings.ToLower(string(data)); strings.Contains(s, "build your own") || strings.Contains(s, "yours to build") {
				t.Errorf("%s tells the user to build their own image", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 10 {
		t.Fatalf("read only %d files", n)
	}
}
