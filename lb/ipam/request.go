// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Port is a Service port, as far as address sharing is concerned.
type Port struct {
	// Protocol is TCP or UDP.
	Protocol datapath.Protocol
	// Port is the port number clients use; 0 stands for every port of the protocol, and
	// clashes with any port of it.
	Port uint16
}

// String returns "80/TCP", or "every TCP port" for port 0.
func (p Port) String() string {
	if p.Port == 0 {
		return "every " + p.Protocol.String() + " port"
	}
	return fmt.Sprintf("%d/%s", p.Port, p.Protocol)
}

// clashes reports whether p and q cannot share an address.
func (p Port) clashes(q Port) bool {
	return p.Protocol == q.Protocol && (p.Port == q.Port || p.Port == 0 || q.Port == 0)
}

// Request is what a Service asks of the allocator.
type Request struct {
	// Service is the owner of the allocation, "namespace/name"; required.
	Service string
	// Namespace and Labels are the Service's, matched against the pools' Namespaces and
	// ServiceSelector.
	Namespace string
	Labels    map[string]string
	// Families are the wanted families in order of preference (spec.ipFamilies), at least one,
	// each once.
	Families []Family
	// RequireAll says every family of Families must get an address (RequireDualStack); when
	// false only the first must, and the others get one if a pool can give it
	// (SingleStack, PreferDualStack).
	RequireAll bool
	// Addresses, if set, are the exact addresses wanted (spec.loadBalancerIP or the addresses
	// annotation): the answer is these or an error. Each must be of a family of Families, and
	// together they must cover the required families.
	Addresses []netip.Addr
	// Pool, if set, names the pool to allocate from (the pool annotation), whether or not it
	// assigns automatically.
	Pool string
	// SharingKey, if set, lets Services with the same key share an address when none of their
	// ports clash; empty never shares.
	SharingKey string
	// Ports are the Service's ports, checked for clashes when an address is shared.
	Ports []Port
}

// check says why r cannot be served, whatever the pools.
func (r *Request) check() error {
	if r.Service == "" {
		return fmt.Errorf("the request names no service")
	}
	if len(r.Families) == 0 {
		return r.fail(ReasonInvalidRequest, "it asks for no IP family")
	}
	for i, f := range r.Families {
		if !f.valid() {
			return r.fail(ReasonInvalidRequest, "unknown IP family %d", uint8(f))
		}
		if slices.Contains(r.Families[:i], f) {
			return r.fail(ReasonInvalidRequest, "IP family %s is listed twice", f)
		}
	}
	for i, a := range r.Addresses {
		switch {
		case !a.IsValid():
			return r.fail(ReasonInvalidRequest, "requested address %d is not an IP address", i+1)
		case a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast():
			return r.fail(ReasonInvalidRequest, "requested address %s is not a usable unicast address", a)
		case !slices.Contains(r.Families, FamilyOf(a)):
			return r.fail(ReasonInvalidRequest, "requested address %s is %s, but the Service's IP families are %s",
				a, FamilyOf(a), familyList(r.Families))
		case slices.ContainsFunc(r.Addresses[:i], func(b netip.Addr) bool { return FamilyOf(b) == FamilyOf(a) }):
			return r.fail(ReasonInvalidRequest, "more than one %s address requested (a Service has one per family)", FamilyOf(a))
		}
	}
	if len(r.Addresses) > 0 {
		for _, f := range r.required() {
			if !slices.ContainsFunc(r.Addresses, func(a netip.Addr) bool { return FamilyOf(a) == f }) {
				return r.fail(ReasonInvalidRequest, "the requested addresses include no %s address, and the Service requires one", f)
			}
		}
	}
	for i, p := range r.Ports {
		if slices.Contains(r.Ports[:i], p) {
			return r.fail(ReasonInvalidRequest, "port %s is listed twice", p)
		}
	}
	return nil
}

// required returns the families that must get an address.
func (r *Request) required() []Family {
	if r.RequireAll || len(r.Families) < 2 {
		return r.Families
	}
	return r.Families[:1]
}

// normalize returns a copy of r that shares no slice or map with the caller, addresses
// unmapped.
func (r Request) normalize() Request {
	r.Families = slices.Clone(r.Families)
	r.Addresses = slices.Clone(r.Addresses)
	for i, a := range r.Addresses {
		r.Addresses[i] = a.Unmap()
	}
	r.Ports = slices.Clone(r.Ports)
	labels := make(map[string]string, len(r.Labels))
	for k, v := range r.Labels {
		labels[k] = v
	}
	r.Labels = labels
	return r
}

// familyList returns "IPv4", "IPv4 and IPv6".
func familyList(fs []Family) string {
	s := ""
	for i, f := range fs {
		if i > 0 {
			s += " and "
		}
		s += f.String()
	}
	return s
}
