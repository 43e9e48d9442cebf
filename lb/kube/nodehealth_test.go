// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/xlb-dev/xlb/internal/proxyhealth"
)

var _ NodeHealth = (*NodeProber)(nil)

// labNode is a node played on a loopback address: kube-proxy's node server and one Service's
// health check server, on ports shared by every labNode of a test.
type labNode struct {
	name  string
	addr  netip.Addr
	proxy *proxyhealth.Server
	// stop stops the servers (the ports then refuse connections).
	stop context.CancelFunc
}

// startNodes starts n nodes on 127.0.0.1, 127.0.0.2, ..., all serving kube-proxy's node
// server on one port and svc's health check on another, and returns them with the two ports.
// Everything stops when the test ends.
func startNodes(t *testing.T, n int, svc types.NamespacedName) ([]*labNode, uint16, uint16) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		nodes, proxyPort, svcPort, err := tryStartNodes(t, n, svc)
		if err == nil {
			return nodes, proxyPort, svcPort
		}
		t.Logf("ports taken on another address, retrying: %v", err)
	}
	t.Fatal("no free pair of ports on every loopback address")
	return nil, 0, 0
}

func tryStartNodes(t *testing.T, n int, svc types.NamespacedName) ([]*labNode, uint16, uint16, error) {
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	var ports [2]uint16
	for i := range n {
		addr := netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})
		for j := range ports {
			l, err := net.Listen("tcp", netip.AddrPortFrom(addr, ports[j]).String())
			if err != nil {
				closeAll()
				return nil, 0, 0, err
			}
			listeners = append(listeners, l)
			if i == 0 {
				ports[j] = uint16(l.Addr().(*net.TCPAddr).Port)
			}
		}
	}
	var nodes []*labNode
	var wg sync.WaitGroup
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		nd := &labNode{
			name:  fmt.Sprintf("node-%d", i),
			addr:  netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}),
			proxy: proxyhealth.New(proxyhealth.Options{}),
			stop:  cancel,
		}
		nd.proxy.SetLocalEndpoints(svc, 1)
		wg.Go(func() { _ = nd.proxy.ServeNode(ctx, listeners[2*i]) })
		wg.Go(func() { _ = nd.proxy.ServeService(ctx, svc, listeners[2*i+1]) })
		nodes = append(nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.stop()
		}
		wg.Wait()
	})
	return nodes, ports[0], ports[1], nil
}

// recorder collects NodeHealthChanges.
type recorder struct {
	mu      sync.Mutex
	changes []NodeHealthChange
}

