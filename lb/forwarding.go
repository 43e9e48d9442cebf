// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"net/netip"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Fallback says what a site in the DSR forwarding mode does with a backend whose node cannot
// serve direct server return (no DSR-capable node agent): the node would neither strip the
// carrier nor rewrite the Pod's replies.
type Fallback uint8

const (
	// FallbackExclude (the default) gives such backends no new flows, as if they were
	// draining: on a site whose nodes do not route replies through the gateways (the reason
	// to run DSR) they could not answer. A Service whose every backend is excluded is down,
	// and says so, rather than black-holing its clients.
	FallbackExclude Fallback = iota
	// FallbackReturnPath serves them in the return-path mode: DNAT without carrier, replies
	// translated by the gateways. Only for sites whose nodes without agent do route their
	// replies through the gateways.
	FallbackReturnPath
)

// String returns the fallback's configuration name.
func (f Fallback) String() string {
	switch f {
	case FallbackExclude:
		return "exclude"
	case FallbackReturnPath:
		return "returnPath"
	}
	return fmt.Sprintf("fallback-%d", uint8(f))
}

// ParseFallback parses a fallback's configuration name.
func ParseFallback(s string) (Fallback, error) {
	switch s {
	case "exclude":
		return FallbackExclude, nil
	case "returnPath":
		return FallbackReturnPath, nil
	}
	return 0, fmt.Errorf("unknown DSR fallback %q (want exclude or returnPath)", s)
}

// Forwarding is a site's forwarding setting: the mode, and what DSR does with backends it
// cannot serve directly. The zero value is the return-path mode.
type Forwarding struct {
	// Mode is datapath.ReturnPath ("" too) or datapath.DSR.
	Mode datapath.Forwarding
	// Fallback applies in the DSR mode only.
	Fallback Fallback
}

// Validate checks the mode and fallback names.
func (f Forwarding) Validate() error {
	switch f.Mode {
	case "", datapath.ReturnPath, datapath.DSR:
	default:
		return fmt.Errorf("unknown forwarding mode %q (want %s or %s)", f.Mode, datapath.ReturnPath, datapath.DSR)
	}
	if f.Fallback > FallbackReturnPath {
		return fmt.Errorf("unknown DSR fallback %s", f.Fallback)
	}
	return nil
}

// Direct reports whether b is served by direct server return: the mode is DSR and b's node
// can serve it.
func (f Forwarding) Direct(b Backend) bool { return f.Mode == datapath.DSR && b.DSR }

// Excluded reports whether b gets no new flows because the mode is DSR, its node cannot serve
// it, and the fallback is FallbackExclude.
func (f Forwarding) Excluded(b Backend) bool {
	return f.Mode == datapath.DSR && !b.DSR && f.Fallback == FallbackExclude
}

// ReturnPath returns s with only the backends whose replies come back through the gateways
// under f: those not served by direct server return. Their shared Pod ports are what the
// SharedEndpoints warnings are about (see EndpointIndex); a DSR backend's replies are
// translated by its node, which knows each flow's VIP, so sharing is exact for them.
func (f Forwarding) ReturnPath(s Service) Service {
	if f.Mode != datapath.DSR {
		return s
	}
	out := s
	out.Backends = nil
	for _, b := range s.Backends {
		if !b.DSR {
			out.Backends = append(out.Backends, b)
		}
	}
	return out
}

// DSRUse summarises how a service's backends are forwarded under a Forwarding, for its status.
type DSRUse struct {
	// Direct are the backends served by direct server return.
	Direct int
	// ReturnPath are those served through the gateways (FallbackReturnPath).
	ReturnPath []Backend
	// Excluded are those left without new flows (FallbackExclude).
	Excluded []Backend
}

// Use returns how f forwards s's backends (only those of a family s has a VIP of count).
func (f Forwarding) Use(s Service) DSRUse {
	var u DSRUse
	if f.Mode != datapath.DSR {
		return u
	}
	for _, b := range s.Backends {
		if !hasFamily(s.VIPs, b.Addr) {
			continue
		}
		switch {
		case b.DSR:
			u.Direct++
		case f.Fallback == FallbackExclude:
			u.Excluded = append(u.Excluded, b)
		default:
			u.ReturnPath = append(u.ReturnPath, b)
		}
	}
	return u
}

// hasFamily reports whether vips has an address of a's family.
func hasFamily(vips []netip.Addr, a netip.Addr) bool {
	a = a.Unmap()
	for _, v := range vips {
		if v.Unmap().Is4() == a.Is4() {
			return true
		}
	}
	return false
}

// DSRServices returns the pairs a node's side of direct server return must accept carriers
// for: each frontend of services with each endpoint of its backends local says are on the
// node. The node accepts a pair whether or not the gateways use DSR for it (that is theirs to
// decide, from the node's published capability), so a gateway that starts carrying finds the
// pair already there. An all-ports frontend pairs with the endpoint's port 0 (the node then
// requires the carried port to be the packet's destination port). Invalid services are
// skipped.
func DSRServices(services []Service, local func(Backend) bool) map[datapath.DSRService]bool {
	out := map[datapath.DSRService]bool{}
	for i := range services {
		s := &services[i]
		if s.Validate() != nil {
			continue
		}
		for _, b := range s.Backends {
			if !local(b) {
				continue
			}
			a := b.Addr.Unmap()
			for _, vip := range s.VIPs {
				vip = vip.Unmap()
				if vip.Is4() != a.Is4() {
					continue
				}
				for _, p := range s.Ports {
					tp := b.TargetPort(p)
					if p.Port == 0 {
						tp = 0
					}
					out[datapath.DSRService{
						Frontend: datapath.Frontend{Addr: vip, Port: p.Port, Proto: p.Protocol},
						Endpoint: netip.AddrPortFrom(a, tp),
					}] = true
				}
			}
		}
	}
	return out
}
