// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// fakeNodes is a NodeView from three sets.
type fakeNodes struct {
	excluded  map[string]bool
	unhealthy map[string]bool
	dsr       map[string]bool
	asked     map[string]int // node → LocalHealthy calls
}

func (f *fakeNodes) Excluded(n string) bool { return f.excluded[n] }
func (f *fakeNodes) DSR(n string) bool      { return f.dsr[n] }
func (f *fakeNodes) LocalHealthy(n string, _ types.NamespacedName) bool {
	if f.asked != nil {
		f.asked[n]++
	}
	return !f.unhealthy[n]
}

func ptr[T any](v T) *T { return &v }

// testService returns a LoadBalancer Service ns/web with ports http 80/TCP and dns 53/UDP.
func testService(mod ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)},
			},
			AllocateLoadBalancerNodePorts: ptr(false),
		},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

// ep is an endpoint: address, node and conditions ("r" ready, "st" serving+terminating,
// "t" terminating only, "n" not ready, "" all nil).
func ep(addr, node, cond string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}}
	if node != "" {
		e.NodeName = ptr(node)
	}
	switch cond {
	case "r":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case "st":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	case "t":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	case "n":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	}
	return e
}

// slice returns an EndpointSlice of the family of its first endpoint with ports http=httpPort
// (omitted when 0) and dns 5353/UDP.
func slice(name string, httpPort int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		at = discoveryv1.AddressTypeIPv6
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name},
		AddressType: at,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(5353))}},
	}
	if httpPort != 0 {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(httpPort)})
	}
	return s
}

var (
	vip4 = netip.MustParseAddr("198.18.0.10")
	vip6 = netip.MustParseAddr("2001:db8::10")
)

// states returns "addr=state" for every backend.
func states(s lb.Service) []string {
	var out []string
	for _, b := range s.Backends {
		out = append(out, b.Addr.String()+"="+b.State.String())
	}
	return out
}

// reasons returns the reasons of problems.
func reasons(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Reason)
	}
	return out
}

func TestServiceModelStates(t *testing.T) {
	tests := []struct {
		name      string
		local     bool
		slices    []*discoveryv1.EndpointSlice
		excluded  []string
		unhealthy []string
		want      []string
	}{{
		name:   "ready active, terminating draining, not ready unhealthy",
		slices: []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "n1", "r"), ep("198.18.1.2", "n1", "st"), ep("198.18.1.3", "n1", "t"), ep("198.18.1.4", "n1", "n"), ep("198.18.1.5", "n1", ""))},
		want:   []string{"198.18.1.1=active", "198.18.1.2=draining", "198.18.1.3=draining", "198.18.1.4=unhealthy", "198.18.1.5=active"},
	}, {
		name:   "no ready endpoint: serving terminating ones take new flows (KEP-1669)",
		slices: []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.2", "n1", "st"), ep("198.18.1.3", "n1", "t"), ep("198.18.1.4", "n1", "n"))},
		want:   []string{"198.18.1.2=active", "198.18.1.3=draining", "198.18.1.4=unhealthy"},
	}, {
		name: "fallback is per family",
		slices: []*discoveryv1.EndpointSlice{
			slice("v4", 8080, ep("198.18.1.1", "n1", "r"), ep("198.18.1.2", "n1", "st")),
			slice("v6", 8080, ep("2001:db8::2", "n1", "st")),
		},
		want: []string{"198.18.1.1=active", "198.18.1.2=draining", "2001:db8::2=active"},
	}, {
		name:     "excluded node: ready endpoints drain, and the fallback skips them",
		slices:   []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "ex", "r"), ep("198.18.1.2", "n1", "st"), ep("198.18.1.3", "ex", "st"))},
		excluded: []string{"ex"},
		want:     []string{"198.18.1.1=draining", "198.18.1.2=active", "198.18.1.3=draining"},
	}, {
		name:      "cluster policy ignores node health",
		slices:    []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "sick", "r"), ep("198.18.1.2", "sick", "t"))},
		unhealthy: []string{"sick"},
		want:      []string{"198.18.1.1=active", "198.18.1.2=draining"},
	}, {
		name:      "local: endpoints on unhealthy nodes get no new flows, their established flows stay",
		local:     true,
		slices:    []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "sick", "r"), ep("198.18.1.2", "ok", "r"), ep("198.18.1.3", "sick", "st"), ep("198.18.1.4", "sick", "t"), ep("198.18.1.5", "", "r"))},
		unhealthy: []string{"sick"},
		want:      []string{"198.18.1.1=draining", "198.18.1.2=active", "198.18.1.3=draining", "198.18.1.4=draining", "198.18.1.5=active"},
	}, {
		name:      "local: the terminating fallback does not use an unhealthy node either",
		local:     true,
		slices:    []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "sick", "r"), ep("198.18.1.3", "sick", "st"))},
		unhealthy: []string{"sick"},
		want:      []string{"198.18.1.1=draining", "198.18.1.3=draining"},
	}, {
		name: "duplicates across slices: the most ready copy wins, whatever the order",
		slices: []*discoveryv1.EndpointSlice{
			slice("a", 8080, ep("198.18.1.1", "n1", "n"), ep("198.18.1.2", "n1", "r")),
			slice("b", 8080, ep("198.18.1.1", "n2", "r"), ep("198.18.1.2", "n2", "t")),
		},
		want: []string{"198.18.1.1=active", "198.18.1.2=active"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := &fakeNodes{excluded: map[string]bool{}, unhealthy: map[string]bool{}}
			for _, n := range tt.excluded {
				nodes.excluded[n] = true
			}
			for _, n := range tt.unhealthy {
				nodes.unhealthy[n] = true
			}
			svc := testService(func(s *corev1.Service) {
				if tt.local {
					s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
			})
			for _, order := range [][]*discoveryv1.EndpointSlice{tt.slices, reversed(tt.slices)} {
				got, problems := ServiceModel(Input{Service: svc, Slices: order, VIPs: []netip.Addr{vip4, vip6}}, nodes)
				if !slices.Equal(states(got), tt.want) {
					t.Errorf("states %v, want %v", states(got), tt.want)
				}
				if len(problems) != 0 {
					t.Errorf("problems %v, want none", problems)
				}
				if err := got.Validate(); err != nil {
					t.Errorf("model does not validate: %v", err)
				}
				wantPolicy := lb.TrafficCluster
				if tt.local {
					wantPolicy = lb.TrafficLocal
				}
				if got.TrafficPolicy != wantPolicy {
					t.Errorf("TrafficPolicy %v, want %v", got.TrafficPolicy, wantPolicy)
				}
			}
		})
	}
}

