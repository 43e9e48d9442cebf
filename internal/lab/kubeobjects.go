// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The Kubernetes objects the lab makes in Kubernetes mode, as the kubelet (Nodes) and the
// EndpointSlice controller (EndpointSlices) would. Pure functions of the lab's plan and pod
// state, so that deploy/examples can be checked against them (TestExamples).

const (
	// KubeNamespace is the namespace of the example Services and of the lab's EndpointSlices.
	KubeNamespace = "default"
	// LabelApp is the pod label the example Services select; the lab's pods carry
	// LabelApp: DefaultApp unless made with other labels (AddPodLabeled).
	LabelApp   = "app"
	DefaultApp = "demo"
	// SliceManager is the endpointslice.kubernetes.io/managed-by label of the lab's slices.
	SliceManager = "lab.xlb.dev"
)

// PodState is a pod's endpoint conditions, as the EndpointSlice controller reports them.
type PodState int

const (
	// PodReady: ready, serving, not terminating (the zero value).
	PodReady PodState = iota
	// PodTerminating: being deleted, still serving (ready false, serving true, terminating
	// true): no new flows, established ones finish.
	PodTerminating
	// PodNotReady: failing its readiness probe (ready and serving false).
	PodNotReady
	// PodDeleted: gone from the slices.
	PodDeleted
)

// podTargetPorts are the named container ports of the lab's pods, for Services whose
// targetPort is a name.
var podTargetPorts = map[string]int32{"http": TargetHTTP, "who": TargetHTTP, "echo": TargetEcho, "echo-udp": TargetEcho}

// NodeObject returns the Node the lab registers for n, as a kubelet would: InternalIP addresses
// (IPv4 first), the Pod CIDRs, condition Ready.
func NodeObject(n *Node) *corev1.Node {
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux",
		}},
		Spec: corev1.NodeSpec{
			PodCIDR:  n.PodCIDR4.String(),
			PodCIDRs: []string{n.PodCIDR4.String(), n.PodCIDR6.String()},
		},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.Addr4.String()},
				{Type: corev1.NodeInternalIP, Address: n.Addr6.String()},
				{Type: corev1.NodeHostName, Address: n.Name},
			},
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "the lab's node namespace is up",
			}},
			Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		},
	}
}

// serviceFamilies returns the Service's IP families: spec.ipFamilies (which the apiserver
// fills in), else what its ipFamilyPolicy implies.
func serviceFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies
	}
	if p := svc.Spec.IPFamilyPolicy; p != nil && *p != corev1.IPFamilyPolicySingleStack {
		return []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	return []corev1.IPFamily{corev1.IPv4Protocol}
}

// selects reports whether svc's selector matches labels (a Service without a selector selects
// nothing: its slices are someone else's).
func selects(svc *corev1.Service, labels map[string]string) bool {
	if len(svc.Spec.Selector) == 0 {
		return false
	}
	for k, v := range svc.Spec.Selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// SliceName is the name of the lab's EndpointSlice of svc for family.
func SliceName(svc string, family corev1.IPFamily) string {
	if family == corev1.IPv6Protocol {
		return svc + "-lab-ipv6"
	}
	return svc + "-lab-ipv4"
}

// EndpointSlices returns the slices the EndpointSlice controller would keep for svc over pods
// (in the given order; PodDeleted ones and those the selector does not match left out): one per
// IP family of the Service, each with every matching pod's address of that family, its
// node, its conditions, and the Service's ports resolved to the pods' port numbers.
func EndpointSlices(svc *corev1.Service, pods []*Pod) []*discoveryv1.EndpointSlice {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	var ports []discoveryv1.EndpointPort
	for _, sp := range svc.Spec.Ports {
		num := sp.TargetPort.IntVal
		switch {
		case sp.TargetPort.Type == intstr.String:
			n, ok := podTargetPorts[sp.TargetPort.StrVal]
			if !ok {
				continue // the pods have no such port: the real controller leaves it out too
			}
			num = n
		case num == 0:
			num = sp.Port
		}
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr(sp.Name), Protocol: ptr(proto), Port: ptr(num)})
	}
	var out []*discoveryv1.EndpointSlice
	for _, fam := range serviceFamilies(svc) {
		s := &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: SliceName(svc.Name, fam), Namespace: svc.Namespace, Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: SliceManager,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       slices.Clone(ports),
			Endpoints:   []discoveryv1.Endpoint{},
		}
		if fam == corev1.IPv6Protocol {
			s.AddressType = discoveryv1.AddressTypeIPv6
		}
		for _, p := range pods {
			st := p.State()
			if st == PodDeleted || !selects(svc, p.Labels) {
				continue
			}
			a := p.Addr4
			if fam == corev1.IPv6Protocol {
				a = p.Addr6
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{a.String()},
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(st == PodReady), Serving: ptr(st == PodReady || st == PodTerminating),
					Terminating: ptr(st == PodTerminating),
				},
				NodeName:  ptr(p.Node.Name),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: p.Name},
			})
		}
		out = append(out, s)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// planSite returns the nodes and pods of a site with the given numbers as New would make them
// (no namespaces): for the examples.
func planSite(nodes, pods int) ([]*Node, []*Pod) {
	var ns []*Node
	for n := 1; n <= nodes; n++ {
		a4, a6 := nodeClusterAddrs(n)
		c4, c6 := podCIDRs(n)
		ns = append(ns, &Node{Index: n, Name: "n" + strconv.Itoa(n), Addr4: a4, Addr6: a6, PodCIDR4: c4, PodCIDR6: c6})
	}
	var ps []*Pod
	for j := 1; j <= pods; j++ {
		node := ns[(j-1)%len(ns)]
		a4, a6 := podAddrs(node.Index, j)
		ps = append(ps, &Pod{Index: j, Name: "p" + strconv.Itoa(j), Node: node, Addr4: a4, Addr6: a6,
			Labels: map[string]string{LabelApp: DefaultApp}})
	}
	return ns, ps
}

// manifest renders objects as a multi-document YAML manifest after header (comment lines),
// leaving out unset fields (creationTimestamp: null, status: {}, nodeInfo's empty strings).
func manifest(header string, objs ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	for i, o := range objs {
		js, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var m any
		if err := json.Unmarshal(js, &m); err != nil {
			return nil, err
		}
		y, err := yaml.Marshal(prune(m))
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// prune drops null values, empty strings, zero numbers and empty maps (once pruned) from a
// decoded JSON value: the fields the objects leave unset (false stays: it says something).
func prune(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			x = prune(x)
			if m, ok := x.(map[string]any); x == nil || x == "" || x == float64(0) || (ok && len(m) == 0) {
				delete(v, k)
				continue
			}
			v[k] = x
		}
		return v
	case []any:
		for i := range v {
			v[i] = prune(v[i])
		}
		return v
	}
	return v
}

// viewAddr parses a status ingress IP.
func viewAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}
