// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

func TestWarmup(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("198.18.1.3")
	svc := func(addrs ...netip.Addr) lb.Service {
		s := lb.Service{Name: "web", Ports: []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}}}
		for _, x := range addrs {
			s.Backends = append(s.Backends, lb.Backend{Addr: x, Weight: 1})
		}
		return s
	}
	ep := func(x netip.Addr) netip.AddrPort { return netip.AddrPortFrom(x, 8080) }
	states := func(s lb.Service) string {
		out := ""
		for _, b := range s.Backends {
			out += b.State.String()[:1]
		}
		return out
	}
	var w warmup
	t0 := time.Unix(1000, 0)
	const wait = 500 * time.Millisecond

	// The first model's backends never wait, even when some are known and others not (a
	// daemon starting while the health checks' first verdicts come in).
	out, due := w.apply([]lb.Service{svc(a, b)}, map[netip.AddrPort]bool{ep(a): true}, wait, t0)
	if states(out[0]) != "aa" || !due.IsZero() {
		t.Fatalf("first model: %s due %v", states(out[0]), due)
	}
	w = warmup{}
	w.apply(nil, nil, wait, t0)
	// A new service: nothing known, nothing waits.
	in := []lb.Service{svc(a, b)}
	out, due = w.apply(in, nil, wait, t0)
	if states(out[0]) != "aa" || !due.IsZero() {
		t.Fatalf("new service: %s due %v, want aa and nothing due", states(out[0]), due)
	}
	known := map[netip.AddrPort]bool{ep(a): true, ep(b): true}
	// c joins a serving service: it drains until t0+100ms+wait; a and b serve.
	in = []lb.Service{svc(a, b, c)}
	out, due = w.apply(in, known, wait, t0.Add(100*time.Millisecond))
	if states(out[0]) != "aad" || !due.Equal(t0.Add(100*time.Millisecond+wait)) {
		t.Fatalf("joining: %s due %v", states(out[0]), due)
	}
	if in[0].Backends[2].State != lb.Active {
		t.Fatal("apply changed its input")
	}
	// Still waiting just before, serving at the due time.
	if out, _ = w.apply(in, known, wait, t0.Add(599*time.Millisecond)); states(out[0]) != "aad" {
		t.Errorf("before due: %s", states(out[0]))
	}
	if out, due = w.apply(in, known, wait, t0.Add(600*time.Millisecond)); states(out[0]) != "aaa" || !due.IsZero() {
		t.Errorf("at due: %s due %v", states(out[0]), due)
	}
	// c leaves and comes back: it waits again (its reverse entry went with it).
	w.apply([]lb.Service{svc(a, b)}, known, wait, t0.Add(time.Second))
	if out, _ = w.apply(in, known, wait, t0.Add(1100*time.Millisecond)); states(out[0]) != "aad" {
		t.Errorf("back after leaving: %s", states(out[0]))
	}
	// A backend the datapath serves never waits (a restarted daemon adopting its pins).
	known[ep(c)] = true
	if out, _ = w.apply(in, known, wait, t0.Add(1100*time.Millisecond)); states(out[0]) != "aaa" {
		t.Errorf("known: %s", states(out[0]))
	}
	// No warm-up configured.
	delete(known, ep(c))
	if out, _ = w.apply(in, known, 0, t0.Add(1100*time.Millisecond)); states(out[0]) != "aaa" {
		t.Errorf("off: %s", states(out[0]))
	}
}