func reversed[T any](s []T) []T {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

func TestServiceModelFields(t *testing.T) {
	route := lb.RouteAttributes{Communities: []uint32{65000<<16 | 1}}
	svc := testService(func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	in := Input{
		Service: svc,
		Slices:  []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "n1", "r"))},
		VIPs:    []netip.Addr{vip4},
		Route:   route,
	}
	got, problems := ServiceModel(in, nil)
	want := lb.Service{
		Name: "ns/web",
		VIPs: []netip.Addr{vip4},
		Ports: []lb.Port{
			{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080},
			{Name: "dns", Port: 53, Protocol: datapath.UDP, TargetPort: 5353},
		},
		Backends:        []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.1"), Weight: 1, State: lb.Active, Node: "n1"}},
		Affinity:        datapath.AffinityClientIP,
		AffinityTimeout: DefaultAffinityTimeout,
		Route:           route,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("model\n got %+v\nwant %+v", got, want)
	}
	if len(problems) != 0 {
		t.Errorf("problems %v, want none", problems)
	}
	in.VIPs[0] = vip6
	if got.VIPs[0] != vip4 {
		t.Errorf("the model shares Input.VIPs' array")
	}
}

func TestServiceModelPorts(t *testing.T) {
	tests := []struct {
		name         string
		ports        []corev1.ServicePort
		slices       []*discoveryv1.EndpointSlice
		wantPorts    []lb.Port
		wantBackends map[string]map[string]uint16 // addr → TargetPorts
		wantProblems []string
	}{{
		name:         "SCTP, bad and duplicate ports are skipped",
		ports:        []corev1.ServicePort{{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP}, {Name: "http", Port: 80}, {Name: "x", Port: 0}, {Name: "y", Port: 70000}, {Name: "http2", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "http", Port: 81}},
		slices:       []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "", "r"))},
		wantPorts:    []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		wantBackends: map[string]map[string]uint16{"198.18.1.1": nil},
		wantProblems: []string{"UnsupportedProtocol", "InvalidPort", "InvalidPort", "DuplicatePort", "DuplicatePort"},
	}, {
		name:         "only SCTP: no usable ports",
		ports:        []corev1.ServicePort{{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP}},
		slices:       []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "", "r"))},
		wantProblems: []string{"UnsupportedProtocol", "NoUsablePorts"},
	}, {
		name:  "named target port resolving differently per slice: the most common is the port's, others per backend",
		ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		slices: []*discoveryv1.EndpointSlice{
			slice("old", 8080, ep("198.18.1.1", "", "r"), ep("198.18.1.2", "", "r")),
			slice("new", 9090, ep("198.18.1.3", "", "r")),
		},
		wantPorts:    []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		wantBackends: map[string]map[string]uint16{"198.18.1.1": nil, "198.18.1.2": nil, "198.18.1.3": {"http": 9090}},
	}, {
		name:  "a slice lacking a port: its endpoints are left out",
		ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
		slices: []*discoveryv1.EndpointSlice{
			slice("good", 8080, ep("198.18.1.1", "", "r")),
			slice("lacking", 0, ep("198.18.1.2", "", "r"), ep("198.18.1.3", "", "r")),
		},
		wantPorts:    []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}, {Name: "dns", Port: 53, Protocol: datapath.UDP, TargetPort: 5353}},
		wantBackends: map[string]map[string]uint16{"198.18.1.1": nil},
		wantProblems: []string{"EndpointPortMissing"},
	}, {
		name:  "ports match by name and protocol",
		ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolTCP}},
		slices: []*discoveryv1.EndpointSlice{
			slice("a", 8080, ep("198.18.1.1", "", "r")), // has dns only as UDP
		},
		wantPorts:    []lb.Port{{Name: "dns", Port: 53, Protocol: datapath.TCP}},
		wantProblems: []string{"EndpointPortMissing"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(func(s *corev1.Service) { s.Spec.Ports = tt.ports })
			got, problems := ServiceModel(Input{Service: svc, Slices: tt.slices, VIPs: []netip.Addr{vip4}}, nil)
			if !reflect.DeepEqual(got.Ports, tt.wantPorts) {
				t.Errorf("ports %+v, want %+v", got.Ports, tt.wantPorts)
			}
			gotBE := map[string]map[string]uint16{}
			for _, b := range got.Backends {
				gotBE[b.Addr.String()] = b.TargetPorts
			}
			if len(gotBE) == 0 {
				gotBE = nil
			}
			if !reflect.DeepEqual(gotBE, tt.wantBackends) {
				t.Errorf("backends %v, want %v", gotBE, tt.wantBackends)
			}
			if !slices.Equal(reasons(problems), tt.wantProblems) {
				t.Errorf("problems %v, want %v", problems, tt.wantProblems)
			}
			for _, p := range problems {
				if p.Type != corev1.EventTypeWarning || p.Message == "" {
					t.Errorf("problem %+v: want a Warning with a message", p)
				}
			}
			if len(got.Ports) > 0 {
				if err := got.Validate(); err != nil {
					t.Errorf("model does not validate: %v", err)
				}
			}
		})
	}
}

