// SPDX-License-Identifier: Apache-2.0
package proxyhealth

import (
	"encoding/json"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ProxyHealth is the JSON body of the node server, as kube-proxy's type of the same name.
type ProxyHealth struct {
	// LastUpdated is when the proxy last synced; on a 200 answer, the time of the answer.
	LastUpdated time.Time `json:"lastUpdated"`
	// CurrentTime is the time of the answer.
	CurrentTime time.Time `json:"currentTime"`
	// NodeEligible is set by /healthz only.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Healthy says whether every family's proxy is healthy.
	Healthy bool `json:"healthy"`
	// Status is the health of each family's proxy.
	Status map[corev1.IPFamily]ProxierHealth `json:"status,omitempty"`
}

// ProxierHealth is the health of one family's proxy.
type ProxierHealth struct {
	// LastUpdated is when it last synced.
	LastUpdated time.Time `json:"lastUpdated"`
	// Healthy says whether it is in sync.
	Healthy bool `json:"healthy"`
}

// NodeHandler answers as kube-proxy's node server: /healthz is 200 only when the proxy is
// healthy and the node eligible, else 503; /livez is 200 when the proxy is healthy, whatever
// the node's eligibility; both with Content-Type: application/json and X-Content-Type-Options:
// nosniff and a ProxyHealth body. Other paths are 404, as kube-proxy's ServeMux answers.
func (s *Server) NodeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { s.answer(w, true) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { s.answer(w, false) })
	return mux
}

// answer writes a /healthz (eligibility checked) or /livez answer.
func (s *Server) answer(w http.ResponseWriter, checkEligible bool) {
	s.mu.Lock()
	now := s.now()
	health := ProxyHealth{
		LastUpdated: s.lastUpdated,
		CurrentTime: now,
		Healthy:     s.healthy,
		Status:      make(map[corev1.IPFamily]ProxierHealth, len(s.families)),
	}
	for _, f := range s.families {
		health.Status[f] = ProxierHealth{LastUpdated: s.lastUpdated, Healthy: s.healthy}
	}
	eligible := s.eligible
	s.mu.Unlock()

	ok := health.Healthy
	if checkEligible {
		health.NodeEligible = &eligible
		ok = ok && eligible
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		w.WriteHeader(http.StatusOK)
		// kube-proxy reports a "recent" lastUpdated when healthy, for older clients.
		health.LastUpdated = now
	}
	out, _ := json.Marshal(health)
	_, _ = w.Write(out)
}
