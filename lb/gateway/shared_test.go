// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestWarnSharedEndpoints: file services on the same backend port are each warned about,
// naming the others by kind; a service with its own backend port is not.
func TestWarnSharedEndpoints(t *testing.T) {
	svc := func(name string, port uint16, target uint16) lb.Service {
		return lb.Service{Name: name, VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.1")},
			Ports:    []lb.Port{{Port: port, TargetPort: target, Protocol: datapath.TCP}},
			Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.10"), Weight: 1}}}
	}
	var b bytes.Buffer
	all := []lb.Service{svc("web", 80, 8080), svc("web-alt", 80, 8080), svc("admin", 81, 8080), svc("own", 82, 9090)}
	warnSharedEndpoints(slog.New(slog.NewTextHandler(&b, nil)), all, lb.Forwarding{})
	out := b.String()
	for _, want := range []string{
		"service=web samePort=web-alt otherPorts=admin",
		"service=web-alt samePort=web otherPorts=admin",
		`service=admin samePort="" otherPorts=web,web-alt`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "service=own") {
		t.Errorf("a service with its own backend port was warned about:\n%s", out)
	}
	// In the DSR mode a backend whose node serves it translates its own replies: no warning;
	// one served through the gateways (returnPath fallback) still shares.
	b.Reset()
	for i := range all {
		all[i].Backends[0].DSR = true
	}
	warnSharedEndpoints(slog.New(slog.NewTextHandler(&b, nil)), all, lb.Forwarding{Mode: datapath.DSR})
	if b.Len() != 0 {
		t.Errorf("DSR backends were warned about:\n%s", b.String())
	}
	all[0].Backends[0].DSR, all[1].Backends[0].DSR = false, false
	warnSharedEndpoints(slog.New(slog.NewTextHandler(&b, nil)), all, lb.Forwarding{Mode: datapath.DSR, Fallback: lb.FallbackReturnPath})
	if out := b.String(); !strings.Contains(out, "service=web samePort=web-alt otherPorts=\"\"") || strings.Contains(out, "service=admin") {
		t.Errorf("with web and web-alt served through the gateways:\n%s", out)
	}
}

// TestWarnSharedEndpointsDSR: in the DSR mode, services sharing the Pod ports of DSR backends
// are not warned about (their nodes translate the replies).
func TestWarnSharedEndpointsDSR(t *testing.T) {
	svc := func(name string, port uint16, dsr bool) lb.Service {
		return lb.Service{Name: name, VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.1")},
			Ports:    []lb.Port{{Port: port, TargetPort: 8080, Protocol: datapath.TCP}},
			Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.10"), Weight: 1, DSR: dsr}}}
	}
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	warnSharedEndpoints(log, []lb.Service{svc("web", 80, true), svc("web-alt", 81, true)}, lb.Forwarding{Mode: datapath.DSR})
	if strings.Contains(b.String(), "shares backend ports") {
		t.Errorf("DSR backends warned about:\n%s", b.String())
	}
	warnSharedEndpoints(log, []lb.Service{svc("web", 80, false), svc("web-alt", 81, false)},
		lb.Forwarding{Mode: datapath.DSR, Fallback: lb.FallbackReturnPath})
	if !strings.Contains(b.String(), "shares backend ports") || !strings.Contains(b.String(), "dsrFallback: returnPath") {
		t.Errorf("return-path backends not warned about:\n%s", b.String())
	}
}