func TestServiceModelSourceRanges(t *testing.T) {
	deny4, deny6 := netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::/128")
	tests := []struct {
		name         string
		field        []string
		annotation   *string
		vips         []netip.Addr
		want         []netip.Prefix
		wantProblems []string
	}{{
		name: "none: every client",
		vips: []netip.Addr{vip4, vip6},
	}, {
		name:  "blank entries only: every client",
		field: []string{" ", ""},
		vips:  []netip.Addr{vip4},
	}, {
		name:  "valid ones, trimmed and masked; the other family closed",
		field: []string{" 203.0.113.7/24", "198.51.100.0/24 ", "203.0.113.0/24"},
		vips:  []netip.Addr{vip4},
		want:  []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24"), deny6},
	}, {
		name:         "an invalid one is skipped, the others kept",
		field:        []string{"203.0.113.0/24", "bogus", "2001:db8:1::/48"},
		vips:         []netip.Addr{vip4, vip6},
		want:         []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:1::/48")},
		wantProblems: []string{"InvalidSourceRange"},
	}, {
		name:         "all invalid: fail closed",
		field:        []string{"bogus", "10.0.0.0/33"},
		vips:         []netip.Addr{vip4, vip6},
		want:         []netip.Prefix{deny4, deny6},
		wantProblems: []string{"InvalidSourceRange", "InvalidSourceRange", "NoValidSourceRange"},
	}, {
		name:         "IPv4 ranges only on a dual-stack Service: IPv6 closed and reported",
		field:        []string{"203.0.113.0/24"},
		vips:         []netip.Addr{vip4, vip6},
		want:         []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), deny6},
		wantProblems: []string{"SourceRangesCloseFamily"},
	}, {
		name:  "IPv4-mapped written in IPv4 form",
		field: []string{"::ffff:203.0.113.0/120"},
		vips:  []netip.Addr{vip4},
		want:  []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), deny6},
	}, {
		name:       "the annotation when the field is empty",
		annotation: ptr("203.0.113.0/24, 0.0.0.0/0"),
		vips:       []netip.Addr{vip4},
		want:       []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("0.0.0.0/0"), deny6},
	}, {
		name:       "the field wins over the annotation",
		field:      []string{"198.51.100.0/24"},
		annotation: ptr("203.0.113.0/24"),
		vips:       []netip.Addr{vip4},
		want:       []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), deny6},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = tt.field
				if tt.annotation != nil {
					s.Annotations = map[string]string{AnnotationSourceRanges: *tt.annotation}
				}
			})
			got, problems := ServiceModel(Input{Service: svc, VIPs: tt.vips}, nil)
			if !slices.Equal(got.SourceRanges, tt.want) {
				t.Errorf("SourceRanges %v, want %v", got.SourceRanges, tt.want)
			}
			if !slices.Equal(reasons(problems), tt.wantProblems) {
				t.Errorf("problems %v, want %v", problems, tt.wantProblems)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("model does not validate: %v", err)
			}
			// Whatever was given, a VIP is open to everyone only when nothing was given.
			d, errs := lb.Plan([]lb.Service{got}, lb.PlanOptions{TableSize: 7})
			if len(errs) != 0 {
				t.Fatalf("plan: %v", errs)
			}
			for f, p := range d.Frontends {
				if (len(p.SourceRanges) == 0) != (len(tt.want) == 0) {
					t.Errorf("frontend %v: source ranges %v", f, p.SourceRanges)
				}
			}
		})
	}
}

