// SPDX-License-Identifier: Apache-2.0
package helmtest_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
)

// TestHelmInstall drives the chart's life cycle with helm itself against a real kube-apiserver,
// as an administrator would (docs/install.md): helm install --create-namespace (the CRDs of
// crds/ first, then both parts), helm upgrade to another image version with the same values
// (both DaemonSets move to it, their selectors unchanged), helm uninstall (everything of the
// release goes; the CRDs stay, as helm leaves them).
func TestHelmInstall(t *testing.T) {
	h := findHelm(t)
	cp := kubetest.StartT(t)
	ctx := t.Context()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.Admin()); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	values := filepath.Join(chartDir(t), "ci", "both-dsr-values.yaml")
	helm := func(args ...string) string {
		t.Helper()
		out, err := h.Run(ctx, append(args, "--kubeconfig", kubeconfig)...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	images := func() []string {
		t.Helper()
		var got []string
		for _, name := range []string{"xlb-agent", "xlb-gateway"} {
			ds, err := admin.AppsV1().DaemonSets("xlb-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("DaemonSet %s: %v", name, err)
			}
			got = append(got, ds.Spec.Template.Spec.Containers[0].Image)
		}
		return got
	}

	out := helm("install", "xlb", chartDir(t), "--namespace", "xlb-system", "--create-namespace", "--values", values)
	if !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install: %s", out)
	}
	crds := crdNames(t)
	ext := dynamic.NewForConfigOrDie(cp.Admin())
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, name := range crds {
		if _, err := ext.Resource(crdRes).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s after helm install: %v", name, err)
		}
	}
	want := "xlb.dev/xlb:" + appVersion(t)
	if got := images(); !slices.Equal(got, []string{want, want}) {
		t.Errorf("images after install %v, want %s", got, want)
	}
	if _, err := admin.CoreV1().ConfigMaps("xlb-system").Get(ctx, "xlb-gateway", metav1.GetOptions{}); err != nil {
		t.Errorf("the gateways' ConfigMap after install: %v", err)
	}

	out = helm("upgrade", "xlb", chartDir(t), "--namespace", "xlb-system", "--reuse-values", "--set", "image.tag=v9.9.9")
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "REVISION: 2") {
		t.Fatalf("helm upgrade: %s", out)
	}
	if got := images(); !slices.Equal(got, []string{"xlb.dev/xlb:v9.9.9", "xlb.dev/xlb:v9.9.9"}) {
		t.Errorf("images after upgrade %v, want xlb.dev/xlb:v9.9.9", got)
	}
	// The upgrade kept the release's values (both parts, direct server return).
	ds, err := admin.AppsV1().DaemonSets("xlb-system").Get(ctx, "xlb-agent", metav1.GetOptions{})
	if err != nil || !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--dsr-interface=eth0") {
		t.Errorf("the agent after upgrade lost its values: %v", err)
	}

	helm("uninstall", "xlb", "--namespace", "xlb-system")
	for _, name := range []string{"xlb-agent", "xlb-gateway"} {
		if _, err := admin.AppsV1().DaemonSets("xlb-system").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DaemonSet %s after helm uninstall: %v, want NotFound", name, err)
		}
	}
	if _, err := admin.RbacV1().ClusterRoles().Get(ctx, "xlb-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole xlb-controller after helm uninstall: %v, want NotFound", err)
	}
	for _, name := range crds {
		if _, err := ext.Resource(crdRes).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s after helm uninstall: %v (helm leaves CRDs)", name, err)
		}
	}
}
