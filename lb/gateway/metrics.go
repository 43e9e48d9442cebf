// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/xlb-dev/xlb/bgp/speaker"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// datapathCollector exports the datapath's per-CPU counters, read from the maps at scrape time.
type datapathCollector struct {
	dp datapath.Gateway
	// names gives each VIP id and backend id its labels; set by the daemon after each apply.
	mu       sync.Mutex
	services map[datapath.Frontend]string

	vipPackets, vipBytes, vipFlows             *prometheus.Desc
	backendPackets, backendBytes, backendFlows *prometheus.Desc
	reasons, flows, scrapeErrors               *prometheus.Desc
}

func newDatapathCollector(dp datapath.Gateway) *datapathCollector {
	vip := []string{"service", "vip", "port", "protocol"}
	be := []string{"backend", "port"}
	return &datapathCollector{
		dp:             dp,
		services:       map[datapath.Frontend]string{},
		vipPackets:     prometheus.NewDesc("xlb_vip_packets_total", "Client packets to a VIP frontend forwarded to a backend.", vip, nil),
		vipBytes:       prometheus.NewDesc("xlb_vip_bytes_total", "Bytes of those packets (Ethernet frames).", vip, nil),
		vipFlows:       prometheus.NewDesc("xlb_vip_new_flows_total", "New flows (TCP SYNs, first UDP datagrams) to a VIP frontend.", vip, nil),
		backendPackets: prometheus.NewDesc("xlb_backend_packets_total", "Packets sent to a backend.", be, nil),
		backendBytes:   prometheus.NewDesc("xlb_backend_bytes_total", "Bytes sent to a backend.", be, nil),
		backendFlows:   prometheus.NewDesc("xlb_backend_new_flows_total", "New flows sent to a backend.", be, nil),
		reasons:        prometheus.NewDesc("xlb_datapath_packets_total", "Packets by verdict reason (pass_*, drop_*, fwd_*) and datapath event.", []string{"reason"}, nil),
		flows:          prometheus.NewDesc("xlb_conntrack_entries", "Conntrack entries (forward and reverse; expired ones until reused).", nil, nil),
		scrapeErrors:   prometheus.NewDesc("xlb_datapath_scrape_errors", "Datapath maps that could not be read during this scrape.", nil, nil),
	}
}

// setServices records which service each frontend belongs to (for the service label).
func (c *datapathCollector) setServices(m map[datapath.Frontend]string) {
	c.mu.Lock()
	c.services = m
	c.mu.Unlock()
}

func (c *datapathCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.vipPackets, c.vipBytes, c.vipFlows, c.backendPackets,
		c.backendBytes, c.backendFlows, c.reasons, c.flows, c.scrapeErrors} {
		ch <- d
	}
}

func (c *datapathCollector) Collect(ch chan<- prometheus.Metric) {
	errs := 0
	c.mu.Lock()
	services := c.services
	c.mu.Unlock()
	if vips, err := c.dp.VIPs(); err == nil {
		for f, cfg := range vips {
			t, err := c.dp.VIPTraffic(cfg.ID)
			if err != nil {
				errs++
				continue
			}
			l := []string{services[f], f.Addr.String(), strconv.Itoa(int(f.Port)), f.Proto.String()}
			ch <- prometheus.MustNewConstMetric(c.vipPackets, prometheus.CounterValue, float64(t.Packets), l...)
			ch <- prometheus.MustNewConstMetric(c.vipBytes, prometheus.CounterValue, float64(t.Bytes), l...)
			ch <- prometheus.MustNewConstMetric(c.vipFlows, prometheus.CounterValue, float64(t.NewFlows), l...)
		}
	} else {
		errs++
	}
	if bes, err := c.dp.Backends(); err == nil {
		for id, b := range bes {
			t, err := c.dp.BackendTraffic(id)
			if err != nil {
				errs++
				continue
			}
			l := []string{b.Addr.String(), strconv.Itoa(int(b.Port))}
			ch <- prometheus.MustNewConstMetric(c.backendPackets, prometheus.CounterValue, float64(t.Packets), l...)
			ch <- prometheus.MustNewConstMetric(c.backendBytes, prometheus.CounterValue, float64(t.Bytes), l...)
			ch <- prometheus.MustNewConstMetric(c.backendFlows, prometheus.CounterValue, float64(t.NewFlows), l...)
		}
	} else {
		errs++
	}
	if rs, err := c.dp.Reasons(); err == nil {
		for r, n := range rs {
			ch <- prometheus.MustNewConstMetric(c.reasons, prometheus.CounterValue, float64(n), r)
		}
	} else {
		errs++
	}
	if n, err := c.dp.FlowCount(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.flows, prometheus.GaugeValue, float64(n))
	} else {
		errs++
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.GaugeValue, float64(errs))
}

var _ prometheus.Collector = (*datapathCollector)(nil)

// newMetrics creates the gateway's metrics and their registry (the datapath's counters, the
// reconciles, the reloads, the health verdicts, the Go runtime and the process).
func (g *Gateway) newMetrics() {
	g.coll = newDatapathCollector(g.dp)
	g.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xlb_reconciles_total",
		Help: "Reconciliations of the datapath, by result (ok, error)."}, []string{"result"})
	g.reconcileTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xlb_reconcile_duration_seconds",
		Help: "Time to plan and apply the desired state.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)})
	g.configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xlb_config_reloads_total",
		Help: "SIGHUP reloads, by result (applied, rejected)."}, []string{"result"})
	g.servicesInvalid = prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_services_invalid",
		Help: "Configured services left out because they are invalid or conflict with another."})
	g.serving = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "xlb_frontend_serving_backends",
		Help: "Backends taking new flows per frontend; 0 means the VIP:port is down."}, []string{"service", "frontend"})
	g.reg = prometheus.NewRegistry()
	g.reg.MustRegister(g.coll, g.reconciles, g.reconcileTime, g.configReloads, g.servicesInvalid, g.serving,
		&healthCollector{g: g}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// registerStarted adds the metrics of what Run started: Kubernetes mode and the BGP speaker.
func (g *Gateway) registerStarted() {
	if g.kube != nil {
		g.reg.MustRegister(kubeCollector{g})
	}
	if g.speaker != nil {
		g.reg.MustRegister(speaker.NewCollector(g.speaker))
	}
}
