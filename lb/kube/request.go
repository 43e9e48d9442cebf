// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"unicode"

	"github.com/xlb-dev/xlb/xdp/datapath"
	corev1 "k8s.io/api/core/v1"
)

// The annotations xlb reads on a Service.
const (
	// AnnotationLoadBalancerIPs asks for exact addresses: a comma-separated list of at most one
	// IPv4 and one IPv6 address (dual-stack). It replaces the deprecated
	// spec.loadBalancerIP, and wins over it when both are set.
	AnnotationLoadBalancerIPs = "xlb.dev/load-balancer-ips"
	// AnnotationAddressPool names the address pool to allocate from, whether or not that pool
	// assigns addresses automatically.
	AnnotationAddressPool = "xlb.dev/address-pool"
	// AnnotationAllowSharedIP is a sharing key: Services with the same key may share an
	// address when their ports do not clash.
	AnnotationAllowSharedIP = "xlb.dev/allow-shared-ip"
)

// MetalLB's Service annotations, read as aliases of xlb's so that a MetalLB user migrates a
// Service by changing its loadBalancerClass alone (docs/kubernetes.md, "Coming from MetalLB").
// The value's syntax is the same as xlb's annotation's. When both are set, xlb's wins and a
// differing alias is reported. The metallb.universe.tf/ prefix is MetalLB's older spelling of
// the same annotations; it is accepted too.
const (
	// MetalLBLoadBalancerIPs is an alias of AnnotationLoadBalancerIPs.
	MetalLBLoadBalancerIPs = "metallb.io/loadBalancerIPs"
	// MetalLBAddressPool is an alias of AnnotationAddressPool.
	MetalLBAddressPool = "metallb.io/address-pool"
	// MetalLBAllowSharedIP is an alias of AnnotationAllowSharedIP.
	MetalLBAllowSharedIP = "metallb.io/allow-shared-ip"
)

// annotationAliases returns the aliases of xlb's annotation key, read when it is absent, in
// order of preference.
func annotationAliases(key string) []string {
	switch key {
	case AnnotationLoadBalancerIPs:
		return []string{MetalLBLoadBalancerIPs, "metallb.universe.tf/loadBalancerIPs"}
	case AnnotationAddressPool:
		return []string{MetalLBAddressPool, "metallb.universe.tf/address-pool"}
	case AnnotationAllowSharedIP:
		return []string{MetalLBAllowSharedIP, "metallb.universe.tf/allow-shared-ip"}
	}
	return nil
}

// annotation returns the value of xlb's annotation key on svc, or else of its first alias
// that is set, with the key it came from. An alias set next to the annotation with another
// value is reported (the annotation wins).
func annotation(svc *corev1.Service, key string, pb *problems) (value, from string, ok bool) {
	value, ok = svc.Annotations[key]
	from = key
	for _, alias := range annotationAliases(key) {
		v, set := svc.Annotations[alias]
		switch {
		case !set:
		case !ok:
			value, from, ok = v, alias, true
		case strings.TrimSpace(v) != strings.TrimSpace(value):
			pb.warn("ConflictingAnnotations", "annotation %s %q differs from %s %q: %s wins", alias, v, from, value, from)
		}
	}
	return value, from, ok
}

// maxAnnotationValue bounds the pool name and the sharing key (a DNS subdomain's length).
const maxAnnotationValue = 253

