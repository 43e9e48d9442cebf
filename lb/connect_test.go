// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"net/netip"
	"slices"
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

	var in []ConnectService
	for _, s := range []Service{clash, web, empty, sticky, allPorts, invalid} {
		in = append(in, ConnectService{Service: s})
	}
	plan, conflicts, errs := PlanConnect(in)
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
	for _, w := range []string{"default/all: all-ports", "default/bad: no VIPs"} {
		if !strings.Contains(joined, w) {
			t.Errorf("errors %q lack %q", joined, w)
		}
	}
	if len(errs) != 2 {
		t.Errorf("%d errors, want 2: %q", len(errs), joined)
	}
	// Same age: the lower name has the frontend; the other loses that one alone.
	wantConflicts := []Conflict{{Frontend: datapath.Frontend{Addr: a("198.18.200.1"), Port: 80, Proto: datapath.TCP}, Service: "default/zz-clash", Owner: "default/web"}}
	if !slices.Equal(conflicts, wantConflicts) {
		t.Errorf("conflicts %+v, want %+v", conflicts, wantConflicts)
	}
}

// TestPlanConnectOwnership: who has a frontend several services claim. A cluster IP (Owned) is
// its service's alone, on every port, whatever the other's age or name: the kube-dns takeover
// (a Service named to sort first, with the kube-dns cluster IP as an external IP on
// 53/UDP) fails. Other frontends go to the oldest claimant, per frontend: the loser keeps its
// other frontends.
func TestPlanConnectOwnership(t *testing.T) {
	a := netip.MustParseAddr
	ap := netip.MustParseAddrPort
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	svc := func(name string, created time.Time, owned []string, vips []string, backend string, ports ...Port) ConnectService {
		s := ConnectService{Service: Service{Name: name, Ports: ports, Backends: []Backend{{Addr: a(backend), Weight: 1}}}, Created: created}
		for _, v := range vips {
			s.VIPs = append(s.VIPs, a(v))
		}
		for _, v := range owned {
			s.Owned = append(s.Owned, a(v))
		}
		return s
	}
	udp53 := Port{Name: "dns", Port: 53, Protocol: datapath.UDP}
	tcp53 := Port{Name: "dns-tcp", Port: 53, Protocol: datapath.TCP}
	front := func(addr string, port uint16, proto datapath.Protocol) datapath.Frontend {
		return datapath.Frontend{Addr: a(addr), Port: port, Proto: proto}
	}

	t.Run("kube-dns takeover", func(t *testing.T) {
		dns := svc("kube-system/kube-dns", t0, []string{"198.18.96.10"}, []string{"198.18.96.10"}, "198.18.1.53", udp53, tcp53)
		// Younger, older, named to sort first: none of it matters against a cluster IP.
		for _, created := range []time.Time{t0.Add(time.Hour), t0.Add(-time.Hour), {}} {
			evil := svc("aaa-tenant/evil", created, []string{"198.18.96.200"}, []string{"198.18.96.200", "198.18.96.10"}, "198.18.1.66",
				udp53, Port{Name: "x", Port: 5353, Protocol: datapath.UDP})
			plan, conflicts, errs := PlanConnect([]ConnectService{evil, dns})
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			for _, f := range []datapath.Frontend{front("198.18.96.10", 53, datapath.UDP), front("198.18.96.10", 53, datapath.TCP)} {
				if got := plan[f].Endpoints; !slices.Equal(got, []netip.AddrPort{ap("198.18.1.53:53")}) {
					t.Errorf("evil created %v: kube-dns's %s goes to %v, want kube-dns's endpoint", created, f, got)
				}
			}
			// Not even a port kube-dns does not serve: the whole address is kube-dns's.
			if cf, ok := plan[front("198.18.96.10", 5353, datapath.UDP)]; ok {
				t.Errorf("evil has %v on kube-dns's cluster IP", cf)
			}
			// evil's own cluster IP still serves.
			if got := plan[front("198.18.96.200", 53, datapath.UDP)].Endpoints; !slices.Equal(got, []netip.AddrPort{ap("198.18.1.66:53")}) {
				t.Errorf("evil's own cluster IP: %v", got)
			}
			want := []Conflict{
				{Frontend: front("198.18.96.10", 53, datapath.UDP), Service: "aaa-tenant/evil", Owner: "kube-system/kube-dns", OwnedAddress: true},
				{Frontend: front("198.18.96.10", 5353, datapath.UDP), Service: "aaa-tenant/evil", Owner: "kube-system/kube-dns", OwnedAddress: true},
			}
			if !slices.Equal(conflicts, want) {
				t.Errorf("conflicts %+v, want %+v", conflicts, want)
			}
		}
	})

	t.Run("oldest first, per frontend", func(t *testing.T) {
		http := Port{Name: "http", Port: 80, Protocol: datapath.TCP}
		https := Port{Name: "https", Port: 443, Protocol: datapath.TCP}
		// old has 198.18.99.7:80; young claims :80 and :443 there: it keeps :443 and its
		// cluster IP's frontends.
		old := svc("zz/old", t0, []string{"198.18.96.1"}, []string{"198.18.96.1", "198.18.99.7"}, "198.18.1.10", http)
		young := svc("aa/young", t0.Add(time.Second), []string{"198.18.96.2"}, []string{"198.18.96.2", "198.18.99.7"}, "198.18.1.20", http, https)
		// Same age as young, name after it: young has what both claim.
		twin := svc("ab/twin", t0.Add(time.Second), nil, []string{"198.18.99.7"}, "198.18.1.30", https)
		plan, conflicts, errs := PlanConnect([]ConnectService{young, twin, old})
		if len(errs) != 0 {
			t.Fatal(errs)
		}
		for f, ep := range map[datapath.Frontend]string{
			front("198.18.99.7", 80, datapath.TCP):  "198.18.1.10:80",
			front("198.18.99.7", 443, datapath.TCP): "198.18.1.20:443",
			front("198.18.96.1", 80, datapath.TCP):  "198.18.1.10:80",
			front("198.18.96.2", 80, datapath.TCP):  "198.18.1.20:80",
			front("198.18.96.2", 443, datapath.TCP): "198.18.1.20:443",
		} {
			if got := plan[f].Endpoints; !slices.Equal(got, []netip.AddrPort{ap(ep)}) {
				t.Errorf("%s: %v, want %s", f, got, ep)
			}
		}
		if len(plan) != 5 {
			t.Errorf("plan %v: want 5 frontends", plan)
		}
		want := []Conflict{
			{Frontend: front("198.18.99.7", 80, datapath.TCP), Service: "aa/young", Owner: "zz/old"},
			{Frontend: front("198.18.99.7", 443, datapath.TCP), Service: "ab/twin", Owner: "aa/young"},
		}
		if !slices.Equal(conflicts, want) {
			t.Errorf("conflicts %+v, want %+v", conflicts, want)
		}
	})

	t.Run("an external IP on a cluster IP of a younger service", func(t *testing.T) {
		// old claimed 198.18.96.5 as an external IP first; the apiserver then gave that
		// address to young as its cluster IP: the cluster IP wins.
		old := svc("a/old", t0, nil, []string{"198.18.96.5"}, "198.18.1.10", udp53)
		young := svc("b/young", t0.Add(time.Hour), []string{"198.18.96.5"}, []string{"198.18.96.5"}, "198.18.1.20", udp53)
		plan, conflicts, _ := PlanConnect([]ConnectService{old, young})
		if got := plan[front("198.18.96.5", 53, datapath.UDP)].Endpoints; !slices.Equal(got, []netip.AddrPort{ap("198.18.1.20:53")}) {
			t.Errorf("the cluster IP goes to %v, want young's endpoint", got)
		}
		if len(conflicts) != 1 || conflicts[0].Service != "a/old" || !conflicts[0].OwnedAddress {
			t.Errorf("conflicts %+v", conflicts)
		}
	})
}
