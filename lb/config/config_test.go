// SPDX-License-Identifier: Apache-2.0
package config

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestExample(t *testing.T) {
	cfg, err := Load("../../deploy/xlb.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Interfaces: []Interface{{Name: "ext0", Mode: datapath.AttachAuto, Role: datapath.RoleClient}, {Name: "ext1", Mode: datapath.AttachNative, Role: datapath.RoleCluster}},
		Datapath: Datapath{
			Kind:    DatapathXDP,
			PinPath: "/sys/fs/bpf/xlb",
			Settings: datapath.Settings{
				ConntrackSize:         1 << 20,
				HandshakeSize:         1 << 16,
				Seed:                  0,
				TCPEstablishedTimeout: time.Hour,
				TCPClosingTimeout:     10 * time.Second,
				UDPTimeout:            time.Minute,
				NewFlowRate:           250000,
				NextHopCacheTTL:       500 * time.Millisecond,
			},
			MaglevSlots:     1 << 24,
			MaglevTableSize: 16381,
			BackendWarmup:   500 * time.Millisecond,
			Forwarding:      lb.Forwarding{Mode: datapath.DSR, Fallback: lb.FallbackExclude},
			ClusterPrefixes: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/24"), netip.MustParsePrefix("2001:db8:64::/48")},
		},
		Listen: "127.0.0.1:9610",
		Log:    Log{Format: LogText, Level: slog.LevelInfo},
		Services: []lb.Service{
			{
				Name: "web",
				VIPs: addrs("198.18.100.1", "2001:db8:100::1"),
				Ports: []lb.Port{
					{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080},
					{Name: "https", Port: 443, Protocol: datapath.TCP}, // protocol defaulted
				},
				Backends: []lb.Backend{
					{Addr: netip.MustParseAddr("198.18.1.10"), Weight: 1, State: lb.Active, Node: "n1", DSR: true,
						TargetPorts: map[string]uint16{"http": 8081}},
					{Addr: netip.MustParseAddr("198.18.1.11"), Weight: 2, State: lb.Active, DSR: true},
					{Addr: netip.MustParseAddr("198.18.1.12"), Weight: 1, State: lb.Draining}, // weight defaulted
					{Addr: netip.MustParseAddr("2001:db8:1::10"), Weight: 1, State: lb.Active, DSR: true},
				},
				Affinity:      datapath.AffinityNone,
				SourceRanges:  []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")},
				TrafficPolicy: lb.TrafficCluster,
				TableSize:     65537,
				Route: lb.RouteAttributes{Communities: []uint32{65000<<16 | 200},
					LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 2, Local2: 1}}, LocalPref: ptr(uint32(200)), MED: ptr(uint32(10))},
			},
			{
				Name:            "dns",
				VIPs:            addrs("198.18.100.2"),
				Ports:           []lb.Port{{Port: 53, Protocol: datapath.UDP}},
				Backends:        []lb.Backend{{Addr: netip.MustParseAddr("198.18.2.10"), Weight: 1, DSR: true}, {Addr: netip.MustParseAddr("198.18.2.11"), Weight: 1, DSR: true}},
				Affinity:        datapath.AffinityClientIP,
				AffinityTimeout: 3 * time.Hour,
			},
			{
				Name:          "bastion",
				VIPs:          addrs("198.18.100.3"),
				Ports:         []lb.Port{{Port: 0, Protocol: datapath.TCP}},
				Backends:      []lb.Backend{{Addr: netip.MustParseAddr("198.18.3.10"), Weight: 1, Node: "n2", DSR: true}},
				TrafficPolicy: lb.TrafficLocal,
			},
		},
		HealthChecks: map[string]HealthCheck{
			"web": {Type: CheckHTTP, Path: "/healthz", ExpectStatus: 200, Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3},
			"dns": {Type: CheckUDP, Port: 53, Payload: []byte("ping\n"), Expect: []byte("pong"),
				Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}, // timeout, rise, fall defaulted
			"bastion": {Type: CheckTCP, Port: 22, Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3},
		},
		BGP: &BGP{
			RouterID: netip.MustParseAddr("198.18.0.1"), ASN: 65001, GracefulRestart: 120 * time.Second,
			MinHealthyBackends: 1, WithdrawOnExit: true,
			Communities: []uint32{65000<<16 | 100}, LargeCommunities: []bgp.LargeCommunity{{Global: 65000, Local1: 1, Local2: 2}},
			LocalPref: ptr(uint32(100)), MED: ptr(uint32(0)),
			Peers: []bgp.Peer{
				{Address: netip.MustParseAddr("198.18.0.254"), ASN: 65000, Port: 179,
					PasswordFile: "../../deploy/bgp-upstream.pw", HoldTime: 9 * time.Second,
					KeepaliveTime: 3 * time.Second, ConnectRetry: time.Second, LocalAddress: netip.MustParseAddr("198.18.0.1"),
					BFD: bgp.BFD{Enabled: true, TransmitInterval: 300 * time.Millisecond, ReceiveInterval: 300 * time.Millisecond, Multiplier: 3,
						HoldDown: time.Minute}},
				{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000},
			},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("example.yaml parsed to\n%+v\nwant\n%+v", cfg, want)
	}
	// The example is a working config: the plan accepts it.
	if _, errs := lb.Plan(cfg.Services, cfg.PlanOptions()); len(errs) > 0 {
		t.Errorf("lb.Plan(example): %v", errs)
	}
}

