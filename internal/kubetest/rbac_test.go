// SPDX-License-Identifier: Apache-2.0
package kubetest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/kubetest"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestRBAC applies deploy/rbac.yaml to a real apiserver and checks, request by request, that
// the controller's ServiceAccount can do exactly what the controller needs and is Forbidden
// the rest.
func TestRBAC(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	if err := kubetest.ApplyFile(ctx, cp.Admin(), "../../deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	if _, err := admin.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := admin.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To("xlb.dev/xdp"),
			Selector:          map[string]string{"app": "web"},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c := kubernetes.NewForConfigOrDie(cp.Controller())
	ns := kubetest.ControllerNamespace
	lease := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "xlb-controller"},
		Spec:       coordv1.LeaseSpec{HolderIdentity: ptr.To("gw-1"), LeaseDurationSeconds: ptr.To[int32](15)},
	}
	coreEvent := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "web.vip", Namespace: "shop"},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Service", Namespace: "shop", Name: "web", UID: svc.UID,
		},
		Reason: "VIPAllocated", Message: "198.18.0.10", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "xlb"}, Count: 1,
	}
	newEvent := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "web.vip2", Namespace: "shop"},
		EventTime:           metav1.NowMicro(),
		ReportingController: "xlb.dev/xdp", ReportingInstance: "xlb-gw-1",
		Action: "Allocate", Reason: "VIPAllocated", Note: "198.18.0.10", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: "shop", Name: "web", UID: svc.UID},
	}
	mergePatch := func(s string) []byte { return []byte(s) }

	allowed := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list services in all namespaces", func(ctx context.Context) error {
			_, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"watch services", func(ctx context.Context) error {
			w, err := c.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"get a service", func(ctx context.Context) error {
			_, err := c.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
			return err
		}},
		{"patch a service's finalizers", func(ctx context.Context) error {
			_, err := c.CoreV1().Services("shop").Patch(ctx, "web", types.MergePatchType,
				mergePatch(`{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"update a service", func(ctx context.Context) error {
			s, err := c.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Finalizers = nil
			_, err = c.CoreV1().Services("shop").Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"patch a service's status", func(ctx context.Context) error {
			_, err := c.CoreV1().Services("shop").Patch(ctx, "web", types.MergePatchType,
				mergePatch(`{"status":{"loadBalancer":{"ingress":[{"ip":"198.18.0.10","ipMode":"Proxy"}]}}}`),
				metav1.PatchOptions{}, "status")
			return err
		}},
		{"update a service's status", func(ctx context.Context) error {
			s, err := c.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n := len(s.Status.LoadBalancer.Ingress); n != 1 {
				t.Errorf("service shop/web has %d ingress entries after the status patch, want 1", n)
			}
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "198.18.0.11"})
			_, err = c.CoreV1().Services("shop").UpdateStatus(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"list endpointslices", func(ctx context.Context) error {
			_, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
			return err
		}},
		{"watch endpointslices", func(ctx context.Context) error {
			w, err := c.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"list and watch nodes", func(ctx context.Context) error {
			if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"create and patch a core event", func(ctx context.Context) error {
			if _, err := c.CoreV1().Events("shop").Create(ctx, coreEvent, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := c.CoreV1().Events("shop").Patch(ctx, coreEvent.Name, types.MergePatchType,
				mergePatch(`{"count":2}`), metav1.PatchOptions{})
			return err
		}},
		{"create and patch an events.k8s.io event", func(ctx context.Context) error {
			if _, err := c.EventsV1().Events("shop").Create(ctx, newEvent, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := c.EventsV1().Events("shop").Patch(ctx, newEvent.Name, types.MergePatchType,
				mergePatch(`{"series":{"count":2,"lastObservedTime":"`+time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")+`"}}`),
				metav1.PatchOptions{})
			return err
		}},
		{"create, get and update a lease in xlb-system", func(ctx context.Context) error {
			if _, err := c.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
				return err
			}
			l, err := c.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.HolderIdentity = ptr.To("gw-2")
			_, err = c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, tc := range allowed {
		if err := tc.do(ctx); err != nil {
			t.Errorf("controller: %s: %v, want allowed", tc.name, err)
		}
	}

	forbidden := []struct {
		name string
		do   func(context.Context) error
	}{
		{"delete a service", func(ctx context.Context) error {
			return c.CoreV1().Services("shop").Delete(ctx, "web", metav1.DeleteOptions{})
		}},
		{"create a service", func(ctx context.Context) error {
			s := svc.DeepCopy()
			s.ObjectMeta = metav1.ObjectMeta{Name: "other"}
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
			_, err := c.CoreV1().Services("shop").Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"list secrets in all namespaces", func(ctx context.Context) error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list secrets in xlb-system", func(ctx context.Context) error {
			_, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods", func(ctx context.Context) error {
			_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a lease in another namespace", func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases("shop").Create(ctx, lease, metav1.CreateOptions{})
			return err
		}},
		{"list leases in all namespaces", func(ctx context.Context) error {
			_, err := c.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete its own lease", func(ctx context.Context) error {
			return c.CoordinationV1().Leases(ns).Delete(ctx, lease.Name, metav1.DeleteOptions{})
		}},
		{"patch a node", func(ctx context.Context) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType,
				mergePatch(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete an endpointslice", func(ctx context.Context) error {
			return c.DiscoveryV1().EndpointSlices("shop").Delete(ctx, "web-1", metav1.DeleteOptions{})
		}},
		{"delete an event", func(ctx context.Context) error {
			return c.CoreV1().Events("shop").Delete(ctx, coreEvent.Name, metav1.DeleteOptions{})
		}},
		{"change its own ClusterRole", func(ctx context.Context) error {
			return c.RbacV1().ClusterRoles().Delete(ctx, "xlb-controller", metav1.DeleteOptions{})
		}},
	}
	for _, tc := range forbidden {
		if err := tc.do(ctx); !apierrors.IsForbidden(err) {
			t.Errorf("controller: %s: %v, want Forbidden", tc.name, err)
		}
	}

	// RBAC is on at all: a user without bindings cannot even list services.
	spare := kubernetes.NewForConfigOrDie(cp.As("user-1"))
	if _, err := spare.CoreV1().Services("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("user-1: list services: %v, want Forbidden", err)
	}
}

// TestAgentRBAC applies deploy/agent.yaml (after deploy/rbac.yaml, which creates the
// namespace) to a real apiserver and checks, request by request, what the node agent's
// ServiceAccount may do: read Services and EndpointSlices, read its Node and set or remove the
// annotation xlb.dev/dsr on it, nothing else. What RBAC cannot say (which Node, which field)
// the ValidatingAdmissionPolicy of the manifest does: no other change to a Node, no other Node
// than the one its token names (authentication.kubernetes.io/node-name), and no Node at all
// with a token that names none.
func TestAgentRBAC(t *testing.T) {
	cp := kubetest.StartT(t)
	ctx := t.Context()
	for _, f := range []string{"../../deploy/rbac.yaml", "../../deploy/agent.yaml"} {
		if err := kubetest.ApplyFile(ctx, cp.Admin(), f); err != nil {
			t.Fatal(err)
		}
	}
	admin := kubernetes.NewForConfigOrDie(cp.Admin())
	for _, n := range []string{"n1", "n2"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{"other": "x"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa, groups := "system:serviceaccount:xlb-system:xlb-agent", []string{"system:serviceaccounts", "system:serviceaccounts:xlb-system"}
	agent := kubernetes.NewForConfigOrDie(cp.As(sa, groups...))
	// The agent of n1, as its bound token names it.
	bound := cp.As(sa, groups...)
	bound.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}
	onN1 := kubernetes.NewForConfigOrDie(bound)
	patch := func(c kubernetes.Interface, node, body string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	set := `{"metadata":{"annotations":{"xlb.dev/dsr":"v1"}}}`
	unset := `{"metadata":{"annotations":{"xlb.dev/dsr":null}}}`

	allowed := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list and watch services", func(ctx context.Context) error {
			if _, err := agent.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			w, err := agent.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"list and watch endpointslices", func(ctx context.Context) error {
			if _, err := agent.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			w, err := agent.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"list and watch servicecidrs", func(ctx context.Context) error {
			if _, err := agent.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			w, err := agent.NetworkingV1().ServiceCIDRs().Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"create an event on a service", func(ctx context.Context) error {
			_, err := agent.CoreV1().Events("default").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "kubernetes.xlb-test"},
				InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "default", Name: "kubernetes"},
				Reason:         "FrontendConflict", Message: "test", Type: corev1.EventTypeWarning,
			}, metav1.CreateOptions{})
			return err
		}},
		{"get its node", func(ctx context.Context) error {
			_, err := agent.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			return err
		}},
		{"set and remove xlb.dev/dsr on its node (token naming it)", func(ctx context.Context) error {
			if err := patch(onN1, "n1", set); err != nil {
				return err
			}
			return patch(onN1, "n1", unset)
		}},
	}
	for _, tc := range allowed {
		if err := tc.do(ctx); err != nil {
			t.Errorf("agent: %s: %v, want allowed", tc.name, err)
		}
	}
	forbidden := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list nodes", func(ctx context.Context) error {
			_, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"update a node", func(ctx context.Context) error {
			n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = agent.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}},
		{"patch a node's status", func(ctx context.Context) error {
			_, err := agent.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType,
				[]byte(`{"status":{"capacity":{"pods":"1"}}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"delete a node", func(ctx context.Context) error {
			return agent.CoreV1().Nodes().Delete(ctx, "n2", metav1.DeleteOptions{})
		}},
		{"patch a service", func(ctx context.Context) error {
			_, err := agent.CoreV1().Services("default").Patch(ctx, "kubernetes", types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"update an event", func(ctx context.Context) error {
			ev, err := admin.CoreV1().Events("default").Get(ctx, "kubernetes.xlb-test", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = agent.CoreV1().Events("default").Update(ctx, ev, metav1.UpdateOptions{})
			return err
		}},
		{"list secrets", func(ctx context.Context) error {
			_, err := agent.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}},
	}
	for _, tc := range forbidden {
		if err := tc.do(ctx); !apierrors.IsForbidden(err) {
			t.Errorf("agent: %s: %v, want Forbidden", tc.name, err)
		}
	}
	denied := []struct {
		name, body, node, why string
		c                     kubernetes.Interface
	}{
		{"a label", `{"metadata":{"labels":{"zone":"b"}}}`, "n1", "may change only the annotation xlb.dev/dsr", onN1},
		{"another annotation", `{"metadata":{"annotations":{"other":"y"}}}`, "n1", "may change only the annotation xlb.dev/dsr", onN1},
		{"a new annotation beside it", `{"metadata":{"annotations":{"xlb.dev/dsr":"v1","more":"z"}}}`, "n1", "may change only", onN1},
		{"a taint", `{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`, "n1", "may change only", onN1},
		{"another node's annotation", set, "n2", "the xlb agent of node n1 may not change Node n2", onN1},
		// RBAC cannot name the node, so a token that names none (a legacy Secret token, one not
		// bound to a Pod) could patch every Node's annotation: the policy denies it any change.
		{"xlb.dev/dsr with a token naming no node", set, "n2", "token names no node", agent},
		{"xlb.dev/dsr of the node it would claim, token naming no node", set, "n1", "token names no node", agent},
	}
	// The apiserver takes up a new policy a moment after it is written: wait until it denies.
	deadline := time.Now().Add(20 * time.Second)
	for patch(onN1, "n1", denied[0].body) == nil {
		if time.Now().After(deadline) {
			pol, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "xlb-agent-node-annotation", metav1.GetOptions{})
			t.Fatalf("after 20 s the admission policy denies nothing (policy status %+v, %v)", pol.Status, err)
		}
		if err := patch(admin, "n1", `{"metadata":{"labels":{"zone":"a"}}}`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range denied {
		err := patch(tc.c, tc.node, tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("agent: patch %s of %s: %v, want denied by the admission policy (%q)", tc.name, tc.node, err, tc.why)
		}
	}
	n1, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n1.Labels["zone"] != "a" || n1.Annotations["other"] != "x" || n1.Annotations["more"] != "" ||
		slices.ContainsFunc(n1.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "k" }) {
		t.Errorf("n1 changed: labels %v annotations %v taints %v", n1.Labels, n1.Annotations, n1.Spec.Taints)
	}
	// The policy concerns the agent only: the admin changes what it likes.
	if err := patch(admin, "n1", `{"metadata":{"labels":{"zone":"b"}}}`); err != nil {
		t.Errorf("admin: patch a label: %v", err)
	}
}
