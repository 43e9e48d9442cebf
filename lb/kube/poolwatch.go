// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// AddressPool objects (xlb.dev/v1alpha1): every gateway watches them and uses the pools they
// define after its config file's; the leader writes their status (Ready, used and free
// addresses) and Events. See ObjectPools for how conflicts are settled.

// poolStatusPeriod is how often the leader refreshes the pools' usage on their status even
// when no pool changed (allocations change it too).
const poolStatusPeriod = 10 * time.Second

// poolSyncWait bounds the wait for the AddressPool objects before the first pass over the
// Services.
const poolSyncWait = 30 * time.Second

// crdRetry is how often a gateway looks again for the xlb.dev API when it was not installed.
const crdRetry = 30 * time.Second

// poolResource is AddressPool's resource.
func poolResource() schema.GroupVersionResource {
	return v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceAddressPools)
}

// poolObjects is the controller's AddressPool state.
type poolObjects struct {
	// informer watches the objects; nil until the API is found.
	informer cache.SharedIndexInformer
	// factory owns informer.
	factory dynamicinformer.DynamicSharedInformerFactory
	// changed is signalled (coalesced) when the objects or the usage may have changed.
	changed chan struct{}
	// reported: pool name → the verdict last reported as an Event by this leader.
	reported map[string]PoolVerdict
}

// servesResource says whether the apiserver behind d serves resource of xlb.dev/v1alpha1 (the
// CRDs may not be installed: then false and no error).
func servesResource(d discovery.DiscoveryInterface, resource string) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kube: discovery of %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }), nil
}

// startPoolObjects starts watching AddressPools when the apiserver serves them, and returns
// whether it did; the caller waits for the informer's sync. When the API is not installed it
// logs so once and looks again every crdRetry in the background.
func (c *Controller) startPoolObjects(ctx context.Context) bool {
	if c.opts.Dynamic == nil {
		return false
	}
	ok, err := servesResource(c.client.Discovery(), v1alpha1.ResourceAddressPools)
	if err == nil && ok {
		c.watchPoolObjects(ctx)
		return true
	}
	c.log.Warn("AddressPool objects are not served (the xlb.dev CRDs are not installed?): using the config file's pools only; looking again every "+crdRetry.String(),
		"error", err)
	go func() {
		t := time.NewTicker(crdRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ok, err := servesResource(c.client.Discovery(), v1alpha1.ResourceAddressPools); err == nil && ok {
				c.log.Info("AddressPool objects are served now: watching them")
				c.watchPoolObjects(ctx)
				return
			}
		}
	}()
	return false
}

// watchPoolObjects starts the AddressPool informer.
func (c *Controller) watchPoolObjects(ctx context.Context) {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.opts.Dynamic, c.opts.Resync)
	inf := f.ForResource(poolResource()).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poolsChanged() },
		UpdateFunc: func(_, _ any) { c.poolsChanged() },
		DeleteFunc: func(any) { c.poolsChanged() },
	})
	c.mu.Lock()
	c.pobj.factory, c.pobj.informer = f, inf
	c.mu.Unlock()
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
}

// poolObjectsSynced says whether the AddressPool informer has synced (true when not watching).
func (c *Controller) poolObjectsSynced() bool {
	c.mu.Lock()
	inf := c.pobj.informer
	c.mu.Unlock()
	return inf == nil || inf.HasSynced()
}

// poolsChanged recomputes the pools from the file's and the objects, and has their status
// refreshed.
func (c *Controller) poolsChanged() {
	if err := c.applyPools(); err != nil {
		c.log.Error("address pools not applied", "error", err)
	}
	c.poolStatusSoon()
}

// poolStatusSoon asks the status loop for a pass (coalesced).
func (c *Controller) poolStatusSoon() {
	select {
	case c.pobj.changed <- struct{}{}:
	default:
	}
}

// listPoolObjects returns the AddressPool objects the informer holds, converted.
func (c *Controller) listPoolObjects() ([]v1alpha1.AddressPool, []*unstructured.Unstructured) {
	c.mu.Lock()
	inf := c.pobj.informer
	c.mu.Unlock()
	if inf == nil {
		return nil, nil
	}
	var typed []v1alpha1.AddressPool
	var raw []*unstructured.Unstructured
	for _, o := range inf.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var p v1alpha1.AddressPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			// The apiserver checked the schema: this is a version skew. Leave it out, loudly.
			c.log.Error("AddressPool object not readable; ignored", "pool", u.GetName(), "error", err)
			continue
		}
		typed = append(typed, p)
		raw = append(raw, u)
	}
	return typed, raw
}

// applyPools installs the file's pools followed by the usable objects' (ObjectPools).
func (c *Controller) applyPools() error {
	objs, _ := c.listPoolObjects()
	c.mu.Lock()
	file := c.filePools
	c.mu.Unlock()
	pools, _ := ObjectPools(objs, file)
	return c.installPools(pools)
}

// poolStatusLoop writes the AddressPools' status while leading, at each change and every
// poolStatusPeriod, until ctx ends.
func (c *Controller) poolStatusLoop(ctx context.Context) {
	t := time.NewTicker(poolStatusPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.pobj.changed:
		}
		if c.Leading() {
			c.writePoolStatus(ctx)
		}
	}
}

// writePoolStatus brings every AddressPool's status up to date (only those that differ are
// written) and reports changed verdicts as Events.
func (c *Controller) writePoolStatus(ctx context.Context) {
	objs, raw := c.listPoolObjects()
	if len(objs) == 0 {
		return
	}
	c.mu.Lock()
	file := c.filePools
	c.mu.Unlock()
	_, verdicts := ObjectPools(objs, file)
	usage := c.Usage()
	for i, o := range objs {
		v := verdicts[o.Name]
		want := o.Status.DeepCopy()
		want.ObservedGeneration = o.Generation
		if v.Ready {
			want.Used, want.Free = freeCount(usage, o.Name)
		} else {
			want.Used, want.Free = 0, ""
		}
		cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: v.Reason, Message: v.Message,
			ObservedGeneration: o.Generation}
		if v.Ready {
			cond.Status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&want.Conditions, cond)
		if !reflect.DeepEqual(*want, o.Status) {
			u := raw[i].DeepCopy()
			st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
			if err == nil {
				err = unstructured.SetNestedMap(u.Object, st, "status")
			}
			if err == nil {
				_, err = c.opts.Dynamic.Resource(poolResource()).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "xlb"})
			}
			if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				c.log.Warn("AddressPool status not written", "pool", o.Name, "error", err)
			}
		}
		if last, ok := c.pobj.reported[o.Name]; !ok || last.Reason != v.Reason || last.Message != v.Message {
			if !v.Ready {
				c.recorder.Event(raw[i], corev1.EventTypeWarning, "Pool"+v.Reason, v.Message)
			} else if ok {
				c.recorder.Event(raw[i], corev1.EventTypeNormal, "PoolInUse", "the pool is in use")
			}
			c.pobj.reported[o.Name] = v
		}
	}
}
