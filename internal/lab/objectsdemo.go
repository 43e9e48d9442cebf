// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// objectsWait bounds how long the demo waits for the gateways' status objects to agree with
// the Services (a gateway writes its object within a second of a reconcile).
const objectsWait = 20 * time.Second

// XLBObjects reads the AddressPools and GatewayStatuses as the administrator, sorted by name.
func (k *Kube) XLBObjects(ctx context.Context) ([]v1alpha1.AddressPool, []v1alpha1.GatewayStatus, error) {
	dyn, err := dynamic.NewForConfig(k.CP.Admin())
	if err != nil {
		return nil, nil, fmt.Errorf("lab: dynamic client: %w", err)
	}
	var pools []v1alpha1.AddressPool
	var gws []v1alpha1.GatewayStatus
	for _, x := range []struct {
		res string
		add func(map[string]any) error
	}{
		{v1alpha1.ResourceAddressPools, func(o map[string]any) error {
			var p v1alpha1.AddressPool
			err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &p)
			pools = append(pools, p)
			return err
		}},
		{v1alpha1.ResourceGatewayStatuses, func(o map[string]any) error {
			var g v1alpha1.GatewayStatus
			err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &g)
			gws = append(gws, g)
			return err
		}},
	} {
		list, err := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource(x.res)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("lab: list %s: %w", x.res, err)
		}
		for _, o := range list.Items {
			if err := x.add(o.Object); err != nil {
				return nil, nil, fmt.Errorf("lab: %s %s: %w", x.res, o.GetName(), err)
			}
		}
	}
	slices.SortFunc(pools, func(a, b v1alpha1.AddressPool) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(gws, func(a, b v1alpha1.GatewayStatus) int { return strings.Compare(a.Name, b.Name) })
	return pools, gws, nil
}

// demoObjects shows xlb's own objects as kubectl get shows them, and checks that they tell
// the truth: the lab pool is in use with one used address per VIP of the Services, and every
// gateway reports, Ready, and (with BGP) announces every VIP over its established sessions.
func (s *Site) demoObjects(ctx context.Context, w io.Writer, fail func(string, ...any), vips []netip.Addr) {
	want := map[string]bool{}
	for _, a := range vips {
		want[a.String()] = true
	}
	var pools []v1alpha1.AddressPool
	var gws []v1alpha1.GatewayStatus
	var problem string
	deadline := time.Now().Add(objectsWait)
	for {
		var err error
		pools, gws, err = s.Kube.XLBObjects(ctx)
		if err != nil {
			fail("%v", err)
			return
		}
		problem = objectsProblem(pools, gws, want, len(s.Gateways), s.Opts.Routing.BGP())
		if problem == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(w, "\n== Address pools (as kubectl get addresspools) ==\n")
	WriteAddressPools(w, pools)
	fmt.Fprintf(w, "\n== What each gateway does (as kubectl get gatewaystatuses -o wide) ==\n")
	WriteGatewayStatuses(w, gws, time.Now())
	if problem != "" {
		fail("xlb's objects after %v: %s", objectsWait, problem)
	}
}

// objectsProblem says what is wrong with the objects, or "".
func objectsProblem(pools []v1alpha1.AddressPool, gws []v1alpha1.GatewayStatus, vips map[string]bool, gateways int, bgp bool) string {
	i := slices.IndexFunc(pools, func(p v1alpha1.AddressPool) bool { return p.Name == PoolName })
	if i < 0 {
		return fmt.Sprintf("no AddressPool %q", PoolName)
	}
	if c := meta.FindStatusCondition(pools[i].Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Sprintf("AddressPool %q is not Ready: %+v", PoolName, c)
	}
	if pools[i].Status.Used != int64(len(vips)) {
		return fmt.Sprintf("AddressPool %q: %d used, want %d (the Services' addresses)", PoolName, pools[i].Status.Used, len(vips))
	}
	if len(gws) != gateways {
		return fmt.Sprintf("%d GatewayStatus objects, want %d (one per gateway)", len(gws), gateways)
	}
	for _, g := range gws {
		if c := meta.FindStatusCondition(g.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("gateway %s is not Ready: %+v", g.Name, c)
		}
		if !bgp {
			continue // without BGP a gateway announces nothing
		}
		var got []string
		for _, v := range g.Status.Announced {
			got = append(got, v.Address)
		}
		for a := range vips {
			if !slices.Contains(got, a) {
				return fmt.Sprintf("gateway %s does not report announcing %s (it reports %v)", g.Name, a, got)
			}
		}
		up, n := 0, 0
		fmt.Sscanf(g.Status.SessionsUp, "%d/%d", &up, &n)
		if n == 0 || up != n {
			return fmt.Sprintf("gateway %s: BGP sessions %q", g.Name, g.Status.SessionsUp)
		}
	}
	return ""
}

// WriteAddressPools writes pools as `kubectl get addresspools` does (the CRD's printer
// columns).
func WriteAddressPools(w io.Writer, pools []v1alpha1.AddressPool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tADDRESSES\tAUTO\tUSED\tFREE\tREADY\n")
	for _, p := range pools {
		ready := "<unknown>"
		if c := meta.FindStatusCondition(p.Status.Conditions, "Ready"); c != nil {
			ready = string(c.Status)
		}
		auto := p.Spec.AutoAssign == nil || *p.Spec.AutoAssign
		fmt.Fprintf(tw, "  %s\t[%s]\t%v\t%d\t%s\t%s\n", p.Name, strings.Join(p.Spec.Addresses, " "), auto, p.Status.Used, p.Status.Free, ready)
	}
	tw.Flush()
}

// WriteGatewayStatuses writes gateways' objects as `kubectl get gatewaystatuses -o wide` does
// (the CRD's printer columns; the heartbeat as an age at now).
func WriteGatewayStatuses(w io.Writer, gws []v1alpha1.GatewayStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tREADY\tREASON\tLEADER\tDATAPATH\tSESSIONS\tANNOUNCED\tWITHDRAWN\tHEARTBEAT\tVIPS\n")
	for _, g := range gws {
		ready, reason := "<unknown>", ""
		if c := meta.FindStatusCondition(g.Status.Conditions, "Ready"); c != nil {
			ready, reason = string(c.Status), c.Reason
		}
		beat := "<none>"
		if g.Status.Heartbeat != nil {
			beat = now.Sub(g.Status.Heartbeat.Time).Round(time.Second).String()
		}
		var vips []string
		for _, v := range g.Status.Announced {
			vips = append(vips, v.Address)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%s\t%s\t%d\t%d\t%s\t%s\n", g.Name, ready, reason, g.Status.Leader, g.Status.Datapath.Kind,
			g.Status.SessionsUp, g.Status.AnnouncedCount, g.Status.WithdrawnCount, beat, strings.Join(vips, ","))
	}
	tw.Flush()
}
