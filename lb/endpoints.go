// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"net/netip"
	"slices"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Sharing describes the backend endpoints a service shares with other services: Pod ports that
// several services send to. A reply from such an endpoint names none of them, so only the
// gateway that saw the connection's first packet knows its VIP for certain; any other gateway
// re-derives it with Maglev, which cannot separate services on one service port with the same
// backends (docs/datapath.md, Reverse NAT).
type Sharing struct {
	// SamePort are the other services that share an endpoint with it on the same service port,
	// sorted.
	SamePort []string
	// OtherPort are the other services that share endpoints with it only on other service
	// ports, sorted.
	OtherPort []string
}

// endpointKey is a backend endpoint as the datapath's reverse NAT keys it.
type endpointKey struct {
	addr  netip.AddrPort
	proto datapath.Protocol
}

// endpointUse is one service port sending to an endpoint.
type endpointUse struct {
	service string
	port    uint16
}

// EndpointIndex records which services send to which backend endpoints (Pod address, target
// port, protocol), updated one service at a time, so that a service's Sharing costs a lookup per
// endpoint of its own. The zero value is not usable: use NewEndpointIndex. Not safe for
// concurrent use.
type EndpointIndex struct {
	byService  map[string][]endpointKey
	byEndpoint map[endpointKey][]endpointUse
}

// NewEndpointIndex returns an empty index.
func NewEndpointIndex() *EndpointIndex {
	return &EndpointIndex{byService: map[string][]endpointKey{}, byEndpoint: map[endpointKey][]endpointUse{}}
}

// Set records s's endpoints in place of those recorded for s.Name before, and returns the
// services that shared an endpoint with s before or share one now, sorted; none when s's
// endpoint uses did not change (a backend's state or weight is no concern of the index). Only
// backends of a family s has a VIP of count: the others get no frontend. All-ports service
// ports (0, which Kubernetes never makes) are keyed as they are, not matched with fixed ports.
func (x *EndpointIndex) Set(s Service) []string {
	uses := map[endpointKey][]uint16{} // s's endpoints → its service ports sending to them
	var keys []endpointKey
	for _, b := range s.Backends {
		a := b.Addr.Unmap()
		if !slices.ContainsFunc(s.VIPs, func(v netip.Addr) bool { return v.Unmap().Is4() == a.Is4() }) {
			continue
		}
		for _, p := range s.Ports {
			k := endpointKey{netip.AddrPortFrom(a, b.TargetPort(p)), p.Protocol}
			ports, ok := uses[k]
			if !ok {
				keys = append(keys, k)
			}
			if !slices.Contains(ports, p.Port) {
				uses[k] = append(ports, p.Port)
			}
		}
	}
	if x.unchanged(s.Name, uses) {
		return nil
	}
	touched := x.remove(s.Name)
	for _, k := range keys {
		for _, o := range x.byEndpoint[k] {
			touched = append(touched, o.service)
		}
		for _, port := range uses[k] {
			x.byEndpoint[k] = append(x.byEndpoint[k], endpointUse{s.Name, port})
		}
	}
	if len(keys) > 0 {
		x.byService[s.Name] = keys
	}
	return compactNames(touched, s.Name)
}

// unchanged reports whether the uses recorded for service name are exactly uses.
func (x *EndpointIndex) unchanged(name string, uses map[endpointKey][]uint16) bool {
	old := x.byService[name]
	if len(old) != len(uses) {
		return false
	}
	for _, k := range old {
		want, ok := uses[k]
		if !ok {
			return false
		}
		n := 0
		for _, u := range x.byEndpoint[k] {
			if u.service == name {
				if !slices.Contains(want, u.port) {
					return false
				}
				n++
			}
		}
		if n != len(want) {
			return false
		}
	}
	return true
}

// Delete forgets service name and returns the services that shared an endpoint with it, sorted.
func (x *EndpointIndex) Delete(name string) []string {
	return compactNames(x.remove(name), name)
}

// remove drops name's endpoints and returns the other services that used them.
func (x *EndpointIndex) remove(name string) []string {
	var touched []string
	for _, k := range x.byService[name] {
		us := slices.DeleteFunc(x.byEndpoint[k], func(u endpointUse) bool { return u.service == name })
		for _, o := range us {
			touched = append(touched, o.service)
		}
		if len(us) == 0 {
			delete(x.byEndpoint, k)
		} else {
			x.byEndpoint[k] = us
		}
	}
	delete(x.byService, name)
	return touched
}

// Sharing returns what service name shares, and false when it shares no endpoint.
func (x *EndpointIndex) Sharing(name string) (Sharing, bool) {
	same, other := map[string]bool{}, map[string]bool{}
	for _, k := range x.byService[name] {
		us := x.byEndpoint[k]
		var own []uint16
		for _, u := range us {
			if u.service == name {
				own = append(own, u.port)
			}
		}
		for _, o := range us {
			switch {
			case o.service == name:
			case slices.Contains(own, o.port):
				same[o.service] = true
			default:
				other[o.service] = true
			}
		}
	}
	var sh Sharing
	for n := range same {
		sh.SamePort = append(sh.SamePort, n)
	}
	for n := range other {
		if !same[n] {
			sh.OtherPort = append(sh.OtherPort, n)
		}
	}
	slices.Sort(sh.SamePort)
	slices.Sort(sh.OtherPort)
	return sh, len(sh.SamePort)+len(sh.OtherPort) > 0
}

// compactNames sorts names, drops duplicates and self.
func compactNames(names []string, self string) []string {
	names = slices.DeleteFunc(names, func(n string) bool { return n == self })
	slices.Sort(names)
	return slices.Compact(names)
}
