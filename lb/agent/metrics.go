// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// handler serves /metrics (the agent's collector) and /healthz (200 once what the agent runs
// was applied: the cluster IPs, direct server return).
func (a *agent) handler() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(a)); err != nil {
		return nil, fmt.Errorf("agent: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case a.dp != nil && !a.applied.Load():
			http.Error(w, "cluster IPs not applied yet", http.StatusServiceUnavailable)
		case a.dsr != nil && !a.dsr.applied.Load():
			http.Error(w, "direct server return not applied yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	return mux, nil
}

// collector exports the datapaths' state and counters, read at each scrape.
type collector struct {
	a                                   *agent
	frontends, events, errors, refused  *prometheus.Desc
	dsrPackets, dsrPairs, dsrInterfaces *prometheus.Desc
}

func newCollector(a *agent) *collector {
	return &collector{
		a:         a,
		frontends: prometheus.NewDesc("xlb_agent_frontends", "Cluster IP frontends (address, port, protocol) balanced on this node.", nil, nil),
		events:    prometheus.NewDesc("xlb_agent_socket_events_total", "Socket calls the programs acted on: connect (sent to an endpoint), refused (no endpoint serves), datagram (unconnected UDP sent to an endpoint), datagram_kept (of those, to the socket's earlier endpoint), revnat (cluster IP given back by recvmsg or getpeername), affinity_kept (a connection sent to its client's endpoint, sessionAffinity: ClientIP), no_slot (never, unless a map write failed), udp_closed (a connected UDP socket closed by the agent: its endpoint left the frontend).", []string{"event"}, nil),
		errors:    prometheus.NewDesc("xlb_agent_scrape_errors", "Counters that could not be read during this scrape.", nil, nil),
		refused: prometheus.NewDesc("xlb_agent_refused_services",
			"Services with an address or frontend the agent does not balance, by reason (their Warning Event's): ExternalIPRefused (an external IP inside a service CIDR or outside --external-ip-allow), LoadBalancerIPRefused (a load-balancer address inside a service CIDR), FrontendConflict (a frontend that is another Service's: its cluster IP, or claimed by an older Service).",
			[]string{"reason"}, nil),
		dsrPackets: prometheus.NewDesc("xlb_agent_dsr_packets_total",
			"Packets the node side of direct server return acted on, by counter (docs/dsr.md, Counters): carrier_accepted, carrier_frag_stripped, reply_rewritten, reply_frag_rewritten, icmp_rewritten, reply_expired, record_failed, tcp_pickup_over_budget and udp_new_over_budget (flows not recorded: the node's flood budgets) and the drop_* reasons.", []string{"counter"}, nil),
		dsrPairs: prometheus.NewDesc("xlb_agent_dsr_pairs",
			"{frontend, local endpoint} pairs the node accepts carriers for.", nil, nil),
		dsrInterfaces: prometheus.NewDesc("xlb_agent_dsr_interfaces",
			"Interfaces the node side of direct server return is attached to, by direction: both (the uplinks), egress (toward the node's Pods, for the hairpin).", []string{"direction"}, nil),
	}
}

// Describe sends the metrics' descriptions.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.frontends, c.events, c.errors, c.refused, c.dsrPackets, c.dsrPairs, c.dsrInterfaces} {
		ch <- d
	}
}

// Collect reads the datapaths' counters and sends the metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	errs := 0
	if c.a.dp != nil {
		c.a.mu.Lock()
		n := c.a.rec.Frontends()
		cnt, err := c.a.dp.Counters()
		refused := c.a.refused
		c.a.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.frontends, prometheus.GaugeValue, float64(n))
		for _, reason := range []string{kube.ReasonExternalIPRefused, kube.ReasonLoadBalancerIPRefused, kube.ReasonFrontendConflict} {
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(refused[reason]), reason)
		}
		if err != nil {
			errs++
		} else {
			for ev, v := range map[string]uint64{"connect": cnt.Connects, "refused": cnt.Refused, "datagram": cnt.Datagrams,
				"datagram_kept": cnt.DatagramsKept, "revnat": cnt.Revnat, "affinity_kept": cnt.AffinityKept, "no_slot": cnt.NoSlot,
				"udp_closed": c.a.udpClosed.Load()} {
				ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(v), ev)
			}
		}
	}
	if c.a.dsr != nil {
		s := c.a.dsr.stats()
		ch <- prometheus.MustNewConstMetric(c.dsrPairs, prometheus.GaugeValue, float64(s.pairs))
		for _, dir := range []datapath.DSRDirection{datapath.DSRBoth, datapath.DSREgress, datapath.DSRIngress} {
			ch <- prometheus.MustNewConstMetric(c.dsrInterfaces, prometheus.GaugeValue, float64(s.interfaces[dir]), dir.String())
		}
		if s.err != nil {
			errs++
		} else {
			for name, v := range s.counters {
				ch <- prometheus.MustNewConstMetric(c.dsrPackets, prometheus.CounterValue, float64(v), name)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, float64(errs))
}