// TestDefaults checks what a minimal file gets.
func TestDefaults(t *testing.T) {
	cfg, err := Parse("min.yaml", []byte(`
interfaces: [{name: ext0, role: both}]
datapath:
services:
  - name: web
    vips: [198.18.100.1]
    ports: [{port: 80}]
    healthCheck: {type: https}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Interfaces: []Interface{{Name: "ext0", Mode: datapath.AttachAuto, Role: datapath.RoleBoth}},
		Datapath:   Datapath{Kind: DatapathXDP},
		Listen:     DefaultListen,
		Log:        Log{Format: LogText, Level: slog.LevelInfo},
		Services:   []lb.Service{{Name: "web", VIPs: addrs("198.18.100.1"), Ports: []lb.Port{{Port: 80, Protocol: datapath.TCP}}}},
		HealthChecks: map[string]HealthCheck{"web": {Type: CheckHTTPS, Path: "/", ExpectStatus: 200,
			Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg, want)
	}

	cfg, err = Parse("min.yaml", []byte("interfaces: [{name: ext0, role: both}]\nservices: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Services != nil || cfg.HealthChecks == nil || len(cfg.HealthChecks) != 0 {
		t.Errorf("no services: got Services %v, HealthChecks %v", cfg.Services, cfg.HealthChecks)
	}
}

// TestYAMLFeatures checks anchors, aliases, merge keys, !!binary, integer forms and the
// special values (off, -1, IPv4-mapped addresses).
func TestYAMLFeatures(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(`
interfaces: [{name: ext0, role: both}]
datapath: {kind: afxdp, seed: 0xdeadbeef, conntrackSize: 1_000_000, newFlowRate: -1, nextHopCacheTTL: off, backendWarmup: off}
log: {format: json, level: debug}
listen: "[::1]:9610"
services:
  - name: a
    vips: ["::ffff:198.18.100.1"]
    ports: [{port: 53, protocol: udp}]
    backends: [{address: 198.18.1.1}]
    healthCheck: &hc
      type: udp
      payload: !!binary AAEC/w==
      interval: 10s
  - name: b
    vips: [198.18.100.2]
    ports: [{port: 53, protocol: UDP}]
    healthCheck:
      <<: *hc
      interval: 3s
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Datapath, (Datapath{Kind: DatapathAFXDP, Settings: datapath.Settings{Seed: 0xdeadbeef, ConntrackSize: 1000000, NewFlowRate: -1, NextHopCacheTTL: -1}, BackendWarmup: -1}); !reflect.DeepEqual(got, want) {
		t.Errorf("datapath %+v, want %+v", got, want)
	}
	if cfg.Log != (Log{Format: LogJSON, Level: slog.LevelDebug}) || cfg.Listen != "[::1]:9610" {
		t.Errorf("log %+v, listen %q", cfg.Log, cfg.Listen)
	}
	if got := cfg.Services[0].VIPs[0]; got != netip.MustParseAddr("198.18.100.1") {
		t.Errorf("IPv4-mapped VIP parsed to %s, want it unmapped", got)
	}
	a, b := cfg.HealthChecks["a"], cfg.HealthChecks["b"]
	if string(a.Payload) != "\x00\x01\x02\xff" || a.Interval != 10*time.Second {
		t.Errorf("check a: %+v", a)
	}
	if b.Type != CheckUDP || string(b.Payload) != "\x00\x01\x02\xff" || b.Interval != 3*time.Second {
		t.Errorf("check b (merged from a, interval overridden): %+v", b)
	}
}

func TestLoad(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(absent) = %v, want an error wrapping os.ErrNotExist", err)
	}
	path := filepath.Join(t.TempDir(), "xlb.yaml")
	if err := os.WriteFile(path, []byte("interfaces: [{name: ext0, role: both}]\nlisten: nowhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	want := path + `:2: listen: "nowhere" is not host:port (want e.g. 127.0.0.1:9610, [::1]:9610 or :9610)`
	if err == nil || err.Error() != want {
		t.Errorf("Load: %v\nwant %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.File != path || e.Line != 2 || e.Path != "listen" {
		t.Errorf("errors.As(*Error) = %+v", e)
	}
}

// TestAllErrors checks that Parse reports every error, sorted by line, and caps their number.
func TestAllErrors(t *testing.T) {
	_, err := Parse("xlb.yaml", []byte(`interfaces: [{name: ext0, mode: fast, role: both}]
log: {level: loud}
services:
  - name: web
    vips: [198.18.100.1, 198.18.100.999]
    ports: [{port: 80, protocol: SCTP}]
datapath: {seed: -1, kind: ebpf}
`))
	want := `xlb.yaml:1: interfaces[0].mode: unknown mode "fast" (want auto, native or generic)
xlb.yaml:2: log.level: unknown level "loud" (want debug, info, warn or error)
xlb.yaml:5: services[0].vips[1]: "198.18.100.999" is not an IP address
xlb.yaml:6: services[0].ports[0].protocol: protocol SCTP is not supported (xlb balances TCP and UDP)
xlb.yaml:7: datapath.kind: unknown kind "ebpf" (want xdp or afxdp)
xlb.yaml:7: datapath.seed: -1 is negative (want 0 to 4294967295)`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}

	var b strings.Builder
	b.WriteString("interfaces: [{name: ext0, role: both}]\nservices:\n")
	for i := range 25 {
		fmt.Fprintf(&b, "  - {name: web%d, vips: [198.18.100.1], ports: [{port: 80}], bad: 1}\n", i)
	}
	_, err = Parse("xlb.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "xlb.yaml: 5 more errors not shown" {
		t.Errorf("25 errors reported as %d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

// schemaKeys is the set of field paths the parser knows ("services.ports.name"), from the
// field lists that drive it.
func schemaKeys() map[string]bool {
	keys := map[string]bool{}
	add := func(prefix string, fields []string) {
		for _, f := range fields {
			keys[at(prefix, f)] = true
		}
	}
	add("", topFields)
	add("interfaces", interfaceFields)
	add("datapath", datapathFields)
	add("log", logFields)
	add("services", serviceFields)
	add("services.ports", portFields)
	add("services.backends", backendFields)
	add("services.healthCheck", healthCheckFields)
	add("bgp", bgpFields)
	add("bgp.peers", bgpPeerFields)
	add("l2", l2Fields)
	add("services.bgp", routeAttributeFields)
	add("pools", poolFields)
	add("pools.bgp", routeAttributeFields)
	add("kubernetes", kubernetesFields)
	add("kubernetes.leaderElection", leaderElectionFields)
	return keys
}

// TestExampleCoversSchema checks that example.yaml, which docs/appliance.md walks through, sets every
// field the parser knows.
func TestExampleCoversSchema(t *testing.T) {
	seen := map[string]bool{}
	// The Kubernetes example shows the keys of pools and kubernetes.
	for _, file := range []string{"../../deploy/xlb.example.yaml", "../../deploy/xlb.kubernetes.example.yaml", "../../deploy/xlb.l2.example.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		walkKeys(&doc, "", seen)
	}
	for k := range schemaKeys() {
		if !seen[k] {
			t.Errorf("neither example shows %s", k)
		}
	}
}

// walkKeys adds the field paths of n to seen (not those inside free-form mappings).
func walkKeys(n *yaml.Node, path string, seen map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			walkKeys(c, path, seen)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := at(path, n.Content[i].Value)
			seen[p] = true
			if !strings.HasSuffix(p, ".targetPorts") && !strings.HasSuffix(p, ".serviceSelector") {
				walkKeys(n.Content[i+1], p, seen)
			}
		}
	}
}

// TestFieldDocs checks that every key is documented: on the Go field that holds it ("key
// name" in the struct's field comments), or, for the keys that fill lb.Service, in the package
// documentation.
func TestFieldDocs(t *testing.T) {
	fset := token.NewFileSet()
	docs := map[string]string{} // struct name → its field comments; struct.Field → that field's
	for _, file := range []string{"config.go", "pools.go", "kubernetes.go", "l2.go"} {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			var b strings.Builder
			for i, field := range st.Fields.List {
				if field.Doc == nil && (i == 0 || !sameGroup(fset, st.Fields.List[i-1], field)) {
					t.Errorf("%s.%s has no doc comment", ts.Name, field.Names[0])
				}
				b.WriteString(field.Doc.Text())
				for _, name := range field.Names {
					docs[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(field.Doc.Text()), " ")
				}
			}
			docs[ts.Name.Name] = strings.Join(strings.Fields(b.String()), " ")
			return false
		})
	}
	for _, c := range []struct {
		typ    string
		fields []string
	}{
		{"Config", topFields}, {"Interface", interfaceFields}, {"Datapath", datapathFields},
		{"Log", logFields}, {"HealthCheck", healthCheckFields}, {"BGP", bgpFields}, {"L2", l2Fields},
		{"BGP.Peers", bgpPeerFields}, // an item of peers is a bgp.Peer: its keys are listed on the field
		{"Pool", poolFields}, {"Kubernetes", kubernetesFields}, {"LeaderElection", leaderElectionFields},
	} {
		for _, k := range c.fields {
			if !strings.Contains(docs[c.typ], "key "+k+")") && !strings.Contains(docs[c.typ], "key "+k+";") &&
				!strings.Contains(docs[c.typ], "key "+k+",") {
				t.Errorf("no field of %s documents key %s", c.typ, k)
			}
		}
	}
	pkgDoc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range schemaKeys() {
		if strings.HasPrefix(k, "services.") && !strings.HasPrefix(k, "services.healthCheck.") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := k[strings.LastIndex(k, ".")+1:]
		if strings.Count(k, ".") == 1 {
			name = "services[]." + name // services.vips is documented as services[].vips
		}
		if !strings.Contains(string(pkgDoc), name) {
			t.Errorf("the package documentation does not mention %s", k)
		}
	}
}

// sameGroup reports whether field b directly follows a with no blank line: the fields share
// a's comment.
func sameGroup(fset *token.FileSet, a, b *ast.Field) bool {
	return fset.Position(b.Pos()).Line == fset.Position(a.End()).Line+1
}
