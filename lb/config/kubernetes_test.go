// SPDX-License-Identifier: Apache-2.0
package config

import (
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/ipam"
)

func rng(first, last string) ipam.Range {
	return ipam.Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

// TestKubernetesExample checks what deploy/xlb.kubernetes.example.yaml parses to, and that the
// allocator takes its pools.
func TestKubernetesExample(t *testing.T) {
	cfg, err := Load("../../deploy/xlb.kubernetes.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantPools := []Pool{
		{Name: "edge", Addresses: []ipam.Range{rng("198.18.100.0", "198.18.100.255"), rng("198.18.101.10", "198.18.101.20"),
			rng("2001:db8:100::", "2001:db8:100::ff")}, AutoAssign: true,
			Route: lb.RouteAttributes{Communities: []uint32{65000<<16 | 200}, LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 2, Local2: 1}},
				LocalPref: ptr(uint32(200)), MED: ptr(uint32(10))}},
		{Name: "internal", Addresses: []ipam.Range{rng("198.18.102.0", "198.18.102.255")}, AvoidBuggyIPs: true,
			Namespaces: []string{"prod", "staging"}, ServiceSelector: map[string]string{"xlb.dev/exposure": "internal", "tier": "1"}},
	}
	if !reflect.DeepEqual(cfg.Pools, wantPools) {
		t.Errorf("pools\n%+v\nwant\n%+v", cfg.Pools, wantPools)
	}
	wantKube := &Kubernetes{Kubeconfig: "/etc/xlb/kubeconfig", LoadBalancerClass: "xlb.dev/xdp", IPMode: IPModeVIP,
		NodeHealthPort: 10256, HealthCheckInterval: 2 * time.Second, HealthCheckTimeout: time.Second,
		LeaderElection: LeaderElection{Namespace: "xlb-system", LeaseName: "xlb-controller", LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
		GatewayName: "gw1"}
	if !reflect.DeepEqual(cfg.Kubernetes, wantKube) {
		t.Errorf("kubernetes\n%+v\nwant\n%+v", cfg.Kubernetes, wantKube)
	}
	if len(cfg.Services) != 1 || cfg.BGP == nil {
		t.Errorf("services %v, bgp %v", cfg.Services, cfg.BGP)
	}
	a := ipam.New()
	if _, err := a.SetPools(cfg.IPAMPools()); err != nil {
		t.Fatalf("SetPools(example pools): %v", err)
	}
	got, err := a.Assign(ipam.Request{Service: "default/web", Namespace: "default", Families: []ipam.Family{ipam.IPv4, ipam.IPv6}}, nil)
	if want := []netip.Addr{netip.MustParseAddr("198.18.100.0"), netip.MustParseAddr("2001:db8:100::")}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Assign = %v, %v; want %v", got, err, want)
	}
	// The standalone example stays standalone.
	std, err := Load("../../deploy/xlb.example.yaml")
	if err != nil || std.Kubernetes != nil || std.Pools != nil {
		t.Errorf("standalone example: kubernetes %v, pools %v, %v", std.Kubernetes, std.Pools, err)
	}
}

