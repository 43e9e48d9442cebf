// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

func svc(name, vip string, port uint16, backends ...string) Service {
	s := Service{Name: name, VIPs: []netip.Addr{netip.MustParseAddr(vip)},
		Ports: []Port{{Name: "p", Port: port, Protocol: datapath.TCP, TargetPort: 8080}}}
	for _, b := range backends {
		s.Backends = append(s.Backends, Backend{Addr: netip.MustParseAddr(b), Weight: 1})
	}
	return s
}

func TestPlanFrontendsAndReverse(t *testing.T) {
	a := svc("a", "198.18.100.1", 80, "198.18.1.10", "198.18.1.11", "2001:db8:1::10")
	a.VIPs = append(a.VIPs, netip.MustParseAddr("2001:db8:100::1"))
	a.SourceRanges = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")}
	a.Backends[1].State = Draining
	b := svc("b", "198.18.100.2", 0, "198.18.1.10")
	b.Ports[0].TargetPort = 0
	c := svc("c", "198.18.100.3", 81, "198.18.1.10") // same endpoint as a: ambiguous
	d, errs := Plan([]Service{c, b, a}, PlanOptions{Seed: 1, TableSize: 251})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	f4 := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}]
	if f4 == nil || len(f4.Backends) != 2 || f4.Serving != 1 || len(f4.SourceRanges) != 1 {
		t.Fatalf("IPv4 frontend of a: %+v", f4)
	}
	for _, idx := range f4.Table {
		if f4.Backends[idx].Key.Addr() != netip.MustParseAddr("198.18.1.10") {
			t.Fatal("a draining backend got table slots")
		}
	}
	f6 := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("2001:db8:100::1"), Port: 80, Proto: datapath.TCP}]
	if f6 == nil || len(f6.Backends) != 1 || f6.Backends[0].Key.String() != "[2001:db8:1::10]:8080" {
		t.Fatalf("IPv6 frontend of a uses IPv6 backends only: %+v", f6)
	}
	fb := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.2"), Port: 0, Proto: datapath.TCP}]
	if fb == nil || fb.Backends[0].Key.Port() != 0 {
		t.Fatalf("all-ports frontend keeps the client's port: %+v", fb)
	}
	if r := d.Reverse[datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}]; !r.Ambiguous {
		t.Errorf("endpoint behind a and c should be ambiguous: %+v", r)
	}
	if r := d.Reverse[datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.11"), Port: 8080, Proto: datapath.TCP}]; r.Ambiguous || r.Frontend.Port != 80 {
		t.Errorf("draining endpoint keeps its reverse entry: %+v", r)
	}
	// 198.18.1.10 serves b on every port and a, c on 8080: the datapath would match a reply from
	// :8080 to b's clients with the :8080 entry, so both entries are ambiguous.
	if r := d.Reverse[datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 0, Proto: datapath.TCP}]; !r.Ambiguous {
		t.Errorf("all-ports endpoint sharing an address with a fixed-port one: %+v", r)
	}
	e, _ := Plan([]Service{b}, PlanOptions{Seed: 1, TableSize: 251})
	if r := e.Reverse[datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 0, Proto: datapath.TCP}]; r.Ambiguous || r.Frontend.Addr != netip.MustParseAddr("198.18.100.2") {
		t.Errorf("all-ports endpoint alone: %+v", r)
	}
}

// TestPlanErrorsAreContained: a bad or conflicting service is reported by name and left out;
// the others are planned.
func TestPlanErrorsAreContained(t *testing.T) {
	good := svc("good", "198.18.100.1", 80, "198.18.1.10")
	clash := svc("z-clash", "198.18.100.1", 80, "198.18.1.11")
	sctp := svc("sctp", "198.18.100.2", 80)
	sctp.Ports[0].Protocol = 132
	v6only := svc("v6ranges", "198.18.100.3", 80, "198.18.1.10")
	v6only.SourceRanges = []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
	dup := svc("good", "198.18.100.4", 80)
	d, errs := Plan([]Service{clash, good, sctp, v6only, dup}, PlanOptions{Seed: 1})
	want := []string{
		"service good: defined twice",
		"service sctp: port 80: protocol 132 is not supported",
		"service v6ranges: VIP 198.18.100.3: no source range of its family",
		"service z-clash: frontend 198.18.100.1:80/TCP already belongs to service good",
	}
	if len(errs) != len(want) {
		t.Fatalf("errors: %v", errs)
	}
	for i, w := range want {
		if !strings.Contains(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want it to contain %q", i, errs[i], w)
		}
	}
	if len(d.Frontends) != 1 || d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}].Service != "good" {
		t.Fatalf("frontends: %v", d.Frontends)
	}
}

// TestPlanIsDeterministic: the same services in any order give the same tables.
func TestPlanIsDeterministic(t *testing.T) {
	a := svc("a", "198.18.100.1", 80, "198.18.1.10", "198.18.1.11", "198.18.1.12")
	b := a
	b.Backends = []Backend{a.Backends[2], a.Backends[0], a.Backends[1]}
	d1, _ := Plan([]Service{a}, PlanOptions{Seed: 9})
	d2, _ := Plan([]Service{b}, PlanOptions{Seed: 9})
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}
	t1, t2 := d1.Frontends[f], d2.Frontends[f]
	for i := range t1.Table {
		if t1.Backends[t1.Table[i]].Key != t2.Backends[t2.Table[i]].Key {
			t.Fatalf("slot %d differs with the backends in another order", i)
		}
	}
}

