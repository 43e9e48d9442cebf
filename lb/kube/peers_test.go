// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

func TestSelectPeers(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(int64(s), 0)) }
	peer := func(name string, created int, spec v1alpha1.BGPPeerSpec) v1alpha1.BGPPeer {
		return v1alpha1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}, Spec: spec}
	}
	objs := []v1alpha1.BGPPeer{
		peer("all", 1, v1alpha1.BGPPeerSpec{Address: "198.18.0.254", ASN: 65000}),
		peer("by-name", 2, v1alpha1.BGPPeerSpec{Address: "198.18.0.253", ASN: 65000, Gateways: []string{"gw1"}}),
		peer("other", 3, v1alpha1.BGPPeerSpec{Address: "198.18.0.252", ASN: 65000, Gateways: []string{"gw2"}}),
		peer("by-label", 4, v1alpha1.BGPPeerSpec{Address: "2001:db8::fe", ASN: 65000,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}}),
		peer("newer-dup", 5, v1alpha1.BGPPeerSpec{Address: "198.18.0.254", ASN: 65001}),
		peer("secret", 6, v1alpha1.BGPPeerSpec{Address: "198.18.0.251", ASN: 65000,
			PasswordSecretRef: &v1alpha1.SecretKeyRef{Name: "pw"}}),
		peer("no-secret", 7, v1alpha1.BGPPeerSpec{Address: "198.18.0.250", ASN: 65000,
			PasswordSecretRef: &v1alpha1.SecretKeyRef{Name: "missing"}}),
		peer("bad-bfd", 8, v1alpha1.BGPPeerSpec{Address: "198.18.0.249", ASN: 65000,
			BFD: &v1alpha1.BFD{Enabled: true, TransmitInterval: &metav1.Duration{Duration: 1500 * time.Microsecond}}}),
	}
	secret := func(r *v1alpha1.SecretKeyRef) (string, error) {
		if r.Name == "pw" {
			return "s3cret", nil
		}
		return "", errors.New("secrets \"missing\" not found")
	}
	got, problems := SelectPeers(objs, "gw1", labels.Set{"rack": "r1"}, secret)
	var addrs []string
	for _, p := range got {
		addrs = append(addrs, p.Address.String())
		if p.Address.String() == "198.18.0.251" && p.Password != "s3cret" {
			t.Errorf("peer with a Secret: password %q", p.Password)
		}
		if s := p.String(); strings.Contains(s, "s3cret") {
			t.Errorf("a peer's String shows its password: %s", s)
		}
	}
	if want := []string{"198.18.0.251", "198.18.0.253", "198.18.0.254", "2001:db8::fe"}; !slices.Equal(addrs, want) {
		t.Errorf("peers %v, want %v", addrs, want)
	}
	for _, w := range []string{"BGPPeer newer-dup: address 198.18.0.254 is BGPPeer all's", "BGPPeer no-secret: spec.passwordSecretRef: secrets \"missing\" not found", "BGPPeer bad-bfd:"} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("problems %q lack %q", problems, w)
		}
	}
	if len(problems) != 3 {
		t.Errorf("%d problems, want 3: %q", len(problems), problems)
	}
	// A gateway that is no Node (no labels) gets neither the label's peer nor gw1's.
	got, _ = SelectPeers(objs, "appliance", nil, secret)
	addrs = nil
	for _, p := range got {
		addrs = append(addrs, p.Address.String())
	}
	if want := []string{"198.18.0.251", "198.18.0.254"}; !slices.Equal(addrs, want) {
		t.Errorf("appliance's peers %v, want %v", addrs, want)
	}
}

func TestMergeAdvertisements(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(int64(s), 0)) }
	i64 := func(v int64) *int64 { return &v }
	ad := func(name string, created int, r v1alpha1.RouteAttributes, gws ...string) v1alpha1.BGPAdvertisement {
		return v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)},
			Spec: v1alpha1.BGPAdvertisementSpec{RouteAttributes: r, Gateways: gws}}
	}
	objs := []v1alpha1.BGPAdvertisement{
		ad("newer", 2, v1alpha1.RouteAttributes{Communities: []string{"65000:2", "65000:1"}, LocalPref: i64(50), MED: i64(5)}),
		ad("older", 1, v1alpha1.RouteAttributes{Communities: []string{"65000:1"}, LargeCommunities: []string{"65000:1:1"}, LocalPref: i64(100)}),
		ad("other", 0, v1alpha1.RouteAttributes{Communities: []string{"65000:9"}, MED: i64(1)}, "gw2"),
		ad("broken", 3, v1alpha1.RouteAttributes{Communities: []string{"70000:1"}}),
	}
	got, problems := MergeAdvertisements(objs, "gw1", nil)
	if len(got.Communities) != 2 || got.Communities[0] != 65000<<16|1 || got.Communities[1] != 65000<<16|2 ||
		len(got.LargeCommunities) != 1 || *got.LocalPref != 100 || *got.MED != 5 {
		t.Errorf("merged %+v", got)
	}
	want := []string{"BGPAdvertisement newer: localPref 50 ignored: the older older sets 100", "BGPAdvertisement broken: spec.communities[0]"}
	if len(problems) != 2 || problems[0] != want[0] || !strings.HasPrefix(problems[1], want[1]) {
		t.Errorf("problems %q, want %q", problems, want)
	}
}
