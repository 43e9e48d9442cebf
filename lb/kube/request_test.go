// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOurs(t *testing.T) {
	lbSvc := func(class *string) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: class}}
	}
	tests := []struct {
		name         string
		svc          *corev1.Service
		defaultClass bool
		want         bool
	}{
		{"nil", nil, true, false},
		{"our class", lbSvc(ptr("xlb.dev/xdp")), false, true},
		{"other class", lbSvc(ptr("metallb.io/metallb")), true, false},
		{"empty class is not nil", lbSvc(ptr("")), true, false},
		{"no class, not default", lbSvc(nil), false, false},
		{"no class, default", lbSvc(nil), true, true},
		{"ClusterIP with our class", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, LoadBalancerClass: ptr("xlb.dev/xdp")}}, true, false},
		{"NodePort, no class, default", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ours(tt.svc, "xlb.dev/xdp", tt.defaultClass); got != tt.want {
				t.Errorf("Ours = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIPRequest(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	single, prefer, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	tests := []struct {
		name         string
		families     []corev1.IPFamily
		policy       *corev1.IPFamilyPolicy
		annotations  map[string]string
		legacyIP     string
		wantFamilies []corev1.IPFamily
		wantAll      bool
		wantAddrs    []netip.Addr
		wantPool     string
		wantKey      string
		wantProblems []string
		wantErr      string // substring; "" means no error
	}{{
		name:         "no families: IPv4",
		wantFamilies: []corev1.IPFamily{v4},
	}, {
		name:         "no families, RequireDualStack: both",
		policy:       &require,
		wantFamilies: []corev1.IPFamily{v4, v6},
		wantAll:      true,
	}, {
		name:         "SingleStack takes the first",
		families:     []corev1.IPFamily{v6, v4},
		policy:       &single,
		wantFamilies: []corev1.IPFamily{v6},
	}, {
		name:         "PreferDualStack takes the listed ones",
		families:     []corev1.IPFamily{v6, v4},
		policy:       &prefer,
		wantFamilies: []corev1.IPFamily{v6, v4},
	}, {
		name:         "PreferDualStack with one family listed",
		families:     []corev1.IPFamily{v4},
		policy:       &prefer,
		wantFamilies: []corev1.IPFamily{v4},
	}, {
		name:         "RequireDualStack adds the missing family",
		families:     []corev1.IPFamily{v6},
		policy:       &require,
		wantFamilies: []corev1.IPFamily{v6, v4},
		wantAll:      true,
	}, {
		name:         "bad family and policy",
		families:     []corev1.IPFamily{"IPv5", v4, v4},
		policy:       ptr(corev1.IPFamilyPolicy("Whatever")),
		wantFamilies: []corev1.IPFamily{v4},
		wantProblems: []string{"InvalidIPFamily", "InvalidIPFamilyPolicy"},
	}, {
		name:         "dual-stack address annotation, pool and key",
		families:     []corev1.IPFamily{v4, v6},
		policy:       &require,
		annotations:  map[string]string{AnnotationLoadBalancerIPs: " 198.18.0.10, 2001:db8::10 ", AnnotationAddressPool: " edge ", AnnotationAllowSharedIP: "team-a"},
		wantFamilies: []corev1.IPFamily{v4, v6},
		wantAll:      true,
		wantAddrs:    addrs("198.18.0.10", "2001:db8::10"),
		wantPool:     "edge",
		wantKey:      "team-a",
	}, {
		name:         "MetalLB's annotations are aliases",
		families:     []corev1.IPFamily{v4, v6},
		policy:       &require,
		annotations:  map[string]string{MetalLBLoadBalancerIPs: "198.18.0.10,2001:db8::10", MetalLBAddressPool: "edge", MetalLBAllowSharedIP: "team-a"},
		wantFamilies: []corev1.IPFamily{v4, v6},
		wantAll:      true,
		wantAddrs:    addrs("198.18.0.10", "2001:db8::10"),
		wantPool:     "edge",
		wantKey:      "team-a",
	}, {
		name:         "MetalLB's older prefix",
		annotations:  map[string]string{"metallb.universe.tf/loadBalancerIPs": "198.18.0.10", "metallb.universe.tf/address-pool": "edge", "metallb.universe.tf/allow-shared-ip": "k"},
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.10"),
		wantPool:     "edge",
		wantKey:      "k",
	}, {
		name:         "xlb's annotation wins over a differing alias",
		annotations:  map[string]string{AnnotationAddressPool: "edge", MetalLBAddressPool: "other", AnnotationLoadBalancerIPs: "198.18.0.10", MetalLBLoadBalancerIPs: "198.18.0.10"},
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.10"),
		wantPool:     "edge",
		wantProblems: []string{"ConflictingAnnotations"},
	}, {
		name:         "a bad alias value names the alias",
		annotations:  map[string]string{MetalLBLoadBalancerIPs: "not-an-ip"},
		wantFamilies: []corev1.IPFamily{v4},
		wantProblems: []string{"InvalidLoadBalancerIP"},
		wantErr:      "annotation metallb.io/loadBalancerIPs",
	}, {
		name:         "deprecated loadBalancerIP",
		legacyIP:     "198.18.0.11",
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.11"),
		wantProblems: []string{"DeprecatedLoadBalancerIP"},
	}, {
		name:         "the annotation wins over a different loadBalancerIP",
		legacyIP:     "198.18.0.11",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "198.18.0.12"},
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.12"),
		wantProblems: []string{"DeprecatedLoadBalancerIP", "ConflictingLoadBalancerIP"},
	}, {
		name:         "IPv4-mapped address unmapped",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "::ffff:198.18.0.12"},
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.12"),
	}, {
		name:         "unparseable address: error, the valid one kept",
		families:     []corev1.IPFamily{v4, v6},
		policy:       &prefer,
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "198.18.0.10,bogus"},
		wantFamilies: []corev1.IPFamily{v4, v6},
		wantAddrs:    addrs("198.18.0.10"),
		wantProblems: []string{"InvalidLoadBalancerIP"},
		wantErr:      `"bogus" is not a usable IP address`,
	}, {
		name:         "non-unicast addresses",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "0.0.0.0, 224.0.0.1, 127.0.0.1, fe80::1%eth0"},
		wantFamilies: []corev1.IPFamily{v4},
		wantProblems: []string{"InvalidLoadBalancerIP", "InvalidLoadBalancerIP", "InvalidLoadBalancerIP", "InvalidLoadBalancerIP"},
		wantErr:      "not a usable IP address",
	}, {
		name:         "address of a family the Service lacks",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "2001:db8::10"},
		wantFamilies: []corev1.IPFamily{v4},
		wantProblems: []string{"InvalidLoadBalancerIP"},
		wantErr:      "2001:db8::10 is IPv6, but the Service's families are [IPv4]",
	}, {
		name:         "two addresses of one family",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: "198.18.0.10,198.18.0.11"},
		wantFamilies: []corev1.IPFamily{v4},
		wantAddrs:    addrs("198.18.0.10"),
		wantProblems: []string{"InvalidLoadBalancerIP"},
		wantErr:      "more than one IPv4 address",
	}, {
		name:         "bad pool and key",
		annotations:  map[string]string{AnnotationAddressPool: "  ", AnnotationAllowSharedIP: "a b"},
		wantFamilies: []corev1.IPFamily{v4},
		wantKey:      "a b",
		wantProblems: []string{"InvalidAddressPool", "InvalidSharingKey"},
		wantErr:      "annotation xlb.dev/address-pool",
	}, {
		name:         "empty address annotation asks for nothing",
		annotations:  map[string]string{AnnotationLoadBalancerIPs: " , "},
		wantFamilies: []corev1.IPFamily{v4},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"app": "web"}, Annotations: tt.annotations},
				Spec: corev1.ServiceSpec{
					Type:           corev1.ServiceTypeLoadBalancer,
					IPFamilies:     tt.families,
					IPFamilyPolicy: tt.policy,
					LoadBalancerIP: tt.legacyIP,
					Ports: []corev1.ServicePort{
						{Name: "http", Port: 80},
						{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
						{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP},
						{Name: "bad", Port: 0},
					},
				},
			}
			req, problems := IPRequest(svc)
			if req.Service != "ns/web" || req.Namespace != "ns" || !reflect.DeepEqual(req.Labels, svc.Labels) {
				t.Errorf("owner %q %q %v", req.Service, req.Namespace, req.Labels)
			}
			if !slices.Equal(req.Families, tt.wantFamilies) || req.RequireAll != tt.wantAll {
				t.Errorf("families %v all=%v, want %v all=%v", req.Families, req.RequireAll, tt.wantFamilies, tt.wantAll)
			}
			if !slices.Equal(req.Addresses, tt.wantAddrs) {
				t.Errorf("addresses %v, want %v", req.Addresses, tt.wantAddrs)
			}
			if req.Pool != tt.wantPool || req.SharingKey != tt.wantKey {
				t.Errorf("pool %q key %q, want %q %q", req.Pool, req.SharingKey, tt.wantPool, tt.wantKey)
			}
			wantPorts := []RequestPort{{datapath.TCP, 80}, {datapath.UDP, 53}}
			if !slices.Equal(req.Ports, wantPorts) {
				t.Errorf("ports %v, want %v", req.Ports, wantPorts)
			}
			if !slices.Equal(reasons(problems), tt.wantProblems) {
				t.Errorf("problems %v, want %v", problems, tt.wantProblems)
			}
			switch {
			case tt.wantErr == "" && req.Err != nil:
				t.Errorf("Err %v, want none", req.Err)
			case tt.wantErr != "" && (req.Err == nil || !strings.Contains(req.Err.Error(), tt.wantErr)):
				t.Errorf("Err %v, want one containing %q", req.Err, tt.wantErr)
			}
			if req.Err != nil && !strings.HasPrefix(req.Err.Error(), "service ns/web: ") {
				t.Errorf("Err %q does not name the Service", req.Err)
			}
			req.Labels["app"] = "changed"
			if svc.Labels["app"] != "web" {
				t.Errorf("the request shares the Service's labels")
			}
		})
	}
	if req, problems := IPRequest(nil); req.Err == nil || len(problems) != 1 {
		t.Errorf("IPRequest(nil) = %+v, %v: want an error and a problem", req, problems)
	}
}
