// SPDX-License-Identifier: Apache-2.0
package kubetest_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/internal/kubetest"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlane starts a real apiserver and checks the identities, the kubeconfig another
// process would use, and that ApplyFile handles every kind the controller's tests need.
func TestControlPlane(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()

	for _, tc := range []struct {
		name       string
		cfg        *rest.Config
		user       string
		wantGroups []string
	}{
		{"admin", cp.Admin(), kubetest.AdminUser, []string{"system:masters", "system:authenticated"}},
		{"controller", cp.Controller(), kubetest.ControllerUser,
			[]string{"system:serviceaccounts", "system:serviceaccounts:xlb-system", "system:authenticated"}},
		{"spare user", cp.As("user-1"), "user-1", []string{"system:authenticated"}},
		{"impersonated", cp.As("someone", "team-a"), "someone", []string{"team-a", "system:authenticated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := whoAmI(t, tc.cfg)
			if u.Username != tc.user || !sameSet(u.Groups, tc.wantGroups) {
				t.Errorf("authenticated as %q %v, want %q %v", u.Username, u.Groups, tc.user, tc.wantGroups)
			}
		})
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.Controller()); err != nil {
		t.Fatal(err)
	}
	loaded, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load the written kubeconfig: %v", err)
	}
	if u := whoAmI(t, loaded); u.Username != kubetest.ControllerUser {
		t.Errorf("kubeconfig authenticates as %q, want %q", u.Username, kubetest.ControllerUser)
	}

	if err := kubetest.ApplyFile(ctx, cp.Admin(), "testdata/kinds.yaml"); err != nil {
		t.Fatal(err)
	}
	// Applying again is harmless (server-side apply).
	if err := kubetest.ApplyFile(ctx, cp.Admin(), "testdata/kinds.yaml"); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Admin())
	svc, err := cs.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.HealthCheckNodePort == 0 {
		t.Errorf("service shop/web: clusterIP %q healthCheckNodePort %d, want both allocated",
			svc.Spec.ClusterIP, svc.Spec.HealthCheckNodePort)
	}
	slice, err := cs.DiscoveryV1().EndpointSlices("shop").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slice.Endpoints[0].Addresses; !slices.Equal(got, []string{"198.18.10.11"}) {
		t.Errorf("endpointslice shop/web-1 addresses %v", got)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := cs.CoordinationV1().Leases("shop").Get(ctx, "some-lease", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

// whoAmI asks the apiserver who cfg authenticates as.
func whoAmI(t *testing.T, cfg *rest.Config) authnv1.UserInfo {
	t.Helper()
	r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().
		Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	return r.Status.UserInfo
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