// AddressRequest is what a Service asks of the address allocator (lb/ipam's Request, field
// for field; the controller converts it).
type AddressRequest struct {
	// Service is the owner, "namespace/name".
	Service string
	// Namespace and Labels are the Service's, for the pools' namespace and Service selectors.
	Namespace string
	Labels    map[string]string
	// Families are the wanted families in order of preference, at least one, each once.
	Families []corev1.IPFamily
	// RequireAll says every family must get an address (RequireDualStack); when false only the
	// first must (SingleStack, PreferDualStack).
	RequireAll bool
	// Addresses, if set, are the exact addresses wanted (AnnotationLoadBalancerIPs or
	// spec.loadBalancerIP), at most one per family.
	Addresses []netip.Addr
	// Pool, if set, names the pool to allocate from (AnnotationAddressPool).
	Pool string
	// SharingKey, if set, lets Services with the same key share an address
	// (AnnotationAllowSharedIP); empty never shares.
	SharingKey string
	// Ports are the Service's TCP and UDP ports, for clash checks when sharing.
	Ports []RequestPort
	// Err, when not nil, says the request cannot be honoured as written (the Service asks for
	// addresses, a pool or a key that xlb cannot parse): the controller must allocate nothing
	// new for it (and keep what it has) rather than hand out an address the user did not ask
	// for. It is also reported as a Problem.
	Err error
}

// RequestPort is a Service port as the allocator sees it.
type RequestPort struct {
	// Protocol is TCP or UDP.
	Protocol datapath.Protocol
	// Port is the port clients use.
	Port uint16
}

// IPRequest reads what addresses svc asks for. Families come from spec.ipFamilies and
// spec.ipFamilyPolicy: SingleStack (or no policy) takes the first family; PreferDualStack the
// listed ones, the first required; RequireDualStack both, both required (the unlisted one
// added after the listed one). With no ipFamilies (which the apiserver always fills in) the
// family is IPv4, plus IPv6 for the dual-stack policies.
//
// Bad values are Problems; those that make the request unusable (unparseable or duplicate
// addresses, an address of a family the Service does not have, a malformed pool name or key)
// also set AddressRequest.Err. A nil svc yields a request with Err set.
func IPRequest(svc *corev1.Service) (AddressRequest, []Problem) {
	var pb problems
	if svc == nil {
		req := AddressRequest{Err: fmt.Errorf("no Service")}
		pb.warn("InvalidService", "no Service to allocate for")
		return req, pb.done()
	}
	req := AddressRequest{
		Service:   svc.Namespace + "/" + svc.Name,
		Namespace: svc.Namespace,
		Labels:    maps.Clone(svc.Labels),
	}
	var errs []error
	fail := func(reason, format string, args ...any) {
		err := fmt.Errorf("service %s: "+format, append([]any{req.Service}, args...)...)
		errs = append(errs, err)
		pb.warn(reason, format, args...)
	}
	req.Families, req.RequireAll = families(svc, &pb)
	req.Addresses = requestedAddrs(svc, req.Families, fail, &pb)
	if v, key, ok := annotation(svc, AnnotationAddressPool, &pb); ok {
		req.Pool = strings.TrimSpace(v)
		if err := checkName(req.Pool); err != nil {
			fail("InvalidAddressPool", "annotation %s %q: %v", key, v, err)
		}
	}
	if v, key, ok := annotation(svc, AnnotationAllowSharedIP, &pb); ok {
		req.SharingKey = strings.TrimSpace(v)
		if err := checkName(req.SharingKey); err != nil {
			fail("InvalidSharingKey", "annotation %s %q: %v", key, v, err)
		}
	}
	for _, p := range svc.Spec.Ports {
		var proto datapath.Protocol
		switch p.Protocol {
		case corev1.ProtocolTCP, "":
			proto = datapath.TCP
		case corev1.ProtocolUDP:
			proto = datapath.UDP
		default:
			continue // not served (ServiceModel reports it), so it cannot clash
		}
		if p.Port < 1 || p.Port > 65535 {
			continue
		}
		rp := RequestPort{Protocol: proto, Port: uint16(p.Port)}
		if !slices.Contains(req.Ports, rp) {
			req.Ports = append(req.Ports, rp)
		}
	}
	req.Err = errors.Join(errs...)
	return req, pb.done()
}

