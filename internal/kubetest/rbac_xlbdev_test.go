// SPDX-License-Identifier: Apache-2.0
package kubetest_test

import (
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
)

// TestRBACXLBObjects asks the real apiserver's RBAC authorizer, with deploy/rbac.yaml applied,
// what the controller's ServiceAccount may do with xlb's own resources (xlb.dev) and Secrets:
// read AddressPools and BGPPeers and write only the pools' status; create GatewayStatuses and
// write their status, delete none; get a Secret in its namespace only, list none.
func TestRBACXLBObjects(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	if err := kubetest.ApplyFile(ctx, cp.Admin(), "../../deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	ns := kubetest.ControllerNamespace
	for _, c := range []struct {
		verb, group, resource, sub, namespace string
		allowed                               bool
	}{
		{"list", "xlb.dev", "addresspools", "", "", true},
		{"watch", "xlb.dev", "addresspools", "", "", true},
		{"update", "xlb.dev", "addresspools", "status", "", true},
		{"update", "xlb.dev", "addresspools", "", "", false},
		{"create", "xlb.dev", "addresspools", "", "", false},
		{"delete", "xlb.dev", "addresspools", "", "", false},
		{"list", "xlb.dev", "bgppeers", "", "", true},
		{"watch", "xlb.dev", "bgppeers", "", "", true},
		{"update", "xlb.dev", "bgppeers", "", "", false},
		{"watch", "xlb.dev", "bgpadvertisements", "", "", true},
		{"create", "xlb.dev", "bgpadvertisements", "", "", false},
		{"get", "xlb.dev", "sitesettings", "", "", true},
		{"update", "xlb.dev", "sitesettings", "", "", false},
		{"create", "xlb.dev", "gatewaystatuses", "", "", true},
		{"get", "xlb.dev", "gatewaystatuses", "", "", true},
		{"update", "xlb.dev", "gatewaystatuses", "status", "", true},
		{"update", "xlb.dev", "gatewaystatuses", "", "", false},
		{"delete", "xlb.dev", "gatewaystatuses", "", "", false},
		{"get", "", "secrets", "", ns, true},
		{"list", "", "secrets", "", ns, false},
		{"watch", "", "secrets", "", ns, false},
		{"get", "", "secrets", "", "default", false},
		{"get", "", "secrets", "", "kube-system", false},
	} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   kubetest.ControllerUser,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource,
				Subresource: c.sub, Namespace: c.namespace},
		}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.allowed {
			t.Errorf("%s %s.%s/%s in %q: allowed %v, want %v (%s)", c.verb, c.resource, c.group, c.sub, c.namespace,
				got.Status.Allowed, c.allowed, got.Status.Reason)
		}
	}
}
