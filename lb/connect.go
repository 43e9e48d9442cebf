package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// ConnectPlan is the node agent's desired state (the socket load balancer, xdp/socklb): what
// each frontend (a cluster IP, port and protocol) does with new connections.
type ConnectPlan map[datapath.Frontend]datapath.ConnectFrontend

// PlanConnect computes the socket load balancer's desired state from services (cluster IPs in
// VIPs). A frontend takes the Active backends of its address's family with a weight above zero,
// each once: a connection picks one of them at random (weights beyond zero do not apply), or
// with AffinityClientIP the client's earlier one. A service that is invalid, has an all-ports port (the socket hooks need a port to
// match), or claims a frontend an earlier service (by name) has, is left out and reported in
// errs; the others are planned as if it were not there.
func PlanConnect(services []Service) (ConnectPlan, []error) {
	plan := ConnectPlan{}
	owner := map[datapath.Frontend]string{}
	valid, errs := validByName(services)
	for _, s := range valid {
		fronts, err := connectFrontends(s)
		if err == nil {
			for f := range fronts {
				if other, taken := owner[f]; taken {
					err = fmt.Errorf("service %s: frontend %s already belongs to service %s", s.Name, f, other)
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for f, cf := range fronts {
			plan[f] = cf
			owner[f] = s.Name
		}
	}
	return plan, errs
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
