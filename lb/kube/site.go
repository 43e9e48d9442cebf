// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// siteFieldManager names the gateway's writes of SiteSettings (its seed).
const siteFieldManager = "xlb-gateway"

// EnsureSeed returns the flow-hash seed SiteSettings site sets, writing candidate into it first
// when it sets none: creating the object when there is none, else updating the one read at its
// resourceVersion. Two gateways starting at once cannot end up with different seeds: the second
// create fails (AlreadyExists) or the second update fails (Conflict), and the seed the first
// wrote is read again. created says whether candidate was written.
func EnsureSeed(ctx context.Context, client dynamic.Interface, candidate uint32) (seed uint32, created bool, err error) {
	res := client.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceSiteSettings))
	for range 5 {
		u, err := res.Get(ctx, v1alpha1.SiteSettingsName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(),
				"kind":       "SiteSettings",
				"metadata":   map[string]any{"name": v1alpha1.SiteSettingsName},
				"spec":       map[string]any{"seed": int64(candidate)},
			}}
			_, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: siteFieldManager})
			if apierrors.IsAlreadyExists(err) {
				continue // another gateway's: read its seed
			}
			if err != nil {
				return 0, false, fmt.Errorf("create sitesettings %s with a seed: %w", v1alpha1.SiteSettingsName, err)
			}
			return candidate, true, nil
		case err != nil:
			return 0, false, fmt.Errorf("sitesettings %s: %w", v1alpha1.SiteSettingsName, err)
		}
		if v, found, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "seed"); found && err == nil {
			n, ok := v.(int64)
			if !ok || n < 0 || n > 1<<32-1 {
				return 0, false, fmt.Errorf("sitesettings %s: spec.seed %v: not 0 to 4294967295", v1alpha1.SiteSettingsName, v)
			}
			return uint32(n), false, nil
		}
		if err := unstructured.SetNestedField(u.Object, int64(candidate), "spec", "seed"); err != nil {
			return 0, false, fmt.Errorf("sitesettings %s: set spec.seed: %w", v1alpha1.SiteSettingsName, err)
		}
		_, err = res.Update(ctx, u, metav1.UpdateOptions{FieldManager: siteFieldManager})
		if apierrors.IsConflict(err) {
			continue // changed since it was read (another gateway's seed, perhaps): read it again
		}
		if err != nil {
			return 0, false, fmt.Errorf("write a seed into sitesettings %s: %w", v1alpha1.SiteSettingsName, err)
		}
		return candidate, true, nil
	}
	return 0, false, fmt.Errorf("sitesettings %s: kept changing while a seed was written; try again", v1alpha1.SiteSettingsName)
}
