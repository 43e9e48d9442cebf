// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TrafficPolicy is externalTrafficPolicy.
type TrafficPolicy uint8

const (
	// TrafficCluster may use any ready backend.
	TrafficCluster TrafficPolicy = iota
	// TrafficLocal uses only backends on nodes that pass their health check; whoever fills the
	// model marks the others Unhealthy.
	TrafficLocal
)

// BackendState says whether a backend takes new flows.
type BackendState uint8

const (
	// Active backends take new flows in proportion to their weight.
	Active BackendState = iota
	// Draining backends take no new flows; their established flows stay (a terminating Pod).
	Draining
	// Unhealthy backends failed their health check: no new flows, and once no Maglev table
	// gives them new flows the reconciler marks them down, so their established flows move to
	// the others too (a dead backend would black-hole them).
	Unhealthy
)

// String returns the state's name.
func (s BackendState) String() string {
	switch s {
	case Active:
		return "active"
	case Draining:
		return "draining"
	case Unhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("state-%d", uint8(s))
}

// Service is one balanced service.
type Service struct {
	// Name identifies the service (namespace/name in Kubernetes); unique.
	Name string
	// VIPs are the service's addresses (IPv4 and/or IPv6).
	VIPs []netip.Addr
	// Ports are the service ports.
	Ports []Port
	// Backends are the Pods (or hosts) behind the service, of either family: a VIP uses the
	// backends of its own family.
	Backends []Backend
	// Affinity and AffinityTimeout are sessionAffinity and its timeout. The datapath keeps a
	// client on one backend while the backend set is unchanged; the timeout is not enforced.
	Affinity        datapath.Affinity
	AffinityTimeout time.Duration
	// SourceRanges, if set, are the only client prefixes allowed (loadBalancerSourceRanges); each
	// VIP uses the prefixes of its family.
	SourceRanges []netip.Prefix
	// TrafficPolicy is externalTrafficPolicy (see TrafficLocal).
	TrafficPolicy TrafficPolicy
	// TableSize is the Maglev table size of the service's frontends, a prime; 0 means
	// PlanOptions.TableSize. It must not depend on the backend count: every change of M remaps
	// almost every flow, so a service's M stays put while its backends come and go.
	TableSize int
	// Route holds the BGP path attributes the service's VIPs are announced with, on top of the
	// speaker-wide ones (per service in the YAML file, per pool in Kubernetes mode). The zero
	// value adds none.
	Route RouteAttributes
}

// RouteAttributes are BGP path attributes of a VIP's host route. When several services share a
// VIP, the announcer merges theirs (see the daemon's route builder).
type RouteAttributes struct {
	// Communities are RFC 1997 communities, each stored as ASN<<16 | value.
	Communities []uint32
	// LargeCommunities are RFC 8092 large communities.
	LargeCommunities []bgp.LargeCommunity
	// LocalPref is the LOCAL_PREF (iBGP only); nil sends the speaker-wide value, if any.
	LocalPref *uint32
	// MED is the MULTI_EXIT_DISC; nil sends the speaker-wide value, if any.
	MED *uint32
}

// IsZero reports whether a adds no attribute.
func (a RouteAttributes) IsZero() bool {
	return len(a.Communities) == 0 && len(a.LargeCommunities) == 0 && a.LocalPref == nil && a.MED == nil
}

// Port is a service port.
type Port struct {
	// Name identifies the port among the service's (may be empty for a single port).
	Name string
	// Port is the port clients connect to; 0 serves every port of the VIP.
	Port uint16
	// Protocol is TCP or UDP.
	Protocol datapath.Protocol
	// TargetPort is the backends' port; 0 means the same as Port.
	TargetPort uint16
}

// Backend is one backend of a service.
type Backend struct {
	// Addr is the Pod (or host) address.
	Addr netip.Addr
	// TargetPorts overrides Port.TargetPort by port name (named target ports resolve per Pod).
	TargetPorts map[string]uint16
	// Weight is the backend's share of new flows relative to the others; 0 takes none.
	Weight uint32
	// State says whether it takes new flows.
	State BackendState
	// Node is where the backend runs (informational, and for TrafficLocal).
	Node string
	// DSR says the backend's node can serve direct server return: its node agent runs the
	// node side (xdp/dsr), strips the carrier and rewrites the backend's replies to come from
	// the VIP. Whether the gateways use it is the site's Forwarding.
	DSR bool
}

// TargetPort returns the backend's port for service port p: its own target port for p's name
// (named target ports resolve per Pod), else p's TargetPort, else p's Port.
func (b Backend) TargetPort(p Port) uint16 {
	if tp, ok := b.TargetPorts[p.Name]; ok {
		return tp
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Port
}

// Endpoints returns backend b's endpoints in s: its address with the target port of each of s's
// ports, in port order.
func (s *Service) Endpoints(b Backend) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(s.Ports))
	for _, p := range s.Ports {
		out = append(out, netip.AddrPortFrom(b.Addr.Unmap(), b.TargetPort(p)))
	}
	return out
}

