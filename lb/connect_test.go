package lb

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

func TestPlanConnect(t *testing.T) {
	a := netip.MustParseAddr
	web := Service{
		Name: "default/web",
		VIPs: []netip.Addr{a("198.18.200.1"), a("2001:db8:200::1")},
		Ports: []Port{
			{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080},
			{Name: "dns", Port: 53, Protocol: datapath.UDP},
		},
		Backends: []Backend{
			{Addr: a("198.18.1.11"), Weight: 1, TargetPorts: map[string]uint16{"http": 9090}},
			{Addr: a("198.18.1.10"), Weight: 1},
			{Addr: a("198.18.1.12"), Weight: 1, State: Draining},
			{Addr: a("198.18.1.13"), Weight: 1, State: Unhealthy},
			{Addr: a("198.18.1.14"), Weight: 0},
			{Addr: a("2001:db8:1::10"), Weight: 1},
		},
	}
	empty := Service{
		Name:  "default/empty",
		VIPs:  []netip.Addr{a("198.18.200.2")},
		Ports: []Port{{Port: 443, Protocol: datapath.TCP}},
	}
	clash := Service{
		Name:     "default/zz-clash",
		VIPs:     []netip.Addr{a("198.18.200.1")},
		Ports:    []Port{{Port: 80, Protocol: datapath.TCP}},
		Backends: []Backend{{Addr: a("198.18.1.99"), Weight: 1}},
	}
	sticky := Service{
		Name: "default/sticky", VIPs: []netip.Addr{a("198.18.200.4")}, Ports: []Port{{Port: 80, Protocol: datapath.TCP}},
		Backends: []Backend{{Addr: a("198.18.1.10"), Weight: 1}}, Affinity: datapath.AffinityClientIP, AffinityTimeout: 30 * time.Second,
	}
	allPorts := Service{Name: "default/all", VIPs: []netip.Addr{a("198.18.200.3")}, Ports: []Port{{Port: 0, Protocol: datapath.TCP}}}
	invalid := Service{Name: "default/bad", Ports: []Port{{Port: 1, Protocol: datapath.TCP}}}

	plan, errs := PlanConnect([]Service{clash, web, empty, sticky, allPorts, invalid})
	ap := netip.MustParseAddrPort
	eps := func(e ...netip.AddrPort) datapath.ConnectFrontend { return datapath.ConnectFrontend{Endpoints: e} }
	want := ConnectPlan{
		{Addr: a("198.18.200.1"), Port: 80, Proto: datapath.TCP}:    eps(ap("198.18.1.10:8080"), ap("198.18.1.11:9090")),
		{Addr: a("198.18.200.1"), Port: 53, Proto: datapath.UDP}:    eps(ap("198.18.1.10:53"), ap("198.18.1.11:53")),
		{Addr: a("2001:db8:200::1"), Port: 80, Proto: datapath.TCP}: eps(ap("[2001:db8:1::10]:8080")),
		{Addr: a("2001:db8:200::1"), Port: 53, Proto: datapath.UDP}: eps(ap("[2001:db8:1::10]:53")),
		{Addr: a("198.18.200.2"), Port: 443, Proto: datapath.TCP}:   eps(),
		{Addr: a("198.18.200.4"), Port: 80, Proto: datapath.TCP}:    {Endpoints: []netip.AddrPort{ap("198.18.1.10:80")}, AffinityTimeout: 30 * time.Second},
	}
	if len(plan) != len(want) {
		t.Errorf("plan has %d frontends, want %d: %v", len(plan), len(want), plan)
	}
	for f, wf := range want {
		got, ok := plan[f]
		if !ok || !got.Equal(wf) {
			t.Errorf("frontend %s: %+v (present %v), want %+v", f, got, ok, wf)
		}
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	joined := strings.Join(msgs, "\n")
	for _, w := range []string{"default/zz-clash: frontend 198.18.200.1:80/TCP already belongs to service default/web", "default/all: all-ports", "default/bad: no VIPs"} {
		if !strings.Contains(joined, w) {
			t.Errorf("errors %q lack %q", joined, w)
		}
	}
	if len(errs) != 3 {
		t.Errorf("%d errors, want 3: %q", len(errs), joined)
	}
}