func TestServiceModelAffinityAndAdvice(t *testing.T) {
	tests := []struct {
		name         string
		mod          func(*corev1.Service)
		wantAffinity datapath.Affinity
		wantTimeout  time.Duration
		wantProblems []string
		wantTypes    []string
	}{{
		name: "none",
		mod:  func(*corev1.Service) {},
	}, {
		name: "ClientIP with a timeout",
		mod: func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		},
		wantAffinity: datapath.AffinityClientIP,
		wantTimeout:  time.Minute,
	}, {
		name: "ClientIP with a bad timeout: default",
		mod: func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(-5))}}
		},
		wantAffinity: datapath.AffinityClientIP,
		wantTimeout:  DefaultAffinityTimeout,
		wantProblems: []string{"InvalidSessionAffinity"},
		wantTypes:    []string{corev1.EventTypeWarning},
	}, {
		name:         "unknown affinity",
		mod:          func(s *corev1.Service) { s.Spec.SessionAffinity = "Cookie" },
		wantProblems: []string{"InvalidSessionAffinity"},
		wantTypes:    []string{corev1.EventTypeWarning},
	}, {
		name:         "NodePorts allocated by default: advice",
		mod:          func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = nil },
		wantProblems: []string{"NodePortsNotNeeded"},
		wantTypes:    []string{corev1.EventTypeNormal},
	}, {
		name:         "NodePorts allocated explicitly: advice",
		mod:          func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr(true) },
		wantProblems: []string{"NodePortsNotNeeded"},
		wantTypes:    []string{corev1.EventTypeNormal},
	}, {
		name:         "unknown traffic policy",
		mod:          func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = "Global" },
		wantProblems: []string{"InvalidTrafficPolicy"},
		wantTypes:    []string{corev1.EventTypeWarning},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(tt.mod)
			before := svc.DeepCopy()
			got, problems := ServiceModel(Input{Service: svc, VIPs: []netip.Addr{vip4}}, nil)
			if got.Affinity != tt.wantAffinity || got.AffinityTimeout != tt.wantTimeout {
				t.Errorf("affinity %v %v, want %v %v", got.Affinity, got.AffinityTimeout, tt.wantAffinity, tt.wantTimeout)
			}
			if !slices.Equal(reasons(problems), tt.wantProblems) {
				t.Errorf("problems %v, want %v", problems, tt.wantProblems)
			}
			for i, p := range problems {
				if i < len(tt.wantTypes) && p.Type != tt.wantTypes[i] {
					t.Errorf("problem %s: type %s, want %s", p.Reason, p.Type, tt.wantTypes[i])
				}
			}
			if !reflect.DeepEqual(svc, before) {
				t.Errorf("ServiceModel modified the Service")
			}
		})
	}
}

