package gateway

import (
	"log/slog"
	"strings"

	"github.com/xlb-dev/xlb/lb"
)

// warnSharedEndpoints logs a warning for each of the file's services that sends to Pod (or
// host) ports another of them sends to: the same condition as Kubernetes mode's
// SharedEndpoints Event (docs/kubernetes.md), whose replies a gateway that did not see the
// connection's first packet cannot always translate. In the DSR mode only the backends whose
// replies do return through the gateways count (Forwarding.ReturnPath).
func warnSharedEndpoints(log *slog.Logger, fw lb.Forwarding, services []lb.Service) {
	x := lb.NewEndpointIndex()
	for _, s := range services {
		x.Set(fw.ReturnPath(s))
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
