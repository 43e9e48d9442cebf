// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// ConnectPlan is the node agent's desired state (the socket load balancer, xdp/socklb): what
// each frontend (a cluster IP, port and protocol) does with new connections.
type ConnectPlan map[datapath.Frontend]datapath.ConnectFrontend

// ConnectService is a service as the node agent plans it (PlanConnect): its model, and what
// decides who has a frontend that several services claim.
type ConnectService struct {
	Service
	// Owned are those of VIPs the service owns whole: in Kubernetes its cluster IPs, which the
	// apiserver gives to one Service each. No other service has a frontend on an owned
	// address, whatever its port or protocol.
	Owned []netip.Addr
	// Created orders the claims on the other addresses (external and load-balancer IPs): of the
	// services claiming one frontend, the one created first has it, then the lowest Name. The
	// zero time is the oldest.
	Created time.Time
}

// Conflict is one frontend a service claims that another one has.
type Conflict struct {
	// Frontend is what Service claims and does not have: it is Owner's.
	Frontend datapath.Frontend
	// Service is the service left without Frontend; its other frontends are planned.
	Service string
	// Owner is the service that has Frontend.
	Owner string
	// OwnedAddress says why Owner has it: its address is one Owner owns (ConnectService.Owned,
	// a cluster IP). When false, Owner is older (Created, then Name).
	OwnedAddress bool
}

// PlanConnect computes the socket load balancer's desired state from services. A frontend takes
// the Active backends of its address's family with a weight above zero, each once: a connection
// picks one of them at random (weights beyond zero do not apply), or with AffinityClientIP the
// client's earlier one.
//
// A frontend claimed by several services goes to one, per frontend: an owned address (a cluster
// IP) is its owner's alone, on every port; any other frontend is the oldest claimant's (Created,
// then Name). Each frontend a service loses is in conflicts, and its other frontends are
// planned as if the conflict were not there. A service that is invalid, defined twice, or has an
// all-ports port (the socket hooks need a port to match) is left out whole and reported in errs.
func PlanConnect(services []ConnectService) (plan ConnectPlan, conflicts []Conflict, errs []error) {
	plan = ConnectPlan{}
	type claim struct {
		s      *ConnectService
		fronts ConnectPlan
	}
	sorted := slices.Clone(services)
	slices.SortStableFunc(sorted, func(x, y ConnectService) int { return strings.Compare(x.Name, y.Name) })
	var claims []claim
	names := map[string]bool{}
	for i := range sorted {
		s := &sorted[i]
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if names[s.Name] {
			errs = append(errs, fmt.Errorf("service %s: defined twice", s.Name))
			continue
		}
		names[s.Name] = true
		fronts, err := connectFrontends(&s.Service)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		claims = append(claims, claim{s, fronts})
	}
	// Oldest first: each frontend goes to the first claim on it.
	slices.SortStableFunc(claims, func(x, y claim) int { return older(x.s, y.s) })
	// addrOwner: owned address → its owner, the oldest service that owns it (the apiserver
	// gives a cluster IP to one Service; two owners are a race or a restore, not a choice).
	addrOwner := map[netip.Addr]*ConnectService{}
	for _, c := range claims {
		for _, a := range c.s.Owned {
			if a = a.Unmap(); addrOwner[a] == nil && slices.ContainsFunc(c.s.VIPs, func(v netip.Addr) bool { return v.Unmap() == a }) {
				addrOwner[a] = c.s
			}
		}
	}
	owner := map[datapath.Frontend]*ConnectService{}
	for _, c := range claims {
		for _, f := range slices.SortedFunc(maps.Keys(c.fronts), datapath.Frontend.Compare) {
			if o := addrOwner[f.Addr]; o != nil && o != c.s {
				conflicts = append(conflicts, Conflict{Frontend: f, Service: c.s.Name, Owner: o.Name, OwnedAddress: true})
				continue
			}
			if o := owner[f]; o != nil {
				conflicts = append(conflicts, Conflict{Frontend: f, Service: c.s.Name, Owner: o.Name})
				continue
			}
			plan[f] = c.fronts[f]
			owner[f] = c.s
		}
	}
	slices.SortFunc(conflicts, func(x, y Conflict) int {
		if c := strings.Compare(x.Service, y.Service); c != 0 {
			return c
		}
		return datapath.Frontend.Compare(x.Frontend, y.Frontend)
	})
	return plan, conflicts, errs
}

// older orders services oldest first: by Created, then by Name.
func older(x, y *ConnectService) int {
	if c := x.Created.Compare(y.Created); c != 0 {
		return c
	}
	return strings.Compare(x.Name, y.Name)
}

// connectFrontends plans every frontend of one valid service.
func connectFrontends(s *Service) (ConnectPlan, error) {
	out := ConnectPlan{}
	for _, p := range s.Ports {
		if p.Port == 0 {
			return nil, fmt.Errorf("service %s: all-ports port (0) cannot be balanced at connect time", s.Name)
		}
		for _, v := range s.VIPs {
			v = v.Unmap()
			eps := []netip.AddrPort{}
			for _, b := range s.Backends {
				a := b.Addr.Unmap()
				if b.State != Active || b.Weight == 0 || a.Is4() != v.Is4() {
					continue
				}
				port := b.TargetPort(p)
				if port == 0 {
					port = p.Port
				}
				eps = append(eps, netip.AddrPortFrom(a, port))
			}
			slices.SortFunc(eps, netip.AddrPort.Compare)
			cf := datapath.ConnectFrontend{Endpoints: slices.Compact(eps)}
			if s.Affinity == datapath.AffinityClientIP {
				cf.AffinityTimeout = max(s.AffinityTimeout, time.Second)
			}
			out[datapath.Frontend{Addr: v, Port: p.Port, Proto: p.Protocol}] = cf
		}
	}
	return out, nil
}