func TestServiceModelBadInput(t *testing.T) {
	tests := []struct {
		name         string
		in           Input
		wantStates   []string
		wantProblems []string
	}{{
		name:         "nil Service",
		in:           Input{},
		wantProblems: []string{"InvalidService"},
	}, {
		name: "nil slices, FQDN slices, nil fields, empty endpoints",
		in: Input{Service: testService(), Slices: []*discoveryv1.EndpointSlice{
			nil,
			{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"example.com"}}}},
			{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{}}, Ports: slice("x", 8080).Ports},
			{AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{}, {Name: ptr("http")}, {Name: ptr("dns"), Protocol: ptr(corev1.ProtocolUDP), Port: ptr(int32(-1))}}},
		}},
		wantProblems: []string{"InvalidEndpoint"},
	}, {
		name: "bad addresses",
		in: Input{Service: testService(), Slices: []*discoveryv1.EndpointSlice{
			slice("a", 8080, ep("198.18.1.1", "", "r"), ep("bogus", "", "r"), ep("2001:db8::1", "", "r"), ep("::ffff:198.18.1.2", "", "r"),
				ep("127.0.0.1", "", "r"), ep("0.0.0.0", "", "r"), ep("224.0.0.1", "", "r"), ep("169.254.1.1", "", "r")),
			{AddressType: "IPv5", Endpoints: []discoveryv1.Endpoint{ep("198.18.1.9", "", "r")}},
		}},
		wantStates:   []string{"198.18.1.1=active"},
		wantProblems: []string{"InvalidEndpointSlice", "InvalidEndpoint"}, // slices are read by name
	}, {
		name: "a port number out of range in a slice counts as missing",
		in: Input{Service: testService(), Slices: []*discoveryv1.EndpointSlice{
			slice("a", 70000, ep("198.18.1.1", "", "r")),
		}},
		wantProblems: []string{"EndpointPortMissing"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ServiceModel(tt.in, &fakeNodes{})
			rev := tt.in
			rev.Slices = reversed(rev.Slices)
			if _, again := ServiceModel(rev, &fakeNodes{}); !reflect.DeepEqual(again, problems) {
				t.Errorf("problems depend on the slices' order:\n%v\n%v", problems, again)
			}
			if !slices.Equal(states(got), tt.wantStates) {
				t.Errorf("states %v, want %v", states(got), tt.wantStates)
			}
			if !slices.Equal(reasons(problems), tt.wantProblems) {
				t.Errorf("problems %v, want %v", problems, tt.wantProblems)
			}
		})
	}
}

// TestServiceModelGroupsProblems checks that thousands of bad endpoints make one short Event.
func TestServiceModelGroupsProblems(t *testing.T) {
	var eps []discoveryv1.Endpoint
	for i := range 5000 {
		eps = append(eps, ep(fmt.Sprintf("bad-%d", i), "", "r"))
	}
	_, problems := ServiceModel(Input{Service: testService(), Slices: []*discoveryv1.EndpointSlice{slice("a", 8080, eps...)}}, nil)
	if len(problems) != 1 {
		t.Fatalf("problems %v, want one", reasons(problems))
	}
	if m := problems[0].Message; !strings.HasPrefix(m, "5000 endpoints") || len(m) > 1000 {
		t.Errorf("message %q: want a short one counting 5000 endpoints", m)
	}
}

// bigInput returns a Service with n endpoints spread over nSlices slices, dual-stack half and
// half, a tenth of them terminating, on 50 nodes, and a tenth of the slices resolving the
// named port differently.
func bigInput(n, nSlices int) Input {
	svc := testService(func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	in := Input{Service: svc, VIPs: []netip.Addr{vip4, vip6}}
	per := n / nSlices
	for si := range nSlices {
		var eps []discoveryv1.Endpoint
		for j := range per {
			i := si*per + j
			cond := "r"
			if i%10 == 0 {
				cond = "st"
			}
			var addr string
			if si%2 == 0 {
				addr = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).String()
			} else {
				addr = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}).String()
			}
			eps = append(eps, ep(addr, fmt.Sprintf("node-%d", i%50), cond))
		}
		port := int32(8080)
		if si%10 == 0 {
			port = 9090
		}
		in.Slices = append(in.Slices, slice(fmt.Sprintf("web-%d", si), port, eps...))
	}
	return in
}

