// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// TestConvertRoundTrip: `xlb convert` of the Kubernetes example file gives objects that the
// real apiserver accepts (CRDs installed, validation on), and AddressPools that, read back as
// every gateway reads them, are the file's pools again, in the file's order.
func TestConvertRoundTrip(t *testing.T) {
	file := "../../deploy/xlb.kubernetes.example.yaml"
	var stdout, stderr bytes.Buffer
	if code := convertCLI([]string{"--config", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("xlb convert: exit %d: %s", code, stderr.String())
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) < 2 {
		t.Fatalf("the example has %d pools; the test wants at least 2", len(cfg.Pools))
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stdout.Bytes()), 4096)
	var objs []v1alpha1.AddressPool
	for {
		var o v1alpha1.AddressPool
		if err := dec.Decode(&o); err != nil {
			break
		}
		if o.Kind != "AddressPool" {
			continue // the bgp section's objects: TestConvertBGP
		}
		// Created in one apply, so in the same second: the age order falls back to the name.
		o.CreationTimestamp = metav1.NewTime(time.Unix(1, 0))
		objs = append(objs, o)
	}
	got, verdicts := kube.ObjectPools(objs, nil)
	var want []kube.Pool
	for _, p := range cfg.Pools {
		want = append(want, kube.Pool{Pool: p.IPAM(), Route: p.Route})
	}
	for name, v := range verdicts {
		if !v.Ready {
			t.Errorf("converted pool %s refused: %s", name, v.Message)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got  %+v\n want %+v\nfrom:\n%s", got, want, stdout.String())
	}

	cp := kubetest.StartT(t)
	if err := kubetest.InstallCRDs(t.Context(), cp.Admin(), "../../"+kubetest.CRDDir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(out, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.ApplyFile(t.Context(), cp.Admin(), out); err != nil {
		t.Fatalf("the apiserver refused xlb convert's output: %v", err)
	}

	// A file without pools or bgp: nothing to convert, said so.
	stdout.Reset()
	stderr.Reset()
	bare := filepath.Join(t.TempDir(), "xlb.yaml")
	if err := os.WriteFile(bare, []byte("interfaces: [{name: ext0, role: both}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := convertCLI([]string{"--config", bare}, &stdout, &stderr); code != 0 || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "no pools") {
		t.Errorf("convert of a file without pools: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestConvertBGP: `xlb convert` of a gateway file's bgp section gives BGPPeers (selecting the
// gateway, a password file as a Secret) and a BGPAdvertisement that the gateway, reading them
// as it does, turns back into the file's peers and route attributes — so removing them from
// the file after applying the objects changes no session but for the password's source.
func TestConvertBGP(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "xlb.yaml")
	if err := os.WriteFile(file, []byte(`interfaces: [{name: ext0, role: both}]
bgp:
  routerID: 198.18.0.1
  asn: 65001
  communities: ["65000:100"]
  largeCommunities: ["65000:1:2"]
  localPref: 150
  med: 20
  peers:
    - {address: 198.18.0.254, asn: 65000, holdTime: 30s, keepaliveTime: 10s, connectRetry: 2s, localAddress: 198.18.0.1, bfd: {transmitInterval: 100ms, receiveInterval: 200ms, multiplier: 4, holdDown: 2m}}
    - {address: "2001:db8::fe", asn: 65000, port: 1179, multihopTTL: 3, passwordFile: pw}
kubernetes: {gatewayName: gw7}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := convertCLI([]string{"--config", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("xlb convert: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "1 Secret(s)") {
		t.Errorf("stderr does not warn of the Secret: %q", stderr.String())
	}
	var peers []v1alpha1.BGPPeer
	var ads []v1alpha1.BGPAdvertisement
	secrets := map[string]corev1.Secret{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stdout.Bytes()), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			break
		}
		u := func(into any) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, into); err != nil {
				t.Fatal(err)
			}
		}
		switch raw["kind"] {
		case "BGPPeer":
			var p v1alpha1.BGPPeer
			u(&p)
			peers = append(peers, p)
		case "BGPAdvertisement":
			var a v1alpha1.BGPAdvertisement
			u(&a)
			ads = append(ads, a)
		case "Secret":
			var s corev1.Secret
			u(&s)
			secrets[s.Name] = s
		}
	}
	got, problems := kube.SelectPeers(peers, "gw7", nil, func(r *v1alpha1.SecretKeyRef) (string, error) {
		s, ok := secrets[r.Name]
		if !ok || s.Namespace != "xlb-system" {
			return "", fmt.Errorf("no Secret %s in xlb-system", r.Name)
		}
		return s.StringData[kube.DefaultPasswordKey], nil
	})
	if len(problems) > 0 {
		t.Fatalf("converted peers refused: %q", problems)
	}
	want := slices.Clone(cfg.BGP.Peers)
	for i := range want {
		if want[i].PasswordFile != "" {
			want[i].PasswordFile, want[i].Password = "", "s3cret"
		}
	}
	slices.SortFunc(want, func(a, b bgp.Peer) int { return a.Address.Compare(b.Address) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("peers round trip:\n got  %+v\n want %+v", got, want)
	}
	if other, _ := kube.SelectPeers(peers, "gw8", nil, nil); len(other) != 0 {
		t.Errorf("the converted peers select another gateway: %+v", other)
	}
	attrs, problems := kube.MergeAdvertisements(ads, "gw7", nil)
	wantAttrs := lb.RouteAttributes{Communities: cfg.BGP.Communities, LargeCommunities: cfg.BGP.LargeCommunities, LocalPref: cfg.BGP.LocalPref, MED: cfg.BGP.MED}
	if len(problems) > 0 || !reflect.DeepEqual(attrs, wantAttrs) {
		t.Errorf("attributes round trip: got %+v (%q), want %+v", attrs, problems, wantAttrs)
	}
	if strings.Contains(stdout.String(), "s3cret") && !strings.Contains(stdout.String(), "kind: Secret") {
		t.Errorf("the password is outside a Secret")
	}
}
