package kubetest_test

import (
	"context"
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