func TestServiceModel10kEndpoints(t *testing.T) {
	in := bigInput(10000, 100)
	nodes := &fakeNodes{unhealthy: map[string]bool{"node-7": true}, asked: map[string]int{}}
	start := time.Now()
	got, problems := ServiceModel(in, nodes)
	took := time.Since(start)
	if len(problems) != 0 {
		t.Errorf("problems %v", problems)
	}
	if len(got.Backends) != 10000 {
		t.Fatalf("%d backends, want 10000", len(got.Backends))
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("model does not validate: %v", err)
	}
	count := map[lb.BackendState]int{}
	overrides := 0
	for _, b := range got.Backends {
		count[b.State]++
		if b.TargetPorts != nil {
			overrides++
			if b.TargetPorts["http"] != 9090 {
				t.Fatalf("backend %s: TargetPorts %v", b.Addr, b.TargetPorts)
			}
		}
	}
	// node-7 hosts 200 endpoints: they drain (its health check fails). 1000 serving terminating
	// ones drain (ready ones exist) (i%10==0 and i%50==7 never both).
	if count[lb.Unhealthy] != 0 || count[lb.Draining] != 1200 || count[lb.Active] != 8800 {
		t.Errorf("states %v, want 8800 active, 1200 draining", count)
	}
	if overrides != 1000 || got.Ports[0].TargetPort != 8080 {
		t.Errorf("%d backends with their own port, http TargetPort %d; want 1000 and 8080", overrides, got.Ports[0].TargetPort)
	}
	for n, c := range nodes.asked {
		if c != 1 {
			t.Errorf("LocalHealthy(%s) asked %d times, want once", n, c)
		}
	}
	if took > 2*time.Second {
		t.Errorf("10k endpoints took %v", took)
	}
	if !slices.IsSortedFunc(got.Backends, func(a, b lb.Backend) int { return a.Addr.Compare(b.Addr) }) {
		t.Errorf("backends not sorted")
	}
}

func BenchmarkServiceModel10k(b *testing.B) {
	in := bigInput(10000, 100)
	nodes := &fakeNodes{}
	b.ReportAllocs()
	for b.Loop() {
		ServiceModel(in, nodes)
	}
}

// TestServiceModelDSR: each backend carries its node's direct server return capability, asked
// once per node; an endpoint without a nodeName, or a model made without a NodeView, has none.
func TestServiceModelDSR(t *testing.T) {
	nodes := &fakeNodes{dsr: map[string]bool{"n1": true}}
	in := Input{Service: testService(), VIPs: []netip.Addr{vip4},
		Slices: []*discoveryv1.EndpointSlice{slice("a", 8080, ep("198.18.1.1", "n1", "r"), ep("198.18.1.2", "n2", "r"),
			ep("198.18.1.3", "", "r"), ep("198.18.1.4", "n1", "t"))}}
	got, _ := ServiceModel(in, nodes)
	var dsr []bool
	for _, b := range got.Backends {
		dsr = append(dsr, b.DSR)
	}
	if want := []bool{true, false, false, true}; !slices.Equal(dsr, want) {
		t.Errorf("backends' DSR %v, want %v", dsr, want)
	}
	got, _ = ServiceModel(in, nil)
	if slices.ContainsFunc(got.Backends, func(b lb.Backend) bool { return b.DSR }) {
		t.Errorf("without a NodeView a backend is DSR: %+v", got.Backends)
	}
}

// TestNodeDSR: only this build's carrier version counts.
func TestNodeDSR(t *testing.T) {
	for v, want := range map[string]bool{DSRCarrierVersion: true, "v2": false, "": false} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationDSR: v}}}
		if NodeDSR(n) != want {
			t.Errorf("NodeDSR with %s=%q: %v, want %v", AnnotationDSR, v, !want, want)
		}
	}
	if NodeDSR(&corev1.Node{}) || NodeDSR(nil) {
		t.Error("a Node without the annotation, or none, serves DSR")
	}
}
