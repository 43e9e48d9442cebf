// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
