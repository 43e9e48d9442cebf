package v1alpha1_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// TestCRDValidation installs the generated CRDs in a real apiserver and creates objects: every
// valid one is accepted (with its defaults filled in), and every invalid one is refused by the
// apiserver itself with a message naming the field and saying what is wrong.
func TestCRDValidation(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	if err := kubetest.InstallCRDs(ctx, cp.Admin(), "../../../../"+kubetest.CRDDir); err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(cp.Admin())
	pools := client.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceAddressPools))

	pool := func(name, spec string) *unstructured.Unstructured {
		t.Helper()
		var o map[string]any
		if err := yaml.Unmarshal([]byte("apiVersion: xlb.dev/v1alpha1\nkind: AddressPool\nmetadata: {name: "+name+"}\nspec:\n"+spec), &o); err != nil {
			t.Fatalf("test object %s: %v", name, err)
		}
		return &unstructured.Unstructured{Object: o}
	}
	valid := []struct{ name, spec string }{
		{"edge", `
  addresses: [198.18.100.0/24, "198.18.101.10-198.18.101.20", "198.18.102.7", "2001:db8:100::/120", "2001:db8:101::1 - 2001:db8:101::9"]
  avoidBuggyIPs: true
  namespaces: [prod, staging-2]
  serviceSelector: {xlb.dev/exposure: internal, tier: "1", app.kubernetes.io/name: web, empty: ""}
  priority: 10
  bgp: {communities: ["65000:100", "0:65535"], largeCommunities: ["4294967295:0:1"], localPref: 4294967295, med: 0}`},
		{"a", `
  addresses: ["2001:db8::1"]
  autoAssign: false`},
	}
	for _, v := range valid {
		got, err := pools.Create(ctx, pool(v.name, v.spec), metav1.CreateOptions{})
		if err != nil {
			t.Errorf("valid pool %s refused: %v", v.name, err)
			continue
		}
		var p v1alpha1.AddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &p); err != nil {
			t.Errorf("pool %s: read back: %v", v.name, err)
			continue
		}
		if p.Spec.AutoAssign == nil {
			t.Errorf("pool %s: autoAssign not defaulted", v.name)
		} else if want := v.name != "a"; *p.Spec.AutoAssign != want {
			t.Errorf("pool %s: autoAssign %v, want %v", v.name, *p.Spec.AutoAssign, want)
		}
	}

	invalid := []struct {
		name, objName, spec string
		want                []string // substrings of the apiserver's message
	}{
		{"name not a DNS label", "Edge.1", `
  addresses: [198.18.0.0/24]`, []string{"metadata.name must be a DNS label"}},
		{"name too long", strings.Repeat("a", 64), `
  addresses: [198.18.0.0/24]`, []string{"metadata.name must be a DNS label"}},
		{"no addresses", "p", `
  addresses: []`, []string{"spec.addresses", "at least 1 items"}},
		{"addresses absent", "p", `
  autoAssign: true`, []string{"spec.addresses", "Required value"}},
		{"prefix length too long", "p", `
  addresses: [198.18.0.0/33]`, []string{"spec.addresses[0]", "must be a CIDR, a range first-last of one family, or an IP address"}},
		{"not an address", "p", `
  addresses: [198.18.0.0/24, gateway-1]`, []string{"spec.addresses[1]", "must be a CIDR"}},
		{"range of two families", "p", `
  addresses: ["198.18.0.1-2001:db8::1"]`, []string{"spec.addresses[0]", "must be a CIDR"}},
		{"range of three parts", "p", `
  addresses: ["198.18.0.1-198.18.0.2-198.18.0.3"]`, []string{"spec.addresses[0]", "must be a CIDR"}},
		{"address listed twice", "p", `
  addresses: [198.18.0.0/24, 198.18.0.0/24]`, []string{"spec.addresses[1]", "Duplicate value"}},
		{"namespace not a label", "p", `
  addresses: [198.18.0.0/24]
  namespaces: [Prod]`, []string{"spec.namespaces[0]", "should match"}},
		{"selector key", "p", `
  addresses: [198.18.0.0/24]
  serviceSelector: {"a b": x}`, []string{"spec.serviceSelector", "keys must be label keys"}},
		{"selector value", "p", `
  addresses: [198.18.0.0/24]
  serviceSelector: {tier: "-x"}`, []string{"spec.serviceSelector.tier", "should match"}},
		{"community out of range", "p", `
  addresses: [198.18.0.0/24]
  bgp: {communities: ["70000:1"]}`, []string{"spec.bgp.communities[0]", "must be ASN:value, each 0 to 65535"}},
		{"community shape", "p", `
  addresses: [198.18.0.0/24]
  bgp: {communities: ["65000"]}`, []string{"spec.bgp.communities[0]", "must be ASN:value"}},
		{"large community out of range", "p", `
  addresses: [198.18.0.0/24]
  bgp: {largeCommunities: ["1:2:4294967296"]}`, []string{"spec.bgp.largeCommunities[0]", "must be global:local1:local2"}},
		{"negative localPref", "p", `
  addresses: [198.18.0.0/24]
  bgp: {localPref: -1}`, []string{"spec.bgp.localPref", "greater than or equal to 0"}},
		{"med too large", "p", `
  addresses: [198.18.0.0/24]
  bgp: {med: 4294967296}`, []string{"spec.bgp.med", "less than or equal to 4294967295"}},
		{"priority", "p", `
  addresses: [198.18.0.0/24]
  priority: -1`, []string{"spec.priority", "greater than or equal to 0"}},
		{"unknown field", "p", `
  addresses: [198.18.0.0/24]
  autoassign: false`, []string{"unknown field \"spec.autoassign\""}},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			_, err := pools.Create(ctx, pool(c.objName, c.spec), metav1.CreateOptions{FieldValidation: "Strict"})
			if err == nil {
				t.Fatalf("accepted; want refused with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refused with %q; want it to say %q", err, w)
				}
			}
		})
	}
}
