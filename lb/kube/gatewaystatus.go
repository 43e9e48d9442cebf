// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// The reasons of a GatewayStatus's Ready condition.
const (
	// ReasonGatewayReporting: the gateway reports in time and its datapath is healthy.
	ReasonGatewayReporting = "Reporting"
	// ReasonGatewayStale: the gateway has not renewed its object for StaleAfter heartbeats
	// (written by the leading gateway).
	ReasonGatewayStale = "Stale"
	// ReasonGatewayDatapath: the gateway's datapath is not healthy.
	ReasonGatewayDatapath = "DatapathUnhealthy"
	// ReasonGatewayReconcile: the gateway's last reconcile failed.
	ReasonGatewayReconcile = "ReconcileFailed"
)

// StaleAfter is how many heartbeat intervals may pass without a write before the leader marks
// a gateway's object stale.
const StaleAfter = 3

// DefaultHeartbeat is StatusReporterOptions.Heartbeat's default.
const DefaultHeartbeat = 10 * time.Second

// gatewayResource is GatewayStatus's resource.
func gatewayResource() schema.GroupVersionResource {
	return v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceGatewayStatuses)
}

// StatusReporterOptions configure a StatusReporter.
type StatusReporterOptions struct {
	// Client writes the objects.
	Client dynamic.Interface
	// Name is the gateway's name (its object's name): kubernetes.gatewayName.
	Name string
	// Snapshot returns the gateway's report; Heartbeat, Conditions and the counts are filled
	// in by the reporter.
	Snapshot func() v1alpha1.GatewayStatusStatus
	// Leading says whether this gateway leads: the leader marks the other gateways' stale
	// objects.
	Leading func() bool
	// Heartbeat is the longest time between two writes; 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// Log receives the reporter's log; nil discards it.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// StatusReporter writes a gateway's GatewayStatus object: at each Heartbeat, and soon after
// Changed is called when the report differs from the last one written.
type StatusReporter struct {
	opts    StatusReporterOptions
	changed chan struct{}
	// last is the status last written (without its heartbeat), to skip writes that change
	// nothing but the heartbeat until the heartbeat is due.
	last     *v1alpha1.GatewayStatusStatus
	lastBeat time.Time
	// lastErr is the last write error logged (each new one is logged once).
	lastErr string
}

// NewStatusReporter returns a reporter; Run starts it.
func NewStatusReporter(opts StatusReporterOptions) (*StatusReporter, error) {
	if opts.Client == nil || opts.Snapshot == nil || opts.Name == "" {
		return nil, fmt.Errorf("kube: status reporter: client, snapshot and name are required")
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Leading == nil {
		opts.Leading = func() bool { return false }
	}
	return &StatusReporter{opts: opts, changed: make(chan struct{}, 1)}, nil
}

// Changed asks for a write soon (coalesced, never blocking), if the report changed.
func (r *StatusReporter) Changed() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Run writes the object until ctx ends. Writes are at most one per second.
func (r *StatusReporter) Run(ctx context.Context) {
	beat := time.NewTicker(r.opts.Heartbeat)
	defer beat.Stop()
	for {
		if err := r.report(ctx); err != nil && ctx.Err() == nil && err.Error() != r.lastErr {
			r.lastErr = err.Error()
			r.opts.Log.Warn("gateway status not written (the xlb.dev CRDs installed? RBAC?); retrying at each heartbeat, logging only a new error",
				"gateway", r.opts.Name, "error", err)
		} else if err == nil {
			r.lastErr = ""
		}
		if r.opts.Leading() {
			if err := r.markStale(ctx); err != nil && ctx.Err() == nil {
				r.opts.Log.Warn("stale gateway statuses not marked", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
		case <-r.changed:
			select { // coalesce bursts
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// report writes the gateway's object if its report changed or the heartbeat is due.
func (r *StatusReporter) report(ctx context.Context) error {
	st := r.opts.Snapshot()
	st.HeartbeatSeconds = int32(r.opts.Heartbeat / time.Second)
	st.AnnouncedCount, st.WithdrawnCount = int32(len(st.Announced)), int32(len(st.Withdrawn))
	now := r.opts.Now()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: ReasonGatewayReporting,
		Message: "the gateway reports in time and its datapath is healthy"}
	switch {
	case !st.Datapath.Healthy:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonGatewayDatapath, st.Datapath.Message
	case st.LastReconcile != nil && st.LastReconcile.Error != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonGatewayReconcile, st.LastReconcile.Error
	}
	if r.last != nil {
		st.Conditions = append(st.Conditions, r.last.Conditions...)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	cmp := st.DeepCopy()
	cmp.LastReconcile = nil // its time moves at every reconcile: not a change worth a write
	if r.last != nil && reflect.DeepEqual(*cmp, *r.last) && now.Sub(r.lastBeat) < r.opts.Heartbeat*9/10 {
		return nil
	}
	st.Heartbeat = &metav1.Time{Time: now}
	if err := r.write(ctx, st); err != nil {
		return err
	}
	r.last, r.lastBeat = cmp, now
	return nil
}

// write stores st as the status of the gateway's object, creating the object if needed.
func (r *StatusReporter) write(ctx context.Context, st v1alpha1.GatewayStatusStatus) error {
	res := r.opts.Client.Resource(gatewayResource())
	obj, err := res.Get(ctx, r.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj = &unstructured.Unstructured{}
		obj.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
		obj.SetKind("GatewayStatus")
		obj.SetName(r.opts.Name)
		obj, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: "xlb"})
	}
	if err != nil {
		return fmt.Errorf("gatewaystatus %s: %w", r.opts.Name, err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return fmt.Errorf("gatewaystatus %s: %w", r.opts.Name, err)
	}
	obj.Object["status"] = m
	if _, err := res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "xlb"}); err != nil {
		return fmt.Errorf("gatewaystatus %s: status: %w", r.opts.Name, err)
	}
	return nil
}

// markStale marks Ready False (reason Stale) on every other gateway's object whose heartbeat is
// older than StaleAfter of its heartbeat intervals.
func (r *StatusReporter) markStale(ctx context.Context) error {
	res := r.opts.Client.Resource(gatewayResource())
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("gatewaystatuses: %w", err)
	}
	now := r.opts.Now()
	for i := range list.Items {
		u := &list.Items[i]
		if u.GetName() == r.opts.Name {
			continue
		}
		var g v1alpha1.GatewayStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
			continue
		}
		st := g.Status
		beat := time.Duration(st.HeartbeatSeconds) * time.Second
		if beat <= 0 {
			beat = DefaultHeartbeat
		}
		var last time.Time
		if st.Heartbeat != nil {
			last = st.Heartbeat.Time
		} else {
			last = g.CreationTimestamp.Time
		}
		if now.Sub(last) < StaleAfter*beat {
			continue
		}
		if c := meta.FindStatusCondition(st.Conditions, "Ready"); c != nil && c.Reason == ReasonGatewayStale {
			continue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
			Reason: ReasonGatewayStale, Message: fmt.Sprintf("no heartbeat since %s (marked by %s): the gateway is down or cannot reach the apiserver; its announcements below are its last known ones",
				last.UTC().Format(time.RFC3339), r.opts.Name)})
		st.Leader = false
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			continue
		}
		u.Object["status"] = m
		if _, err := res.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "xlb"}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("gatewaystatus %s: mark stale: %w", g.Name, err)
		}
		r.opts.Log.Warn("gateway marked stale", "gateway", g.Name, "lastHeartbeat", last)
	}
	return nil
}
