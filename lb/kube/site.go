// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	"github.com/xlb-dev/xlb/lb/maglev"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Site is the SiteSettings object as the gateway uses it: each field nil when the object
// leaves it to the gateway.
type Site struct {
	// Generation is the object's metadata.generation (0: no object).
	Generation int64
	// Seed, TableSize and the timeouts are loaded with the datapath (at a gateway's start).
	Seed                  *uint32
	TableSize             *int
	TCPEstablishedTimeout *time.Duration
	TCPClosingTimeout     *time.Duration
	UDPTimeout            *time.Duration
	// Forwarding is applied live.
	Forwarding *lb.Forwarding
}

// SiteOf checks and converts the SiteSettings object o (nil: no object, a zero Site).
func SiteOf(o *v1alpha1.SiteSettings) (Site, error) {
	var s Site
	if o == nil {
		return s, nil
	}
	s.Generation = o.Generation
	sp := o.Spec
	if sp.Seed != nil {
		if *sp.Seed < 0 || *sp.Seed > 1<<32-1 {
			return Site{}, fmt.Errorf("sitesettings %s: spec.seed %d: not 0 to 4294967295", o.Name, *sp.Seed)
		}
		v := uint32(*sp.Seed)
		s.Seed = &v
	}
	if sp.MaglevTableSize != nil {
		v := int(*sp.MaglevTableSize)
		if err := maglev.CheckSize(v); err != nil {
			return Site{}, fmt.Errorf("sitesettings %s: spec.maglevTableSize: %w", o.Name, err)
		}
		s.TableSize = &v
	}
	for _, t := range []struct {
		field string
		in    *metav1.Duration
		out   **time.Duration
	}{
		{"tcpEstablishedTimeout", sp.TCPEstablishedTimeout, &s.TCPEstablishedTimeout},
		{"tcpClosingTimeout", sp.TCPClosingTimeout, &s.TCPClosingTimeout},
		{"udpTimeout", sp.UDPTimeout, &s.UDPTimeout},
	} {
		if t.in == nil {
			continue
		}
		if t.in.Duration < datapath.MinTimeout {
			return Site{}, fmt.Errorf("sitesettings %s: spec.%s %v: below %v", o.Name, t.field, t.in.Duration, datapath.MinTimeout)
		}
		d := t.in.Duration
		*t.out = &d
	}
	if sp.Forwarding != "" {
		f := lb.Forwarding{Mode: datapath.Forwarding(sp.Forwarding)}
		switch sp.DSRFallback {
		case "", "exclude":
		case "returnPath":
			f.Fallback = lb.FallbackReturnPath
		default:
			return Site{}, fmt.Errorf("sitesettings %s: spec.dsrFallback %q: want exclude or returnPath", o.Name, sp.DSRFallback)
		}
		if err := f.Validate(); err != nil {
			return Site{}, fmt.Errorf("sitesettings %s: %w", o.Name, err)
		}
		s.Forwarding = &f
	}
	return s, nil
}

// GetSite reads SiteSettings "site": nil, nil when there is none or the API is not served.
func GetSite(ctx context.Context, client dynamic.Interface) (*v1alpha1.SiteSettings, error) {
	u, err := client.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings)).
		Get(ctx, v1alpha1.SiteSettingsName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sitesettings %s: %w", v1alpha1.SiteSettingsName, err)
	}
	var o v1alpha1.SiteSettings
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		return nil, fmt.Errorf("sitesettings %s: %w", v1alpha1.SiteSettingsName, err)
	}
	return &o, nil
}
