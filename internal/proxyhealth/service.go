// SPDX-License-Identifier: Apache-2.0
package proxyhealth

import (
	"fmt"
	"net/http"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

// ServiceHandler answers svc's health check as kube-proxy's per-Service server does, on any
// path and method: 200 when the node has at least one ready endpoint of svc and the proxy is
// healthy, else 503 (node eligibility does not matter here), with headers Content-Type:
// application/json, X-Content-Type-Options: nosniff and X-Load-Balancing-Endpoint-Weight: the
// endpoint count, and the tab-indented JSON body kube-proxy writes.
func (s *Server) ServiceHandler(svc types.NamespacedName) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		count, healthy := s.endpoints[svc], s.healthy
		s.mu.Unlock()
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		if count != 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, ServiceBody(svc, count, healthy))
	})
}

// ServiceBody returns the body of a per-Service health answer, byte for byte as kube-proxy
// writes it (a dedented template: tabs, no trailing newline).
func ServiceBody(svc types.NamespacedName, localEndpoints int, proxyHealthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}",
		svc.Namespace, svc.Name, localEndpoints, proxyHealthy)
}
