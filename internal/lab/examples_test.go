// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// envUpdateExamples, set, makes TestExamples rewrite deploy/examples/nodes.yaml and
// endpointslices.yaml from the lab instead of checking them.
const envUpdateExamples = "XLB_UPDATE_EXAMPLES"

const (
	nodesHeader = `# The Nodes of the default lab site (make lab: 2 nodes), as the lab registers them, playing
# each node's kubelet: InternalIP addresses (xlb probes kube-proxy's health servers at the first,
# IPv4 preferred), the Pod CIDRs, condition Ready. Generated from internal/lab (NodeObject);
# TestExamples checks that they match (XLB_UPDATE_EXAMPLES=1 rewrites them).
`
	slicesHeader = `# The EndpointSlices of the example Services (services.yaml) over the default lab site's 5 pods
# (p1, p3, p5 on n1; p2, p4 on n2; label app: demo), as the lab makes them, playing the
# EndpointSlice controller: one slice per IP family of the Service, the Pod IPs with their node
# and conditions, the Service's ports resolved to the Pods' port numbers. xlb balances each
# Service over the ready endpoints. Generated from internal/lab (EndpointSlices); TestExamples
# checks that they match (XLB_UPDATE_EXAMPLES=1 rewrites them).
`
)

// TestExamples checks deploy/examples: services.yaml parses into LoadBalancer Services of class
// xlb.dev/xdp without NodePorts, each with its own Pod ports; nodes.yaml and
// endpointslices.yaml are what the lab makes for the default site (2 nodes, 5 pods).
func TestExamples(t *testing.T) {
	dir, err := FindDeployDir()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(dir, "examples")
	var svcs []*corev1.Service
	decodeAll(t, filepath.Join(dir, "services.yaml"), func() any { s := &corev1.Service{}; svcs = append(svcs, s); return s })
	if len(svcs) < 4 {
		t.Fatalf("services.yaml: %d Services, want at least 4", len(svcs))
	}
	targets := map[string]string{} // protocol/targetPort → Service
	for _, s := range svcs {
		switch {
		case s.Kind != "Service" || s.Spec.Type != corev1.ServiceTypeLoadBalancer:
			t.Errorf("%s: kind %s type %s, want a LoadBalancer Service", s.Name, s.Kind, s.Spec.Type)
		case s.Spec.LoadBalancerClass == nil || *s.Spec.LoadBalancerClass != "xlb.dev/xdp":
			t.Errorf("%s: loadBalancerClass %v, want xlb.dev/xdp", s.Name, s.Spec.LoadBalancerClass)
		case s.Spec.AllocateLoadBalancerNodePorts == nil || *s.Spec.AllocateLoadBalancerNodePorts:
			t.Errorf("%s: allocateLoadBalancerNodePorts is not false", s.Name)
		}
		for _, p := range s.Spec.Ports {
			k := string(p.Protocol) + "/" + p.TargetPort.String()
			if other, dup := targets[k]; dup {
				t.Errorf("%s and %s share the Pod port %s (see docs/datapath.md, Reverse NAT)", other, s.Name, k)
			}
			targets[k] = s.Name
		}
	}

	var pools []*v1alpha1.AddressPool
	decodeAll(t, filepath.Join(dir, "addresspools.yaml"), func() any { p := &v1alpha1.AddressPool{}; pools = append(pools, p); return p })
	if len(pools) != 1 || pools[0].Name != PoolName ||
		!slices.Equal(pools[0].Spec.Addresses, []string{PoolRange4.String(), PoolRange6.String()}) {
		t.Errorf("addresspools.yaml: want one AddressPool %q of %s and %s, as the lab's plan (PoolRange4, PoolRange6); have %+v",
			PoolName, PoolRange4, PoolRange6, pools)
	}

	nodes, pods := planSite(2, 5)
	var wantNodes []any
	for _, n := range nodes {
		wantNodes = append(wantNodes, NodeObject(n))
	}
	var wantSlices []any
	for _, s := range svcs {
		for _, sl := range EndpointSlices(s, pods) {
			wantSlices = append(wantSlices, sl)
		}
	}
	for _, f := range []struct {
		name, header string
		want         []any
		fresh        func() any
	}{
		{"nodes.yaml", nodesHeader, wantNodes, func() any { return &corev1.Node{} }},
		{"endpointslices.yaml", slicesHeader, wantSlices, func() any { return &discoveryv1.EndpointSlice{} }},
	} {
		path := filepath.Join(dir, f.name)
		want, err := manifest(f.header, f.want...)
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv(envUpdateExamples) != "" {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", path)
			continue
		}
		var got []any
		decodeAll(t, path, func() any { o := f.fresh(); got = append(got, o); return o })
		if len(got) != len(f.want) || !equality.Semantic.DeepEqual(got, f.want) {
			t.Errorf("%s does not match what the lab makes for the default site (%d objects, want %d); run %s=1 go test -run TestExamples ./internal/lab\nwant:\n%s",
				path, len(got), len(f.want), envUpdateExamples, want)
		}
	}
}

// decodeAll decodes every document of the YAML file at path (strictly: unknown fields fail)
// into a new object from next.
func decodeAll(t *testing.T, path string, next func() any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for i := 1; i <= 100; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "" {
			continue
		}
		if err := yaml.UnmarshalStrict(doc, next()); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
	}
}
