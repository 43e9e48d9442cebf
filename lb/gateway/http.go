// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// promLog sends the metrics handler's errors to the daemon's log.
type promLog struct{ log *slog.Logger }

func (l promLog) Println(v ...any) { l.log.Error("metrics", "error", fmt.Sprint(v...)) }

// serveHTTP serves /metrics, /bgp, /healthz and /readyz on addr (or Options.Listener).
func (g *Gateway) serveHTTP(addr string) (*http.Server, error) {
	mux := http.NewServeMux()
	// One failing collector must not cost the whole scrape: serve the rest and log the error.
	mux.Handle("/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: promLog{g.log}}))
	mux.HandleFunc("/bgp", g.serveBGP)
	mux.HandleFunc("/l2", g.serveL2)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.ready.Load() {
			http.Error(w, "not reconciled yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln := g.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("http server", "error", err)
		}
	}()
	return srv, nil
}
