// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestStartSiteSeed: in Kubernetes mode a gateway whose file and SiteSettings set no seed writes
// one into SiteSettings site (as the gateways' service account of deploy/rbac.yaml) and runs
// with it: the seed of the datapath already forwarding on the host when there is one (an
// upgrade keeps the site's seed), else a random one that is no published default; a gateway
// starting next runs with the same. A file that sets its own seed writes nothing.
func TestStartSiteSeed(t *testing.T) {
	cp := kubetest.StartT(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kubetest.ApplyFile(ctx, cp.Admin(), filepath.Join(root, "deploy", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.InstallCRDs(ctx, cp.Admin(), filepath.Join(root, kubetest.CRDDir)); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.Controller()); err != nil {
		t.Fatal(err)
	}
	admin := dynamic.NewForConfigOrDie(cp.Admin())
	sites := admin.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(fileSeed uint32, running func(*config.Config) (uint32, bool)) uint32 {
		t.Helper()
		cfg := &config.Config{Kubernetes: &config.Kubernetes{Kubeconfig: kubeconfig}}
		cfg.Datapath.Seed = fileSeed
		st := startSite(cfg, log, running)
		if st.err != nil || !st.read {
			t.Fatalf("startSite: %+v", st)
		}
		return cfg.Datapath.Seed
	}
	siteSeed := func() (uint32, bool) {
		t.Helper()
		o, err := kube.GetSite(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if o == nil || o.Spec.Seed == nil {
			return 0, false
		}
		return uint32(*o.Spec.Seed), true
	}
	reset := func() {
		t.Helper()
		if err := sites.Delete(ctx, v1alpha1.SiteSettingsName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	pinned := func(s uint32) func(*config.Config) (uint32, bool) {
		return func(*config.Config) (uint32, bool) { return s, true }
	}
	none := func(*config.Config) (uint32, bool) { return 0, false }

	// An upgrade: the datapath on the host runs with the old chart's seed 1.
	if got := start(0, pinned(1)); got != 1 {
		t.Fatalf("upgraded gateway runs with seed %d, want the running datapath's 1", got)
	}
	if s, ok := siteSeed(); !ok || s != 1 {
		t.Fatalf("SiteSettings seed %d (set: %v), want 1", s, ok)
	}
	if got := start(0, pinned(99)); got != 1 {
		t.Fatalf("the next gateway runs with seed %d, want the site's 1", got)
	}

	// A new site: a random seed, shared.
	reset()
	first := start(0, none)
	if datapath.PublishedSeed(first) {
		t.Fatalf("a new site's gateway runs with seed %d, a published one", first)
	}
	if s, ok := siteSeed(); !ok || s != first {
		t.Fatalf("SiteSettings seed %d (set: %v), want %d", s, ok, first)
	}
	if got := start(0, none); got != first {
		t.Fatalf("the next gateway runs with seed %d, want the site's %d", got, first)
	}

	// The file's own seed: nothing written.
	reset()
	if got := start(42, none); got != 42 {
		t.Fatalf("a gateway whose file sets seed 42 runs with %d", got)
	}
	if s, ok := siteSeed(); ok {
		t.Fatalf("SiteSettings got seed %d from a gateway whose file sets its own", s)
	}
}
