// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
)

// warmup holds back, for datapath.backendWarmup, the backends that newly appear in a service
// that is already serving: they get no new flows (Draining: their reverse NAT entries are
// written) until every gateway has had time to learn them. Otherwise one gateway could send a
// new backend flows while another gateway, on the path of the backend's replies, would not
// reverse-NAT them yet. Loop goroutine only.
type warmup struct {
	// firstSeen: backend endpoint → when the daemon first saw it in the model; endpoints that
	// left the model are forgotten.
	firstSeen map[netip.AddrPort]time.Time
}

// warmupOf returns the configured warm-up: 0 for the default, negative for none.
func warmupOf(c config.Datapath) time.Duration {
	switch {
	case c.BackendWarmup < 0:
		return 0
	case c.BackendWarmup == 0:
		return config.DefaultBackendWarmup
	}
	return c.BackendWarmup
}

// apply returns services with the backends still warming up made Draining, and when the first
// of them is due (the zero Time when none waits). known are the endpoints the datapath serves
// (they never wait); a service none of whose backends is known (new, or every backend was out)
// does not wait either: there is no traffic yet to protect, and waiting would only delay it.
func (w *warmup) apply(services []lb.Service, known map[netip.AddrPort]bool, wait time.Duration, now time.Time) ([]lb.Service, time.Time) {
	// The first model's backends are the daemon's starting point, not newcomers: they were
	// configured before it started (or are adopted from the pins), and every gateway starts
	// from the same configuration.
	start := now
	if w.firstSeen == nil {
		w.firstSeen = map[netip.AddrPort]time.Time{}
		start = now.Add(-wait)
	}
	seen := map[netip.AddrPort]bool{}
	var due time.Time
	out := services
	copied := false
	// ownBackends: the services of out whose Backends slice is a copy (safe to change).
	ownBackends := map[int]bool{}
	for i, s := range services {
		serving := false
		for _, b := range s.Backends {
			for _, e := range s.Endpoints(b) {
				seen[e] = true
				if _, ok := w.firstSeen[e]; !ok {
					w.firstSeen[e] = start
				}
				serving = serving || known[e]
			}
		}
		if !serving || wait <= 0 {
			continue
		}
		for j, b := range s.Backends {
			if b.State != lb.Active || b.Weight == 0 {
				continue
			}
			eps := s.Endpoints(b)
			var first time.Time
			old := false
			for _, e := range eps {
				old = old || known[e]
				if t := w.firstSeen[e]; first.IsZero() || t.Before(first) {
					first = t
				}
			}
			ready := first.Add(wait)
			if old || !now.Before(ready) {
				continue
			}
			if !copied {
				out = append([]lb.Service(nil), services...)
				copied = true
			}
			if !ownBackends[i] {
				out[i].Backends = append([]lb.Backend(nil), services[i].Backends...)
				ownBackends[i] = true
			}
			out[i].Backends[j].State = lb.Draining
			if due.IsZero() || ready.Before(due) {
				due = ready
			}
		}
	}
	for e := range w.firstSeen {
		if !seen[e] {
			delete(w.firstSeen, e)
		}
	}
	return out, due
}
