// SPDX-License-Identifier: Apache-2.0
package v1alpha1_test

import (
	"fmt"
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

// TestBGPPeerValidation: the BGPPeer CRD's rules, as TestCRDValidation does for AddressPool.
func TestBGPPeerValidation(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	if err := kubetest.InstallCRDs(ctx, cp.Admin(), "../../../../"+kubetest.CRDDir); err != nil {
		t.Fatal(err)
	}
	peers := dynamic.NewForConfigOrDie(cp.Admin()).Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPPeers))
	peer := func(name, spec string) *unstructured.Unstructured {
		t.Helper()
		var o map[string]any
		if err := yaml.Unmarshal([]byte("apiVersion: xlb.dev/v1alpha1\nkind: BGPPeer\nmetadata: {name: "+name+"}\nspec:\n"+spec), &o); err != nil {
			t.Fatalf("test object %s: %v", name, err)
		}
		return &unstructured.Unstructured{Object: o}
	}
	for i, spec := range []string{`
  address: 198.18.0.254
  asn: 65000`, `
  address: "2001:db8::fe"
  asn: 4294967295
  port: 1179
  passwordSecretRef: {name: bgp-upstream}
  holdTime: 30s
  keepaliveTime: 10s
  connectRetry: 2s
  passive: true
  localAddress: "2001:db8::1"
  bfd: {transmitInterval: 100ms, receiveInterval: 100ms, multiplier: 5, holdDown: 2m}
  nodeSelector: {matchLabels: {xlb.dev/gateway: "true"}}
  gateways: [gw1, gw2]`, `
  address: 198.18.0.254
  asn: 65000
  multihopTTL: 4
  bfd: {enabled: false}`} {
		got, err := peers.Create(ctx, peer(fmt.Sprintf("ok-%d", i), spec), metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			t.Errorf("valid peer %d refused: %v", i, err)
			continue
		}
		if i == 1 {
			if en, _, _ := unstructured.NestedBool(got.Object, "spec", "bfd", "enabled"); !en {
				t.Errorf("bfd.enabled not defaulted to true: %v", got.Object["spec"])
			}
		}
	}
	for _, c := range []struct{ name, spec, want string }{
		{"address not an IP", "address: router-1\n  asn: 65000", "spec.address: Invalid value: \"router-1\": must be a unicast IP address"},
		{"address multicast", "address: 224.0.0.5\n  asn: 65000", "must be a unicast IP address"},
		{"asn 0", "address: 198.18.0.254\n  asn: 0", "spec.asn: Invalid value: 0: spec.asn in body should be greater than or equal to 1"},
		{"asn too large", "address: 198.18.0.254\n  asn: 4294967296", "spec.asn"},
		{"port 0", "address: 198.18.0.254\n  asn: 65000\n  port: 70000", "spec.port"},
		{"hold time too short", "address: 198.18.0.254\n  asn: 65000\n  holdTime: 2s", "spec.holdTime: Invalid value: \"2s\": must be whole seconds from 3s to 65535s"},
		{"hold time fraction", "address: 198.18.0.254\n  asn: 65000\n  holdTime: 3500ms", "must be whole seconds"},
		{"keepalive not below hold", "address: 198.18.0.254\n  asn: 65000\n  holdTime: 6s\n  keepaliveTime: 6s", "keepaliveTime must be shorter than holdTime"},
		{"keepalive not below default hold", "address: 198.18.0.254\n  asn: 65000\n  keepaliveTime: 10s", "keepaliveTime must be shorter than holdTime (default 9s)"},
		{"local address family", "address: 198.18.0.254\n  asn: 65000\n  localAddress: \"2001:db8::1\"", "localAddress must be of the family of address"},
		{"bfd multihop", "address: 198.18.0.254\n  asn: 65000\n  multihopTTL: 2\n  bfd: {}", "bfd is single-hop only"},
		{"bfd interval", "address: 198.18.0.254\n  asn: 65000\n  bfd: {transmitInterval: 10ms}", "spec.bfd.transmitInterval: Invalid value: \"10ms\": must be from 50ms to 60s"},
		{"bfd multiplier", "address: 198.18.0.254\n  asn: 65000\n  bfd: {multiplier: 0}", "spec.bfd.multiplier"},
		{"secret without name", "address: 198.18.0.254\n  asn: 65000\n  passwordSecretRef: {key: pw}", "spec.passwordSecretRef.name: Required value"},
		{"unknown field", "address: 198.18.0.254\n  asn: 65000\n  holdtime: 9s", "unknown field \"spec.holdtime\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := peers.Create(ctx, peer("bad", "  "+c.spec), metav1.CreateOptions{FieldValidation: "Strict"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v; want refused with %q", err, c.want)
			}
		})
	}
}

// TestSiteSettingsValidation: the SiteSettings CRD's rules, and BGPAdvertisement's.
func TestSiteSettingsValidation(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	if err := kubetest.InstallCRDs(ctx, cp.Admin(), "../../../../"+kubetest.CRDDir); err != nil {
		t.Fatal(err)
	}
	res := dynamic.NewForConfigOrDie(cp.Admin()).Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings))
	obj := func(name, spec string) *unstructured.Unstructured {
		t.Helper()
		var o map[string]any
		if err := yaml.Unmarshal([]byte("apiVersion: xlb.dev/v1alpha1\nkind: SiteSettings\nmetadata: {name: "+name+"}\nspec:\n"+spec), &o); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: o}
	}
	for _, c := range []struct{ name, objName, spec, want string }{
		{"not named site", "default", "  seed: 1", "there is one SiteSettings object, named site"},
		{"seed negative", "site", "  seed: -1", "spec.seed"},
		{"seed too large", "site", "  seed: 4294967296", "spec.seed"},
		{"table size", "site", "  maglevTableSize: 1", "spec.maglevTableSize"},
		{"forwarding", "site", "  forwarding: direct", "spec.forwarding: Unsupported value: \"direct\""},
		{"fallback without dsr", "site", "  dsrFallback: returnPath", "dsrFallback needs forwarding: dsr"},
		{"timeout", "site", "  udpTimeout: 500ms", "spec.udpTimeout: Invalid value: \"500ms\": must be at least 1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := res.Create(ctx, obj(c.objName, c.spec), metav1.CreateOptions{FieldValidation: "Strict"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v; want refused with %q", err, c.want)
			}
		})
	}
	if _, err := res.Create(ctx, obj("site", "  seed: 4294967295\n  maglevTableSize: 65537\n  forwarding: dsr\n  dsrFallback: returnPath\n  tcpEstablishedTimeout: 2h\n  tcpClosingTimeout: 5s\n  udpTimeout: 30s"),
		metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Errorf("valid SiteSettings refused: %v", err)
	}

	// BGPAdvertisement shares AddressPool's attribute rules.
	ads := dynamic.NewForConfigOrDie(cp.Admin()).Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPAdvertisements))
	ad := func(spec string) *unstructured.Unstructured {
		var o map[string]any
		if err := yaml.Unmarshal([]byte("apiVersion: xlb.dev/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: tag}\nspec:\n"+spec), &o); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: o}
	}
	if _, err := ads.Create(ctx, ad("  communities: [\"65000:70000\"]"), metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.communities[0]") || !strings.Contains(err.Error(), "must be ASN:value, each 0 to 65535") {
		t.Errorf("bad community: %v", err)
	}
	if _, err := ads.Create(ctx, ad("  communities: [\"65000:7\"]\n  localPref: 200\n  gateways: [gw1]\n  nodeSelector: {matchLabels: {rack: r1}}"),
		metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Errorf("valid BGPAdvertisement refused: %v", err)
	}
}
