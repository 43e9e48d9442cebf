// SPDX-License-Identifier: Apache-2.0
package speaker

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Speaker's state to Prometheus, read at scrape time:
//
//	xlb_bgp_session_up{peer}            1 if the session is established, else 0
//	xlb_bgp_announced_prefixes          routes announced (in the speaker's RIB)
//	xlb_bgp_updates_sent_total{peer}    UPDATE messages sent to the peer since it was added
//	xlb_bgp_advertised_prefixes{peer}   prefixes advertised to the peer now
//	xlb_bfd_session_up{peer}            1 if the peer's BFD session is up, else 0 (peers with BFD)
//	xlb_bfd_transitions_total{peer}     the BFD session's transitions into and out of up
type Collector struct {
	s                  *Speaker
	up, announced, upd *prometheus.Desc
	advertised         *prometheus.Desc
	bfdUp, bfdTrans    *prometheus.Desc
}

// NewCollector returns a collector for s; register it with a prometheus.Registerer.
func NewCollector(s *Speaker) *Collector {
	return &Collector{
		s: s,
		up: prometheus.NewDesc("xlb_bgp_session_up",
			"1 if the BGP session to the peer is established.", []string{"peer"}, nil),
		announced: prometheus.NewDesc("xlb_bgp_announced_prefixes",
			"Prefixes the speaker announces.", nil, nil),
		upd: prometheus.NewDesc("xlb_bgp_updates_sent_total",
			"BGP UPDATE messages sent to the peer since it was added.", []string{"peer"}, nil),
		advertised: prometheus.NewDesc("xlb_bgp_advertised_prefixes",
			"Prefixes advertised to the peer now.", []string{"peer"}, nil),
		bfdUp: prometheus.NewDesc("xlb_bfd_session_up",
			"1 if the BFD session to the peer is up (peers with BFD only).", []string{"peer"}, nil),
		bfdTrans: prometheus.NewDesc("xlb_bfd_transitions_total",
			"Transitions of the BFD session to the peer into and out of up.", []string{"peer"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.announced
	ch <- c.upd
	ch <- c.advertised
	ch <- c.bfdUp
	ch <- c.bfdTrans
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.announced, prometheus.GaugeValue, float64(len(c.s.Routes())))
	for _, p := range c.s.Peers() {
		up := 0.0
		if p.Up {
			up = 1
		}
		peer := p.Address.String()
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, peer)
		ch <- prometheus.MustNewConstMetric(c.upd, prometheus.CounterValue, float64(p.UpdatesSent), peer)
		ch <- prometheus.MustNewConstMetric(c.advertised, prometheus.GaugeValue, float64(p.Advertised), peer)
		if p.BFD != "" {
			bfdUp := 0.0
			if p.BFD == "up" {
				bfdUp = 1
			}
			ch <- prometheus.MustNewConstMetric(c.bfdUp, prometheus.GaugeValue, bfdUp, peer)
			ch <- prometheus.MustNewConstMetric(c.bfdTrans, prometheus.CounterValue, float64(p.BFDTransitions), peer)
		}
	}
}
