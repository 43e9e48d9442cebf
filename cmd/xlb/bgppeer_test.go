// SPDX-License-Identifier: Apache-2.0
package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeconv "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/gateway"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// TestDaemonBGPPeerObjects: a gateway in Kubernetes mode peers with the BGPPeer objects that
// select it, live, next to its file's peer, against real BIRD and a real apiserver (the daemon
// as the xlb ServiceAccount of deploy/rbac.yaml): a BGPPeer created brings its session up
// without touching the file's (same establishment time at xlb and at BIRD); one that selects
// another gateway is not used; one whose address is the file's peer is refused and said so on
// the gateway's GatewayStatus, which lists both sessions; a password from a Secret that BIRD
// does not share keeps that session down; deleting the BGPPeer closes its session and leaves
// the file's alone. The SiteSettings object's seed wins over the file's at start, and a new
// seed is reported as pending a restart, never applied to the running datapath. A
// BGPAdvertisement's community reaches BIRD on the routes without resetting a session. A
// BGPPeer the gateway cannot use (its Secret missing) gets a Warning Event.
func TestDaemonBGPPeerObjects(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Fatal("needs bird (make deps installs bird2)")
	}
	start := time.Now()
	step := func(name string) { t.Logf("--- %s (at %v)", name, time.Since(start).Round(time.Millisecond)) }
	l := newLab(t)
	_, ctl := l.twoSessionRouter(t, "")

	step("control plane in the gateway's namespace: RBAC and xlb's CRDs")
	cp, err := kubetest.Start(t.Context(), kubetest.Options{Dir: t.TempDir(), NetNS: l.gw.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Stop() })
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kubetest.ApplyFile(ctx, cp.Admin(), filepath.Join(root, "deploy", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.InstallCRDs(ctx, cp.Admin(), filepath.Join(root, kubetest.CRDDir)); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(l.dir, "kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.Controller()); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.Admin())
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	peers := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPPeers))
	apply := func(name string, spec v1alpha1.BGPPeerSpec) {
		t.Helper()
		o := &v1alpha1.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: "xlb.dev/v1alpha1", Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		m, err := runtimeconv.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := peers.Apply(ctx, name, &unstructured.Unstructured{Object: m}, metav1.ApplyOptions{FieldManager: "test", Force: true}); err != nil {
			t.Fatalf("apply BGPPeer %s: %v", name, err)
		}
	}
	status := func() v1alpha1.GatewayStatusStatus {
		u, err := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceGatewayStatuses)).Get(ctx, "gw1", metav1.GetOptions{})
		if err != nil {
			return v1alpha1.GatewayStatusStatus{}
		}
		var g v1alpha1.GatewayStatus
		_ = runtimeconv.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g)
		return g.Status
	}
	waitStatus := func(what string, cond func(v1alpha1.GatewayStatusStatus) bool) {
		t.Helper()
		var st v1alpha1.GatewayStatusStatus
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if st = status(); cond(st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GatewayStatus gw1: %s; has %+v", what, st)
			}
		}
	}

	step("SiteSettings site sets the seed before the gateway starts (its file has none: 0)")
	sites := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings))
	site := func(seed int64) {
		t.Helper()
		o := &v1alpha1.SiteSettings{TypeMeta: metav1.TypeMeta{APIVersion: "xlb.dev/v1alpha1", Kind: "SiteSettings"},
			ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: v1alpha1.SiteSettingsSpec{Seed: &seed}}
		m, err := runtimeconv.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sites.Apply(ctx, "site", &unstructured.Unstructured{Object: m}, metav1.ApplyOptions{FieldManager: "test", Force: true}); err != nil {
			t.Fatalf("apply SiteSettings: %v", err)
		}
	}
	site(7)

	step("start with the file's peer a")
	l.extra = fmt.Sprintf(`bgp:
  routerID: %s
  asn: 65001
  peers:
    - {address: %s, asn: 65000, holdTime: 9s, keepaliveTime: 3s, connectRetry: 1s, localAddress: %s}
kubernetes:
  kubeconfig: %s
  gatewayName: gw1
  nodeHealthPort: 0
`, labGWRouter, labRouter, labGWRouter, kubeconfig)
	l.writeConfig(t, labBackends[:2])
	d := l.startDaemon(t)
	l.waitReady(t, d)
	l.waitPeer(t, labRouter, true, bgpUpTimeout)
	waitStatus("session a established, seed 7 from SiteSettings", func(st v1alpha1.GatewayStatusStatus) bool {
		return st.SessionsUp == "1/1" && st.Site != nil && st.Site.Seed == 7 && len(st.Site.RestartPending) == 0
	})
	time.Sleep(1100 * time.Millisecond) // establishment times are whole seconds: make a reset visible
	sinceA, birdA := l.peerSince(t, labRouter), birdProto(t, ctl, "a")

	step("a BGPPeer for another gateway is not used; one for gw1 (by name) brings session b up")
	apply("other", v1alpha1.BGPPeerSpec{Address: "198.18.2.77", ASN: 65000, Gateways: []string{"gw2"}})
	created := time.Now()
	apply("b", v1alpha1.BGPPeerSpec{Address: labRouterB, ASN: 65000, LocalAddress: labGWRouterB,
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second},
		ConnectRetry: &metav1.Duration{Duration: time.Second}, Gateways: []string{"gw1"}})
	l.waitPeer(t, labRouterB, true, bgpUpTimeout)
	t.Logf("session b established %v after its BGPPeer was created", time.Since(created).Round(time.Millisecond))
	waitStatus("both sessions", func(st v1alpha1.GatewayStatusStatus) bool { return st.SessionsUp == "2/2" })
	if st := l.bgpStatus(t); slices.ContainsFunc(st.Peers, func(p gateway.BGPPeerStatus) bool { return p.Address == "198.18.2.77" }) {
		t.Errorf("the BGPPeer of gw2 is used by gw1: %+v", st.Peers)
	}
	if got := l.peerSince(t, labRouter); got != sinceA || !sameBirdSession(birdA, birdProto(t, ctl, "a")) {
		t.Errorf("session a was reset when BGPPeer b was added (since %s → %s)", sinceA, got)
	}

	step("a BGPAdvertisement adds its community to the routes, re-announced without a session reset")
	ads := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPAdvertisements))
	adObj := &v1alpha1.BGPAdvertisement{TypeMeta: metav1.TypeMeta{APIVersion: "xlb.dev/v1alpha1", Kind: "BGPAdvertisement"},
		ObjectMeta: metav1.ObjectMeta{Name: "tag"}, Spec: v1alpha1.BGPAdvertisementSpec{
			RouteAttributes: v1alpha1.RouteAttributes{Communities: []string{"65000:42"}}, Gateways: []string{"gw1"}}}
	m, err := runtimeconv.DefaultUnstructuredConverter.ToUnstructured(adObj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ads.Apply(ctx, "tag", &unstructured.Unstructured{Object: m}, metav1.ApplyOptions{FieldManager: "test", Force: true}); err != nil {
		t.Fatal(err)
	}
	vip := labVIP.String()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		all := birdc(t, ctl, "show", "route", "all", vip+"/32")
		if strings.Contains(all, "(65000,42)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BIRD's route lacks the BGPAdvertisement's community 65000:42:\n%s", all)
		}
	}
	if got := l.peerSince(t, labRouter); got != sinceA {
		t.Errorf("session a was reset by a BGPAdvertisement (since %s → %s)", sinceA, got)
	}

	step("a BGPPeer with the file's peer's address is refused, on the GatewayStatus")
	apply("dup", v1alpha1.BGPPeerSpec{Address: labRouter, ASN: 65099})
	waitStatus("a problem naming the file's peer", func(st v1alpha1.GatewayStatusStatus) bool {
		return slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, labRouter) && strings.Contains(p, "config file") })
	})
	if got := l.peerSince(t, labRouter); got != sinceA {
		t.Errorf("session a was reset by a refused BGPPeer (since %s → %s)", sinceA, got)
	}

	step("a password BIRD does not share (from a Secret) keeps session b down")
	if _, err := admin.CoreV1().Secrets("xlb-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bgp-b"}, Data: map[string][]byte{"password": []byte("not-birds\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply("b", v1alpha1.BGPPeerSpec{Address: labRouterB, ASN: 65000, LocalAddress: labGWRouterB,
		HoldTime: &metav1.Duration{Duration: 9 * time.Second}, KeepaliveTime: &metav1.Duration{Duration: 3 * time.Second},
		ConnectRetry: &metav1.Duration{Duration: time.Second}, Gateways: []string{"gw1"},
		PasswordSecretRef: &v1alpha1.SecretKeyRef{Name: "bgp-b"}})
	l.waitPeer(t, labRouterB, false, bgpUpTimeout)
	time.Sleep(3 * time.Second)
	l.waitPeer(t, labRouterB, false, time.Second)
	if got := l.peerSince(t, labRouter); got != sinceA {
		t.Errorf("session a was reset when BGPPeer b changed (since %s → %s)", sinceA, got)
	}
	if out := d.out.String(); strings.Contains(out, "not-birds") {
		t.Errorf("the daemon logged the password")
	}

	step("a BGPPeer whose Secret is missing is refused: on the GatewayStatus and by an Event on it")
	apply("nosecret", v1alpha1.BGPPeerSpec{Address: "198.18.2.88", ASN: 65000, Gateways: []string{"gw1"},
		PasswordSecretRef: &v1alpha1.SecretKeyRef{Name: "missing"}})
	waitStatus("a problem naming BGPPeer nosecret", func(st v1alpha1.GatewayStatusStatus) bool {
		return slices.ContainsFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, "BGPPeer nosecret: ") })
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		evs, err := admin.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Kind == "BGPPeer" && e.InvolvedObject.Name == "nosecret" && e.Reason == "NotUsed" &&
				strings.Contains(e.Message, "gateway gw1") && strings.Contains(e.Message, "missing")
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NotUsed Event on BGPPeer nosecret")
		}
	}

	step("a new seed in SiteSettings waits for a restart, and says so")
	site(9)
	waitStatus("seed 9 pending a restart", func(st v1alpha1.GatewayStatusStatus) bool {
		return st.Site != nil && st.Site.Seed == 7 && slices.Contains(st.Site.RestartPending, "seed 9 (running 7)")
	})

	step("deleting BGPPeer b closes its session; a is untouched")
	if err := peers.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus("one session", func(st v1alpha1.GatewayStatusStatus) bool { return st.SessionsUp == "1/1" })
	if got := l.peerSince(t, labRouter); got != sinceA || !sameBirdSession(birdA, birdProto(t, ctl, "a")) {
		t.Errorf("session a was reset when BGPPeer b was deleted (since %s → %s)", sinceA, got)
	}
}