func TestValidate(t *testing.T) {
	for name, c := range map[string]struct {
		mut  func(*Service)
		want string
	}{
		"no name":       {func(s *Service) { s.Name = "" }, "service has no name"},
		"no vip":        {func(s *Service) { s.VIPs = nil }, "no VIPs"},
		"bad vip":       {func(s *Service) { s.VIPs = []netip.Addr{netip.MustParseAddr("0.0.0.0")} }, "not a usable unicast address"},
		"dup vip":       {func(s *Service) { s.VIPs = append(s.VIPs, s.VIPs[0]) }, "listed twice"},
		"no ports":      {func(s *Service) { s.Ports = nil }, "no ports"},
		"dup port":      {func(s *Service) { s.Ports = append(s.Ports, Port{Name: "q", Port: 80, Protocol: datapath.TCP}) }, "port 80/TCP listed twice"},
		"dup port name": {func(s *Service) { s.Ports = append(s.Ports, Port{Name: "p", Port: 81, Protocol: datapath.TCP}) }, `port name "p" used twice`},
		"all ports tp":  {func(s *Service) { s.Ports[0].Port = 0 }, "all-ports port (0) cannot have targetPort"},
		"dup backend":   {func(s *Service) { s.Backends = append(s.Backends, s.Backends[0]) }, "backend 198.18.1.10 listed twice"},
		"named tp":      {func(s *Service) { s.Backends[0].TargetPorts = map[string]uint16{"x": 1} }, `target port for unknown port "x"`},
	} {
		s := svc("s", "198.18.100.1", 80, "198.18.1.10")
		c.mut(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// TestPlanReverseCandidates: an ambiguous endpoint lists the frontends it serves (sorted, those
// reaching it through an all-ports entry included) for the datapath's Maglev re-derivation, and
// none when there are more than MaxReverseCandidates.
func TestPlanReverseCandidates(t *testing.T) {
	fe := func(a string, port uint16) datapath.Frontend {
		return datapath.Frontend{Addr: netip.MustParseAddr(a), Port: port, Proto: datapath.TCP}
	}
	ep := func(a string, port uint16) datapath.Endpoint {
		return datapath.Endpoint{Addr: netip.MustParseAddr(a), Port: port, Proto: datapath.TCP}
	}
	a := svc("a", "198.18.100.1", 80, "198.18.1.10", "198.18.1.11")
	c := svc("c", "198.18.100.3", 81, "198.18.1.10")
	d, errs := Plan([]Service{c, a}, PlanOptions{Seed: 1, TableSize: 251})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	want := []datapath.Frontend{fe("198.18.100.1", 80), fe("198.18.100.3", 81)}
	if r := d.Reverse[ep("198.18.1.10", 8080)]; !r.Ambiguous || !slices.Equal(r.Candidates, want) {
		t.Errorf("endpoint behind a and c: %+v, want candidates %v", r, want)
	}
	if r := d.Reverse[ep("198.18.1.11", 8080)]; r.Ambiguous || r.Candidates != nil || r.Frontend != fe("198.18.100.1", 80) {
		t.Errorf("endpoint behind a only: %+v", r)
	}

	// An all-ports frontend on the same address: a reply from :8080 may belong to it too.
	b := svc("b", "198.18.100.2", 0, "198.18.1.10")
	b.Ports[0].TargetPort = 0
	d, _ = Plan([]Service{c, b, a}, PlanOptions{Seed: 1, TableSize: 251})
	want = []datapath.Frontend{fe("198.18.100.1", 80), fe("198.18.100.2", 0), fe("198.18.100.3", 81)}
	if r := d.Reverse[ep("198.18.1.10", 8080)]; !r.Ambiguous || !slices.Equal(r.Candidates, want) {
		t.Errorf("endpoint behind a, c and all-ports b: %+v, want candidates %v", r, want)
	}
	if r := d.Reverse[ep("198.18.1.10", 0)]; !r.Ambiguous || !slices.Equal(r.Candidates, []datapath.Frontend{fe("198.18.100.2", 0)}) {
		t.Errorf("all-ports entry shadowed by a fixed-port one: %+v", r)
	}

	// Five frontends on one endpoint: too many for the datapath, conntrack only.
	var many []Service
	for i := range datapath.MaxReverseCandidates + 1 {
		many = append(many, svc(fmt.Sprintf("s%d", i), fmt.Sprintf("198.18.100.%d", i+1), 80, "198.18.1.10"))
	}
	d, _ = Plan(many, PlanOptions{Seed: 1, TableSize: 251})
	if r := d.Reverse[ep("198.18.1.10", 8080)]; !r.Ambiguous || r.Candidates != nil {
		t.Errorf("endpoint behind %d frontends: %+v, want ambiguous without candidates", len(many), r)
	}
	d, _ = Plan(many[:datapath.MaxReverseCandidates], PlanOptions{Seed: 1, TableSize: 251})
	if r := d.Reverse[ep("198.18.1.10", 8080)]; !r.Ambiguous || len(r.Candidates) != datapath.MaxReverseCandidates {
		t.Errorf("endpoint behind %d frontends: %+v, want them all as candidates", datapath.MaxReverseCandidates, r)
	}
}
