// SPDX-License-Identifier: Apache-2.0
package proxyhealth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultNodePort is the port of kube-proxy's node health server (--healthz-bind-address).
const DefaultNodePort = 10256

// shutdownTimeout bounds how long a server waits for running requests when its context ends.
const shutdownTimeout = time.Second

// Options configure a [Server]. The zero value plays an IPv4 node that is healthy and eligible.
type Options struct {
	// Families are the IP families the proxy runs for, one entry each in the node server's
	// "status"; nil means IPv4 only.
	Families []corev1.IPFamily
	// Now is the clock of the "lastUpdated" and "currentTime" fields; nil means time.Now.
	Now func() time.Time
}

// Server is one node's kube-proxy health servers. Its setters and handlers may be used from
// any goroutine.
type Server struct {
	families []corev1.IPFamily
	now      func() time.Time

	mu sync.Mutex
	// healthy says whether the proxy is in sync (kube-proxy: no update queued for longer
	// than its healthTimeout).
	healthy bool
	// eligible says whether the node may take load-balancer traffic (not being deleted, not
	// tainted ToBeDeletedByClusterAutoscaler).
	eligible bool
	// lastUpdated is when the proxy last became or was reported in sync.
	lastUpdated time.Time
	// endpoints: Service → its number of ready endpoints on this node.
	endpoints map[types.NamespacedName]int
}

// New returns a Server that is healthy and eligible and has no local endpoints.
func New(opts Options) *Server {
	s := &Server{
		families:  opts.Families,
		now:       opts.Now,
		healthy:   true,
		eligible:  true,
		endpoints: map[types.NamespacedName]int{},
	}
	if s.families == nil {
		s.families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.lastUpdated = s.now()
	return s
}

// SetHealthy says whether the proxy is healthy (its rules in sync). Setting it true also
// records a sync, as kube-proxy's Updated does.
func (s *Server) SetHealthy(healthy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthy = healthy
	if healthy {
		s.lastUpdated = s.now()
	}
}

// SetEligible says whether the node is eligible for load-balancer traffic: false plays a Node
// that is being deleted or carries the ToBeDeletedByClusterAutoscaler taint.
func (s *Server) SetEligible(eligible bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eligible = eligible
}

// SetLocalEndpoints sets the number of ready endpoints of svc on this node; a negative n counts
// as 0.
func (s *Server) SetLocalEndpoints(svc types.NamespacedName, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.endpoints, svc)
		return
	}
	s.endpoints[svc] = n
}

// ServeNode serves the node health server (/healthz and /livez) on l until ctx is done, then
// closes l and returns nil; it returns the error of l's Accept if that fails first. The lab
// passes a listener made inside a node's network namespace.
func (s *Server) ServeNode(ctx context.Context, l net.Listener) error {
	return serve(ctx, l, s.NodeHandler())
}

// ServeService serves svc's health check on l (its healthCheckNodePort) until ctx is done, then
// closes l and returns nil; it returns the error of l's Accept if that fails first.
func (s *Server) ServeService(ctx context.Context, svc types.NamespacedName, l net.Listener) error {
	return serve(ctx, l, s.ServiceHandler(svc))
}

// serve serves h on l until ctx is done.
func serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			if srv.Shutdown(sctx) != nil {
				_ = srv.Close()
			}
		case <-done:
		}
	}()
	err := srv.Serve(l)
	close(done)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("proxy health server on %s: %w", l.Addr(), err)
}
