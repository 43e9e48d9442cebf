// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/health"
)

// healthKey is the checker's key of a backend of a service.
func healthKey(service string, addr netip.Addr) string {
	return service + "|" + addr.Unmap().String()
}

// healthTargets lists a health-check target per backend of every service with a check.
func healthTargets(cfg *config.Config) []health.Target {
	var out []health.Target
	for _, s := range cfg.Services {
		hc, ok := cfg.HealthChecks[s.Name]
		if !ok {
			continue
		}
		for _, b := range s.Backends {
			port := hc.Port
			if port == 0 && len(s.Ports) > 0 {
				port = b.TargetPort(s.Ports[0])
			}
			out = append(out, health.Target{Key: healthKey(s.Name, b.Addr),
				Addr: netip.AddrPortFrom(b.Addr.Unmap(), port), Check: healthCheck(hc)})
		}
	}
	return out
}

// healthCheck converts a configured check to the checker's.
func healthCheck(hc config.HealthCheck) health.Check {
	kind, _ := health.ParseKind(string(hc.Type)) // config validated the type
	return health.Check{Kind: kind, Port: hc.Port, Path: hc.Path, ExpectStatus: hc.ExpectStatus,
		Payload: hc.Payload, Expect: hc.Expect, Interval: hc.Interval, Timeout: hc.Timeout,
		Rise: hc.Rise, Fall: hc.Fall}
}

// healthCollector exports the health checker's verdicts.
type healthCollector struct{ g *Gateway }

var healthDesc = prometheus.NewDesc("xlb_backend_healthy", "1 if the backend passes its health check, 0 if not, -1 before its first probe.",
	[]string{"service", "backend"}, nil)

func (h *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- healthDesc }
func (h *healthCollector) Collect(ch chan<- prometheus.Metric) {
	for key, st := range h.g.checker.Snapshot() {
		svc, be, _ := strings.Cut(key, "|")
		v := map[health.Health]float64{health.Healthy: 1, health.Unhealthy: 0, health.Unknown: -1}[st.Health]
		ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, v, svc, be)
	}
}