func (r *recorder) add(c NodeHealthChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

// saw reports whether a change matching node, service and healthy was recorded.
func (r *recorder) saw(node string, svc types.NamespacedName, healthy bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.changes {
		if c.Node == node && c.Service == svc && c.Healthy == healthy && c.Reason != "" {
			return true
		}
	}
	return false
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNodeProber(t *testing.T) {
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	other := types.NamespacedName{Namespace: "shop", Name: "other"}
	nodes, proxyPort, svcPort := startNodes(t, 3, web)
	var rec recorder
	p := NewNodeProber(NodeProberOptions{
		ProxyHealthPort: proxyPort,
		Interval:        50 * time.Millisecond,
		Timeout:         200 * time.Millisecond,
		Rise:            1,
		Fall:            2,
		MaxConcurrent:   4,
		OnChange:        rec.add,
		Logger:          slog.New(slog.DiscardHandler),
	})
	// Node 2's health check answers nothing.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentPort := uint16(silent.Addr().(*net.TCPAddr).Port)

	targets := []NodeTarget{{Name: nodes[0].name, Addr: nodes[0].addr}, {Name: nodes[1].name, Addr: nodes[1].addr}, {Name: nodes[2].name, Addr: nodes[2].addr}, {Name: "no-address"}}
	services := []ServiceTarget{{Service: web, Port: svcPort}, {Service: other, Port: silentPort}, {Service: types.NamespacedName{Namespace: "x", Name: "no-port"}}}
	p.SetTargets(targets, services)
	// Not probed yet: healthy.
	for _, nd := range nodes {
		if !p.LocalHealthy(nd.name, web) {
			t.Errorf("%s unhealthy before any probe", nd.name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// The silent check fails on timeouts; the others pass.
	eventually(t, "other's silent health check fails", func() bool { return !p.LocalHealthy(nodes[0].name, other) })
	// Every web check passes once probed. The timeout is the 50 ms interval, and a first
	// probe alone decides: on a loaded machine one may time out, so its next probe (rise 1)
	// is waited for rather than the first verdict asserted.
	eventually(t, "web's checks pass on every node", func() bool {
		for _, nd := range nodes {
			st, ok := p.checker.Status(nodeCheck{node: nd.name, service: web}.key())
			if !ok || st.Probes == 0 || !p.LocalHealthy(nd.name, web) {
				return false
			}
		}
		return true
	})
	if !p.LocalHealthy("unknown-node", web) || !p.LocalHealthy(nodes[0].name, types.NamespacedName{Namespace: "x", Name: "no-port"}) {
		t.Errorf("unprobed node or Service unhealthy")
	}

	// Flips, each seen by LocalHealthy and reported to OnChange.
	nodes[0].proxy.SetLocalEndpoints(web, 0) // the per-Service check answers 503
	nodes[1].proxy.SetEligible(false)        // /healthz answers 503
	nodes[2].stop()                          // connections refused
	eventually(t, "node-0 fails for web", func() bool { return !p.LocalHealthy(nodes[0].name, web) })
	eventually(t, "node-1 fails", func() bool { return !p.LocalHealthy(nodes[1].name, web) && !p.LocalHealthy(nodes[1].name, other) })
	eventually(t, "node-2 fails", func() bool { return !p.LocalHealthy(nodes[2].name, web) })
	eventually(t, "the changes are reported", func() bool {
		return rec.saw(nodes[0].name, web, false) && rec.saw(nodes[1].name, types.NamespacedName{}, false) &&
			rec.saw(nodes[2].name, types.NamespacedName{}, false) && rec.saw(nodes[2].name, web, false)
	})

	// The same targets again keep the verdicts (no reset to unknown, which would pass).
	p.SetTargets(targets, services)
	if p.LocalHealthy(nodes[0].name, web) || p.LocalHealthy(nodes[1].name, web) {
		t.Errorf("SetTargets with the same targets reset verdicts")
	}

	// Recovery with rise 1.
	nodes[0].proxy.SetLocalEndpoints(web, 2)
	nodes[1].proxy.SetEligible(true)
	eventually(t, "node-0 and node-1 pass again", func() bool {
		return p.LocalHealthy(nodes[0].name, web) && p.LocalHealthy(nodes[1].name, web)
	})
	eventually(t, "the recoveries are reported", func() bool {
		return rec.saw(nodes[0].name, web, true) && rec.saw(nodes[1].name, types.NamespacedName{}, true)
	})

	// A Service that is no longer a target passes again; so does a node.
	p.SetTargets(targets[:2], services[:1])
	if !p.LocalHealthy(nodes[0].name, other) || !p.LocalHealthy(nodes[2].name, web) {
		t.Errorf("checks of removed targets still fail")
	}
}

func TestNodeProberSkipProxyHealth(t *testing.T) {
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	nodes, proxyPort, svcPort := startNodes(t, 1, web)
	nodes[0].proxy.SetEligible(false) // /healthz fails, but is not probed
	p := NewNodeProber(NodeProberOptions{ProxyHealthPort: proxyPort, SkipProxyHealth: true, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	p.SetTargets([]NodeTarget{{Name: nodes[0].name, Addr: nodes[0].addr}}, []ServiceTarget{{Service: web, Port: svcPort}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// Healthy once the Service check has run (a probe that timed out, 20 ms on a loaded
	// machine, is followed by one that passes); a probed /healthz would keep it unhealthy.
	eventually(t, "healthy with the Service check run, only the skipped /healthz failing", func() bool {
		st, ok := p.checker.Status(nodeCheck{node: nodes[0].name, service: web}.key())
		return ok && st.Probes >= 2 && p.LocalHealthy(nodes[0].name, web)
	})
	if _, ok := p.checker.Status(nodeCheck{node: nodes[0].name}.key()); ok {
		t.Errorf("/healthz is probed although skipped")
	}
}

func TestNodeProberOptionDefaults(t *testing.T) {
	p := NewNodeProber(NodeProberOptions{Interval: time.Millisecond, Timeout: time.Hour, Rise: -1})
	if p.proxyPort != DefaultProxyHealthPort || p.check.Interval != 10*time.Millisecond || p.check.Timeout != p.check.Interval ||
		p.check.Rise != DefaultNodeRise || p.check.Fall != DefaultNodeFall {
		t.Errorf("options %+v, port %d", p.check, p.proxyPort)
	}
	if err := p.check.Validate(); err != nil {
		t.Errorf("check: %v", err)
	}
}