// TestKubernetesDefaults checks what an empty kubernetes section and a minimal pool get.
func TestKubernetesDefaults(t *testing.T) {
	cfg, err := Parse("k.yaml", []byte("interfaces: [{name: ext0, role: both}]\npools: [{name: edge, addresses: [198.18.100.0/24]}]\nkubernetes: {kubeconfig: kc}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Kubernetes{Kubeconfig: "kc", LoadBalancerClass: DefaultLoadBalancerClass, IPMode: DefaultIPMode,
		NodeHealthPort: DefaultNodeHealthPort, HealthCheckInterval: DefaultNodeCheckInterval, HealthCheckTimeout: DefaultNodeCheckTimeout,
		LeaderElection: LeaderElection{Namespace: DefaultLeaseNamespace, LeaseName: DefaultLeaseName,
			LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}}
	if !reflect.DeepEqual(cfg.Kubernetes, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.Kubernetes, want)
	}
	if want := []Pool{{Name: "edge", Addresses: []ipam.Range{rng("198.18.100.0", "198.18.100.255")}, AutoAssign: true}}; !reflect.DeepEqual(cfg.Pools, want) {
		t.Errorf("pools %+v, want %+v", cfg.Pools, want)
	}
	cfg, err = Parse("/etc/xlb/xlb.yaml", []byte("interfaces: [{name: ext0, role: both}]\npools: [{name: edge, addresses: [198.18.100.1]}]\n"+
		"kubernetes: {kubeconfig: kc, ipMode: Proxy, nodeHealthPort: 0, defaultClass: true, podRoutes: true, loadBalancerClass: lb}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Kubernetes
	if k.Kubeconfig != "/etc/xlb/kc" || k.IPMode != IPModeProxy || k.NodeHealthPort != 0 || !k.DefaultClass || !k.PodRoutes || k.LoadBalancerClass != "lb" {
		t.Errorf("got %+v", k)
	}
	if id, err := k.Identity(); err != nil || id == "" {
		t.Errorf("Identity() = %q, %v; want the host name", id, err)
	} else if h, _ := os.Hostname(); id != h {
		t.Errorf("Identity() = %q, want the host name %q", id, h)
	}
	k.GatewayName = "gw1"
	if id, _ := k.Identity(); id != "gw1" {
		t.Errorf("Identity() = %q, want gw1", id)
	}
}

// kube is a file in Kubernetes mode whose kubernetes section has the given fields from line 5.
func kube(fields string) string {
	return "interfaces: [{name: ext0, role: both}]\npools:\n  - {name: edge, addresses: [198.18.100.0/24]}\nkubernetes:\n" + fields
}

func TestKubernetesErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"pools without kubernetes", "interfaces: [{name: ext0, role: both}]\npools: [{name: edge, addresses: [198.18.100.0/24]}]\n",
			"xlb.yaml:2: pools: only apply in Kubernetes mode (add a kubernetes section, or remove the pools)"},
		{"kubernetes a list", "interfaces: [{name: ext0, role: both}]\npools: [{name: edge, addresses: [198.18.100.0/24]}]\nkubernetes: [a]\n",
			"xlb.yaml:3: kubernetes: want a mapping, got a list"},
		{"unknown field", kube("  ipmode: VIP\n"), `xlb.yaml:5: kubernetes.ipmode: unknown field (did you mean "ipMode"?)`},
		{"empty kubeconfig", kube("  kubeconfig: \"\"\n"), "xlb.yaml:5: kubernetes.kubeconfig: empty"},
		{"class without name", kube("  loadBalancerClass: xlb.dev/\n"),
			`xlb.yaml:5: kubernetes.loadBalancerClass: "xlb.dev/" is not a load balancer class: the name "" must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},
		{"class with a bad prefix", kube("  loadBalancerClass: Xlb_Dev/xdp\n"),
			`xlb.yaml:5: kubernetes.loadBalancerClass: "Xlb_Dev/xdp" is not a load balancer class: the prefix "Xlb_Dev" is not a DNS subdomain (lower-case, such as xlb.dev)`},
		{"class with two slashes", kube("  loadBalancerClass: a/b/c\n"),
			`xlb.yaml:5: kubernetes.loadBalancerClass: "a/b/c" is not a load balancer class: the name "b/c" must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},
		{"defaultClass a string", kube("  defaultClass: \"yes\"\n"), `xlb.yaml:5: kubernetes.defaultClass: want true or false, got "yes"`},
		{"ipMode wrong case", kube("  ipMode: proxy\n"), `xlb.yaml:5: kubernetes.ipMode: unknown ipMode "proxy" (want VIP or Proxy)`},
		{"node health port too big", kube("  nodeHealthPort: 70000\n"), "xlb.yaml:5: kubernetes.nodeHealthPort: 70000 is out of range (0 to 65535)"},
		{"interval too short", kube("  healthCheckInterval: 5ms\n"), "xlb.yaml:5: kubernetes.healthCheckInterval: 5ms is below the minimum of 10ms"},
		{"interval without unit", kube("  healthCheckInterval: 2\n"),
			"xlb.yaml:5: kubernetes.healthCheckInterval: want a duration with a unit, such as 2s, got 2"},
		{"timeout not below interval", kube("  healthCheckInterval: 1s\n  healthCheckTimeout: 1s\n"),
			"xlb.yaml:6: kubernetes.healthCheckTimeout: timeout 1s is not below interval 1s"},
		{"interval not above default timeout", kube("  healthCheckInterval: 500ms\n"),
			"xlb.yaml:5: kubernetes.healthCheckInterval: timeout 1s is not below interval 500ms"},
		{"zero timeout", kube("  healthCheckTimeout: 0s\n"), "xlb.yaml:5: kubernetes.healthCheckTimeout: 0s is not above zero"},
		{"bad gateway name", kube("  gatewayName: GW_1\n"),
			`xlb.yaml:5: kubernetes.gatewayName: "GW_1" is not a DNS subdomain (lower-case letters, digits, '-' and '.'), as a Lease holder and event source must be`},
		{"podRoutes a number", kube("  podRoutes: 1\n"), "xlb.yaml:5: kubernetes.podRoutes: want true or false, got 1"},
		{"lease namespace", kube("  leaderElection: {namespace: Kube_System}\n"),
			`xlb.yaml:5: kubernetes.leaderElection.namespace: "Kube_System" is not a namespace name (a DNS label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)`},
		{"lease name", kube("  leaderElection: {leaseName: \"xlb controller\"}\n"),
			`xlb.yaml:5: kubernetes.leaderElection.leaseName: "xlb controller" is not a Lease name (a DNS subdomain: lower-case letters, digits, '-' and '.')`},
		{"unknown leader election field", kube("  leaderElection: {leasename: x}\n"),
			`xlb.yaml:5: kubernetes.leaderElection.leasename: unknown field (did you mean "leaseName"?)`},
		{"renew deadline not shorter than the lease", kube("  leaderElection:\n    leaseDuration: 15s\n    renewDeadline: 15s\n"),
			"xlb.yaml:7: kubernetes.leaderElection.renewDeadline: renewDeadline 15s is not shorter than leaseDuration 15s"},
		{"lease shorter than the default renew deadline", kube("  leaderElection:\n    leaseDuration: 5s\n"),
			"xlb.yaml:6: kubernetes.leaderElection.leaseDuration: renewDeadline 10s is not shorter than leaseDuration 5s"},
		{"retry period too long", kube("  leaderElection:\n    retryPeriod: 9s\n"),
			"xlb.yaml:6: kubernetes.leaderElection.retryPeriod: renewDeadline 10s is not more than 1.2 × retryPeriod 9s"},
		{"negative lease duration", kube("  leaderElection: {leaseDuration: -1s}\n"),
			"xlb.yaml:5: kubernetes.leaderElection.leaseDuration: -1s is not above zero"},
		{"service name with a slash", "interfaces: [{name: ext0, role: both}]\npools: [{name: edge, addresses: [198.18.100.0/24]}]\nkubernetes: {}\n" +
			"services:\n  - name: default/web\n    vips: [198.18.99.1]\n    ports: [{port: 80}]\n",
			`xlb.yaml:5: services[0].name: "default/web" contains '/': in Kubernetes mode, names of the form namespace/name are the Kubernetes Services'`},
		{"service VIP in a pool", "interfaces: [{name: ext0, role: both}]\npools:\n  - name: edge\n    addresses: [198.18.99.0/30, 198.18.100.0/24]\nkubernetes: {}\n" +
			"services:\n  - name: web\n    vips: [198.18.99.1, \"2001:db8::1\", 198.18.100.7]\n    ports: [{port: 80}]\n",
			`xlb.yaml:8: services[0].vips[0]: 198.18.99.1 is in pool "edge" (pools[0].addresses[0], line 4), whose addresses go to Kubernetes Services
xlb.yaml:8: services[0].vips[2]: 198.18.100.7 is in pool "edge" (pools[0].addresses[1], line 4), whose addresses go to Kubernetes Services`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("xlb.yaml", []byte(c.file))
			if err == nil || err.Error() != c.want {
				t.Errorf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
	// A slash is fine without Kubernetes mode.
	if _, err := Parse("xlb.yaml", []byte(strings.Replace(svc("    vips: [198.18.100.1]\n    ports: [{port: 80}]\n"), "name: web", "name: a/web", 1))); err != nil {
		t.Errorf("standalone service a/web: %v", err)
	}
}

// TestKubernetesWithoutPoolsOrPeers: in Kubernetes mode the pools and the BGP peers may all be
// objects (AddressPool, BGPPeer): a file with neither is valid.
func TestKubernetesWithoutPoolsOrPeers(t *testing.T) {
	cfg, err := Parse("xlb.yaml", []byte("interfaces: [{name: ext0, role: both}]\nbgp:\n  routerID: 198.18.0.1\n  asn: 65001\nkubernetes: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) != 0 || cfg.BGP == nil || len(cfg.BGP.Peers) != 0 || cfg.Kubernetes == nil {
		t.Errorf("parsed %+v", cfg)
	}
}