// families returns the families svc wants and whether all are required.
func families(svc *corev1.Service, pb *problems) ([]corev1.IPFamily, bool) {
	var listed []corev1.IPFamily
	for i, f := range svc.Spec.IPFamilies {
		switch {
		case f != corev1.IPv4Protocol && f != corev1.IPv6Protocol:
			pb.warn("InvalidIPFamily", "spec.ipFamilies[%d] %q: expected IPv4 or IPv6; it is ignored", i, f)
		case !slices.Contains(listed, f):
			listed = append(listed, f)
		}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		switch *p {
		case corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack:
			policy = *p
		default:
			pb.warn("InvalidIPFamilyPolicy", "spec.ipFamilyPolicy %q: expected SingleStack, PreferDualStack or RequireDualStack; using SingleStack", *p)
		}
	}
	if len(listed) == 0 {
		listed = []corev1.IPFamily{corev1.IPv4Protocol}
		if policy != corev1.IPFamilyPolicySingleStack {
			listed = append(listed, corev1.IPv6Protocol)
		}
	}
	switch policy {
	case corev1.IPFamilyPolicyRequireDualStack:
		if len(listed) == 1 {
			other := corev1.IPv6Protocol
			if listed[0] == corev1.IPv6Protocol {
				other = corev1.IPv4Protocol
			}
			listed = append(listed, other)
		}
		return listed, true
	case corev1.IPFamilyPolicyPreferDualStack:
		return listed, false
	}
	return listed[:1], false
}

// requestedAddrs returns the exact addresses svc asks for, calling fail for each value that
// makes the request unusable.
func requestedAddrs(svc *corev1.Service, fams []corev1.IPFamily, fail func(reason, format string, args ...any), pb *problems) []netip.Addr {
	legacy := strings.TrimSpace(svc.Spec.LoadBalancerIP)
	ann, annKey, hasAnn := annotation(svc, AnnotationLoadBalancerIPs, pb)
	source, list := "spec.loadBalancerIP", legacy
	if hasAnn {
		source, list = "annotation "+annKey, ann
	}
	if legacy != "" {
		pb.advise("DeprecatedLoadBalancerIP", "spec.loadBalancerIP is deprecated: use the annotation %s (a comma-separated list, one address per family)", AnnotationLoadBalancerIPs)
	}
	var out []netip.Addr
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err == nil && (a.Zone() != "" || !a.Unmap().IsGlobalUnicast()) {
			err = fmt.Errorf("not a unicast address")
		}
		if err != nil {
			fail("InvalidLoadBalancerIP", "%s: %q is not a usable IP address", source, s)
			continue
		}
		a = a.Unmap()
		fam := corev1.IPv4Protocol
		if a.Is6() {
			fam = corev1.IPv6Protocol
		}
		switch {
		case !slices.Contains(fams, fam):
			fail("InvalidLoadBalancerIP", "%s: %s is %s, but the Service's families are %v", source, a, fam, fams)
		case slices.ContainsFunc(out, func(o netip.Addr) bool { return o.Is4() == a.Is4() }):
			fail("InvalidLoadBalancerIP", "%s: more than one %s address (at most one per family)", source, fam)
		default:
			out = append(out, a)
		}
	}
	if hasAnn && legacy != "" && (len(out) == 0 || !slices.ContainsFunc(out, func(o netip.Addr) bool { return o.String() == legacy })) {
		pb.warn("ConflictingLoadBalancerIP", "spec.loadBalancerIP %q is not in annotation %s %q: the annotation wins", legacy, annKey, ann)
	}
	return out
}

// checkName checks a pool name or sharing key: not empty, at most maxAnnotationValue
// characters, no spaces or control characters.
func checkName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > maxAnnotationValue:
		return fmt.Errorf("%d characters, at most %d allowed", len(s), maxAnnotationValue)
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Errorf("contains spaces or control characters")
	}
	return nil
}

// Ours reports whether svc is a Service xlb serves: type LoadBalancer and either of class
// class, or of no class when defaultClass is set (xlb is the cluster's default load balancer).
// A nil svc is not ours.
func Ours(svc *corev1.Service, class string, defaultClass bool) bool {
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == class
	}
	return defaultClass
}
