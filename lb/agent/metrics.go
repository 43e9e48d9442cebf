package agent

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// handler serves /metrics (the agent's collector) and /healthz (200 once a plan was applied).
func (a *agent) handler() (http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(a)); err != nil {
		return nil, fmt.Errorf("agent: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.applied.Load() {
			http.Error(w, "cluster IPs not applied yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux, nil
}

// collector exports the socket load balancer's frontends and counters, read at each scrape.
type collector struct {
	a                         *agent
	frontends, events, errors *prometheus.Desc
}

func newCollector(a *agent) *collector {
	return &collector{
		a:         a,
		frontends: prometheus.NewDesc("xlb_agent_frontends", "Cluster IP frontends (address, port, protocol) balanced on this node.", nil, nil),
		events:    prometheus.NewDesc("xlb_agent_socket_events_total", "Socket calls the programs acted on: connect (sent to an endpoint), refused (no endpoint serves), datagram (unconnected UDP sent to an endpoint), datagram_kept (of those, to the socket's earlier endpoint), revnat (cluster IP given back by recvmsg or getpeername), affinity_kept (a connection sent to its client's endpoint, sessionAffinity: ClientIP), no_slot (never, unless a map write failed), udp_closed (a connected UDP socket closed by the agent: its endpoint left the frontend).", []string{"event"}, nil),
		errors:    prometheus.NewDesc("xlb_agent_scrape_errors", "Counters that could not be read during this scrape.", nil, nil),
	}
}

// Describe sends the metrics' descriptions.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.frontends
	ch <- c.events
	ch <- c.errors
}

// Collect reads the datapath's counters and sends the metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.a.mu.Lock()
	n := c.a.rec.Frontends()
	cnt, err := c.a.dp.Counters()
	c.a.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.frontends, prometheus.GaugeValue, float64(n))
	errs := 0
	if err != nil {
		errs = 1
	} else {
		for ev, v := range map[string]uint64{"connect": cnt.Connects, "refused": cnt.Refused, "datagram": cnt.Datagrams,
			"datagram_kept": cnt.DatagramsKept, "revnat": cnt.Revnat, "affinity_kept": cnt.AffinityKept, "no_slot": cnt.NoSlot,
			"udp_closed": c.a.udpClosed.Load()} {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(v), ev)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, float64(errs))
}
