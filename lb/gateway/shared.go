// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"log/slog"
	"strings"

	"github.com/xlb-dev/xlb/lb"
)

// warnSharedEndpoints logs a warning for each of the file's services that sends to Pod (or
// host) ports another of them sends to: the same condition as Kubernetes mode's
// SharedEndpoints Event (docs/kubernetes.md), whose replies a gateway that did not see the
// connection's first packet cannot always translate.
//
// In the DSR forwarding mode only the backends served through the gateways count (fw.ReturnPath):
// a DSR backend's node translates its replies, knowing each flow's VIP. The backends DSR cannot
// serve (backends[].dsr: false) are reported too, excluded or through the gateways.
func warnSharedEndpoints(log *slog.Logger, services []lb.Service, fw lb.Forwarding) {
	x := lb.NewEndpointIndex()
	for _, s := range services {
		x.Set(fw.ReturnPath(s))
		u := fw.Use(s)
		if len(u.Excluded) > 0 {
			log.Warn("service has backends direct server return cannot serve (dsr: false): they get no new flows "+
				"(datapath.dsrFallback: exclude)", "service", s.Name, "backends", backendAddrs(u.Excluded))
		}
		if len(u.ReturnPath) > 0 {
			log.Info("service has backends direct server return cannot serve (dsr: false): their replies must come "+
				"back through the gateways (datapath.dsrFallback: returnPath)", "service", s.Name, "backends", backendAddrs(u.ReturnPath))
		}
	}
	for _, s := range services {
		sh, ok := x.Sharing(s.Name)
		if !ok {
			continue
		}
		log.Warn("service shares backend ports with other services: a reply that returns through a "+
			"gateway that did not see its connection's first packet may not be translated "+
			"(usually not on the same service port; about 1 in n on others); give the services "+
			"distinct backend ports, or route the backends' replies back through the gateway that "+
			"forwarded the connection (docs/datapath.md, Reverse NAT)",
			"service", s.Name, "samePort", strings.Join(sh.SamePort, ","), "otherPorts", strings.Join(sh.OtherPort, ","))
	}
}

// backendAddrs lists backends' addresses for a log line.
func backendAddrs(bs []lb.Backend) string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Addr.String()
	}
	return strings.Join(out, ",")
}
