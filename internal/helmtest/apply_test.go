// SPDX-License-Identifier: Apache-2.0
package helmtest_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/helmtest"
	"github.com/xlb-dev/xlb/internal/kubetest"
)

// TestChartApply applies every value combination's rendering, CRDs included, to a real
// kube-apiserver (RBAC on) with server-side apply, as a cluster administrator would: every
// object is accepted. Then it reads each one back, and checks that the RBAC is in force: the
// gateways' and the agent's ServiceAccounts may list Services, a user without bindings may not.
func TestChartApply(t *testing.T) {
	h := findHelm(t)
	repo := repoRoot(t)
	cp := kubetest.StartT(t)
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	dyn := dynamic.NewForConfigOrDie(cp.Admin())
	for _, c := range combinations(t) {
		t.Run(c.name, func(t *testing.T) {
			out, err := h.Template(ctx, c.render(repo))
			if err != nil {
				t.Fatal(err)
			}
			objs := decode(t, out)
			if len(objs) == 0 {
				t.Fatal("helm template rendered nothing")
			}
			// helm install --create-namespace makes the release's namespace; the Lease's may be
			// another one the administrator made.
			for _, o := range objs {
				ns := o.GetNamespace()
				if ns == "" {
					continue
				}
				if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
						metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			path := filepath.Join(t.TempDir(), c.name+".yaml")
			if err := os.WriteFile(path, out, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := kubetest.ApplyFile(ctx, cp.Admin(), path); err != nil {
				t.Fatalf("the apiserver refuses the chart's objects (%s): %v", c.name, err)
			}
			for _, o := range objs {
				gvk := o.GroupVersionKind()
				gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource(gvk.Kind)}
				var ri dynamic.ResourceInterface = dyn.Resource(gvr)
				if o.GetNamespace() != "" {
					ri = dyn.Resource(gvr).Namespace(o.GetNamespace())
				}
				got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Errorf("%s: applied, then %v", key(o), err)
					continue
				}
				if !slices.ContainsFunc(got.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
					return f.Manager == kubetest.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply
				}) {
					t.Errorf("%s: not applied server-side by %s", key(o), kubetest.FieldManager)
				}
			}
		})
	}

	// The roles are in force for the ServiceAccounts they bind, and only for them.
	for _, user := range []string{"system:serviceaccount:xlb-system:xlb", "system:serviceaccount:xlb-system:xlb-agent"} {
		c := kubernetes.NewForConfigOrDie(cp.As(user, "system:serviceaccounts", "system:serviceaccounts:xlb-system"))
		if _, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("%s: list services: %v", user, err)
		}
		if _, err := c.CoreV1().Secrets("xlb-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: list secrets: %v, want Forbidden", user, err)
		}
	}
	spare := kubernetes.NewForConfigOrDie(cp.As("user-1"))
	if _, err := spare.CoreV1().Services("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("user-1: list services: %v, want Forbidden (RBAC on)", err)
	}
}

// resource is the plural resource of the kinds the chart renders.
func resource(kind string) string {
	switch {
	case strings.HasSuffix(kind, "Policy"):
		return strings.ToLower(strings.TrimSuffix(kind, "y")) + "ies"
	default:
		return strings.ToLower(kind) + "s"
	}
}

// TestManifests: deploy/agent.yaml and deploy/rbac.yaml are exactly what the chart renders
// with its defaults (make manifests writes them), so the raw manifests and the chart never
// drift; and they are what the other tests apply (TestRBAC, TestAgentRBAC, the agent's).
func TestManifests(t *testing.T) {
	h := findHelm(t)
	repo := repoRoot(t)
	files, err := helmtest.RenderManifests(t.Context(), h, repo)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("rendered %d manifests, want deploy/agent.yaml and deploy/rbac.yaml", len(files))
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(repo, path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the chart's rendering (edit deploy/helm/xlb and run make manifests):\n%s", path, firstDiff(string(got), string(want)))
		}
		objs := decode(t, got)
		if len(objs) < 2 {
			t.Errorf("%s holds %d objects", path, len(objs))
		}
		for _, o := range objs {
			if ns := o.GetNamespace(); ns != "" && ns != helmtest.ManifestNamespace {
				t.Errorf("%s: %s in namespace %s", path, key(o), ns)
			}
		}
	}
	// The namespace comes first, with the rest of the controller's RBAC after it.
	rbac := decode(t, files["deploy/rbac.yaml"])
	if len(rbac) == 0 || rbac[0].GetKind() != "Namespace" || rbac[0].GetName() != helmtest.ManifestNamespace {
		t.Errorf("deploy/rbac.yaml does not start with the Namespace %s", helmtest.ManifestNamespace)
	}
}

// firstDiff shows the first line where got and want differ, with some context.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  file:  %s\n  chart: %s", i+1, gl, wl)
		}
	}
	return "(equal lines; different endings)"
}
