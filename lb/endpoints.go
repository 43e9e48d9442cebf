package lb

import (
	"net/netip"
	"slices"
)

// Sharing describes the backend endpoints a service shares with other services: Pod ports that
// several services send to. A reply from such an endpoint names none of them, so only the
// gateway that saw the connection's first packet knows its VIP for certain; any other gateway
// re-derives it with Maglev, which cannot separate services on one service port with the same
// backends (docs/datapath.md, Reverse NAT).
type Sharing struct {
	// Others are the other services, sorted.
	Others []string
	// SamePort are those of Others that share an endpoint on the same service port, sorted.
	SamePort []string
	// Example is one shared endpoint (the lowest: Pod address and target port).
	Example netip.AddrPort
	// Endpoints is how many of the service's endpoints are shared.
	Endpoints int
}

// endpointKey is a backend endpoint as the datapath's reverse NAT keys it.
type endpointKey struct {
	addr  netip.AddrPort
	proto Protocol
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
// services that shared an endpoint with s before or share one now (their Sharing may have
// changed), sorted.
func (x *EndpointIndex) Set(s Service) []string {
	touched := x.remove(s.Name)
	var keys []endpointKey
	for _, b := range s.Backends {
		for _, p := range s.Ports {
			k := endpointKey{netip.AddrPortFrom(b.Addr.Unmap(), b.targetPort(p)), p.Protocol}
			u := endpointUse{s.Name, p.Port}
			if slices.Contains(x.byEndpoint[k], u) {
				continue
			}
			for _, o := range x.byEndpoint[k] {
				touched = append(touched, o.service)
			}
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
			x.byEndpoint[k] = append(x.byEndpoint[k], u)
		}
	}
	if len(keys) > 0 {
		x.byService[s.Name] = keys
	}
	return compactNames(touched, s.Name)
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
	var sh Sharing
	for _, k := range x.byService[name] {
		us := x.byEndpoint[k]
		var own []uint16
		for _, u := range us {
			if u.service == name {
				own = append(own, u.port)
			}
		}
		shared := false
		for _, o := range us {
			if o.service == name {
				continue
			}
			shared = true
			if !slices.Contains(sh.Others, o.service) {
				sh.Others = append(sh.Others, o.service)
			}
			if slices.Contains(own, o.port) && !slices.Contains(sh.SamePort, o.service) {
				sh.SamePort = append(sh.SamePort, o.service)
			}
		}
		if !shared {
			continue
		}
		sh.Endpoints++
		if !sh.Example.IsValid() || k.addr.Compare(sh.Example) < 0 {
			sh.Example = k.addr
		}
	}
	slices.Sort(sh.Others)
	slices.Sort(sh.SamePort)
	return sh, sh.Endpoints > 0
}

// compactNames sorts names, drops duplicates and self.
func compactNames(names []string, self string) []string {
	names = slices.DeleteFunc(names, func(n string) bool { return n == self })
	slices.Sort(names)
	return slices.Compact(names)
}
