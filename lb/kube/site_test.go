// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

func TestSiteOf(t *testing.T) {
	if s, err := SiteOf(nil); err != nil || s.Generation != 0 || s.Seed != nil || s.Forwarding != nil {
		t.Errorf("no object: %+v %v, want a zero Site", s, err)
	}
	seed, size := int64(7), int32(65537)
	o := &v1alpha1.SiteSettings{ObjectMeta: metav1.ObjectMeta{Name: "site", Generation: 3}, Spec: v1alpha1.SiteSettingsSpec{
		Seed: &seed, MaglevTableSize: &size, Forwarding: "dsr", DSRFallback: "returnPath",
		UDPTimeout: &metav1.Duration{Duration: 30 * time.Second}}}
	s, err := SiteOf(o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Generation != 3 || *s.Seed != 7 || *s.TableSize != 65537 || *s.UDPTimeout != 30*time.Second || s.TCPClosingTimeout != nil ||
		*s.Forwarding != (lb.Forwarding{Mode: datapath.DSR, Fallback: lb.FallbackReturnPath}) {
		t.Errorf("SiteOf = %+v", s)
	}
	for _, c := range []struct {
		mod  func(*v1alpha1.SiteSettingsSpec)
		want string
	}{
		{func(s *v1alpha1.SiteSettingsSpec) { v := int32(65536); s.MaglevTableSize = &v }, "maglevTableSize"},
		{func(s *v1alpha1.SiteSettingsSpec) { v := int64(-1); s.Seed = &v }, "spec.seed -1"},
		{func(s *v1alpha1.SiteSettingsSpec) { s.UDPTimeout = &metav1.Duration{Duration: time.Millisecond} }, "spec.udpTimeout"},
		{func(s *v1alpha1.SiteSettingsSpec) { s.Forwarding = "tunnel" }, "tunnel"},
	} {
		bad := o.DeepCopy()
		c.mod(&bad.Spec)
		if _, err := SiteOf(bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SiteOf(%+v) = %v, want an error naming %q", bad.Spec, err, c.want)
		}
	}
}

// TestEnsureSeed: gateways that start with no seed agree on one through SiteSettings site, as the
// gateways' service account (the chart's RBAC): several at once, with no object, create it once
// and all get the winner's seed; a later one gets it too and writes nothing; with an object that
// sets other settings but no seed, several at once update it once (the others' updates conflict
// and read the winner's); an object's own seed is never replaced.
func TestEnsureSeed(t *testing.T) {
	c := controlPlane(t)
	admin, err := dynamic.NewForConfig(c.Admin())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := dynamic.NewForConfig(c.Controller())
	if err != nil {
		t.Fatal(err)
	}
	res := admin.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings))
	del := func() {
		err := res.Delete(context.Background(), v1alpha1.SiteSettingsName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	del()
	t.Cleanup(del)
	ctx := t.Context()

	race := func(base uint32) uint32 {
		t.Helper()
		const n = 6
		type result struct {
			seed    uint32
			created bool
			err     error
		}
		out := make(chan result, n)
		for i := range n {
			go func() {
				s, created, err := EnsureSeed(ctx, gw, base+uint32(i))
				out <- result{s, created, err}
			}()
		}
		var seed uint32
		writers := 0
		for i := range n {
			r := <-out
			if r.err != nil {
				t.Fatalf("EnsureSeed: %v", r.err)
			}
			if i > 0 && r.seed != seed {
				t.Fatalf("gateways starting at once got seeds %d and %d", seed, r.seed)
			}
			seed = r.seed
			if r.created {
				writers++
			}
		}
		if writers != 1 || seed < base || seed >= base+n {
			t.Fatalf("%d gateways wrote a seed (want 1); the site's is %d, want one of theirs (%d..%d)", writers, seed, base, base+n-1)
		}
		return seed
	}
	got := func() *v1alpha1.SiteSettings {
		t.Helper()
		o, err := GetSite(ctx, admin)
		if err != nil || o == nil {
			t.Fatalf("SiteSettings after EnsureSeed: %v, %v", o, err)
		}
		return o
	}

	// No object: created once.
	seed := race(1000)
	if o := got(); o.Spec.Seed == nil || *o.Spec.Seed != int64(seed) {
		t.Fatalf("SiteSettings: %+v, want seed %d", o.Spec, seed)
	}
	if s, created, err := EnsureSeed(ctx, gw, 5); err != nil || created || s != seed {
		t.Fatalf("a later gateway: seed %d, created %v, %v; want %d, nothing written", s, created, err, seed)
	}

	// An object without a seed: updated once, its other settings kept.
	del()
	_, err = res.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "SiteSettings",
		"metadata": map[string]any{"name": v1alpha1.SiteSettingsName},
		"spec":     map[string]any{"forwarding": "dsr"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed = race(2000)
	if o := got(); o.Spec.Seed == nil || *o.Spec.Seed != int64(seed) || o.Spec.Forwarding != "dsr" {
		t.Fatalf("SiteSettings: %+v, want seed %d and forwarding dsr", o.Spec, seed)
	}

	// The operator's seed stays.
	o := got()
	v := int64(0xfeedbeef)
	o.Spec.Seed = &v
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, created, err := EnsureSeed(ctx, gw, 7); err != nil || created || s != 0xfeedbeef {
		t.Fatalf("with the operator's seed: %d, created %v, %v; want 0xfeedbeef, nothing written", s, created, err)
	}
}