// Validate checks a service on its own and says what is wrong, naming the field.
func (s *Service) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("service has no name")
	}
	if len(s.VIPs) == 0 {
		return fmt.Errorf("service %s: no VIPs", s.Name)
	}
	seenVIP := map[netip.Addr]bool{}
	for _, v := range s.VIPs {
		if !v.IsValid() || v.Zone() != "" || v.IsUnspecified() || v.IsMulticast() {
			return fmt.Errorf("service %s: VIP %s is not a usable unicast address", s.Name, v)
		}
		if seenVIP[v.Unmap()] {
			return fmt.Errorf("service %s: VIP %s listed twice", s.Name, v)
		}
		seenVIP[v.Unmap()] = true
	}
	if len(s.Ports) == 0 {
		return fmt.Errorf("service %s: no ports", s.Name)
	}
	type pp struct {
		port  uint16
		proto datapath.Protocol
	}
	seenPort := map[pp]bool{}
	seenName := map[string]bool{}
	for _, p := range s.Ports {
		if p.Protocol != datapath.TCP && p.Protocol != datapath.UDP {
			return fmt.Errorf("service %s: port %d: %s is not supported (TCP or UDP)", s.Name, p.Port, p.Protocol)
		}
		if seenPort[pp{p.Port, p.Protocol}] {
			return fmt.Errorf("service %s: port %d/%s listed twice", s.Name, p.Port, p.Protocol)
		}
		seenPort[pp{p.Port, p.Protocol}] = true
		if seenName[p.Name] && len(s.Ports) > 1 {
			return fmt.Errorf("service %s: port name %q used twice (ports need distinct names)", s.Name, p.Name)
		}
		seenName[p.Name] = true
		if p.Port == 0 && p.TargetPort != 0 {
			return fmt.Errorf("service %s: an all-ports port (0) cannot have targetPort %d", s.Name, p.TargetPort)
		}
	}
	seenBE := map[netip.Addr]bool{}
	for _, b := range s.Backends {
		if !b.Addr.IsValid() || b.Addr.Zone() != "" || b.Addr.IsUnspecified() || b.Addr.IsMulticast() {
			return fmt.Errorf("service %s: backend %s is not a usable unicast address", s.Name, b.Addr)
		}
		if seenBE[b.Addr.Unmap()] {
			return fmt.Errorf("service %s: backend %s listed twice", s.Name, b.Addr)
		}
		seenBE[b.Addr.Unmap()] = true
		if b.State > Unhealthy {
			return fmt.Errorf("service %s: backend %s: unknown state %d", s.Name, b.Addr, b.State)
		}
		for name := range b.TargetPorts {
			if !seenName[name] {
				return fmt.Errorf("service %s: backend %s: target port for unknown port %q", s.Name, b.Addr, name)
			}
		}
	}
	for _, r := range s.SourceRanges {
		if !r.IsValid() {
			return fmt.Errorf("service %s: source range %s is not a prefix", s.Name, r)
		}
		if r.Addr().Is4In6() {
			return fmt.Errorf("service %s: source range %s is IPv4-mapped; write it in IPv4 form", s.Name, r)
		}
	}
	return nil
}
