// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// dsrService is svc with backend i on node n<i>, the first dsr of them DSR-capable.
func dsrService(name, vip string, port uint16, dsr int, backends ...string) Service {
	s := svc(name, vip, port, backends...)
	for i := range s.Backends {
		s.Backends[i].Node = "n" + string(rune('1'+i))
		s.Backends[i].DSR = i < dsr
	}
	return s
}

func ep(addr string, port uint16) datapath.Endpoint {
	return datapath.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Proto: datapath.TCP}
}

// TestPlanForwarding: in the DSR mode the capable backends are flagged DSR; the others are
// excluded (no new flows, reverse entry kept for the flows they have), and the DSR ones get no
// reverse NAT entry, or the others are served through the gateways and every backend keeps its
// reverse entry, as the fallback says. The return-path mode ignores the
// capability.
func TestPlanForwarding(t *testing.T) {
	s := dsrService("a", "198.18.100.1", 80, 2, "198.18.1.10", "198.18.1.11", "198.18.1.12")
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}
	cases := []struct {
		name         string
		fw           Forwarding
		dsr          []bool // per backend
		weight       []uint32
		serving      int
		reverse      []bool // per backend: has a reverse NAT entry
		excludedLast bool
	}{
		{"returnPath", Forwarding{}, []bool{false, false, false}, []uint32{1, 1, 1}, 3, []bool{true, true, true}, false},
		{"dsr-exclude", Forwarding{Mode: datapath.DSR}, []bool{true, true, false}, []uint32{1, 1, 0}, 2, []bool{false, false, true}, true},
		// The return-path fallback keeps every reverse entry: replies may still cross a gateway.
		{"dsr-returnPath", Forwarding{Mode: datapath.DSR, Fallback: FallbackReturnPath}, []bool{true, true, false}, []uint32{1, 1, 1}, 3, []bool{true, true, true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, errs := Plan([]Service{s}, PlanOptions{Seed: 1, TableSize: 251, Forwarding: c.fw})
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			p := d.Frontends[f]
			if p.Serving != c.serving {
				t.Errorf("serving %d, want %d", p.Serving, c.serving)
			}
			for i, b := range p.Backends {
				if b.DSR != c.dsr[i] || b.Weight != c.weight[i] {
					t.Errorf("backend %s: DSR %v weight %d, want %v %d", b.Key, b.DSR, b.Weight, c.dsr[i], c.weight[i])
				}
				_, rev := d.Reverse[ep(b.Key.Addr().String(), 8080)]
				if rev != c.reverse[i] {
					t.Errorf("backend %s: reverse entry %v, want %v", b.Key, rev, c.reverse[i])
				}
			}
			if p.Backends[2].Excluded != c.excludedLast {
				t.Errorf("last backend excluded %v, want %v", p.Backends[2].Excluded, c.excludedLast)
			}
			for _, idx := range p.Table {
				if p.Backends[idx].Weight == 0 {
					t.Fatalf("slot of %s, which takes no new flows", p.Backends[idx].Key)
				}
			}
		})
	}
	// Every backend excluded: the frontend is down, not black-holing.
	none := dsrService("b", "198.18.100.2", 80, 0, "198.18.1.10")
	d, _ := Plan([]Service{none}, PlanOptions{Seed: 1, TableSize: 251, Forwarding: Forwarding{Mode: datapath.DSR}})
	if p := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.2"), Port: 80, Proto: datapath.TCP}]; p.Serving != 0 || slices.ContainsFunc(p.Table, func(i int) bool { return i >= 0 }) {
		t.Errorf("every backend excluded: serving %d, table %v", p.Serving, p.Table[:8])
	}
	if _, errs := Plan([]Service{s}, PlanOptions{Forwarding: Forwarding{Mode: "tunnel"}}); len(errs) != 1 {
		t.Errorf("unknown mode: %v, want one error", errs)
	}
}

// TestForwardingSharing: in the DSR mode, Services sharing Pod ports of DSR backends share
// nothing the gateways must translate; those of return-path backends still do.
func TestForwardingSharing(t *testing.T) {
	a := dsrService("a", "198.18.100.1", 80, 1, "198.18.1.10", "198.18.1.11")
	b := dsrService("b", "198.18.100.2", 80, 1, "198.18.1.10", "198.18.1.11")
	for _, c := range []struct {
		fw     Forwarding
		shared bool
	}{
		{Forwarding{}, true},
		{Forwarding{Mode: datapath.DSR, Fallback: FallbackReturnPath}, true}, // 198.18.1.11 is not DSR
	} {
		x := NewEndpointIndex()
		x.Set(c.fw.ReturnPath(a))
		x.Set(c.fw.ReturnPath(b))
		if _, ok := x.Sharing("a"); ok != c.shared {
			t.Errorf("%+v: shared %v, want %v", c.fw, ok, c.shared)
		}
	}
	a.Backends[1].DSR, b.Backends[1].DSR = true, true
	x := NewEndpointIndex()
	fw := Forwarding{Mode: datapath.DSR}
	x.Set(fw.ReturnPath(a))
	x.Set(fw.ReturnPath(b))
	if sh, ok := x.Sharing("a"); ok {
		t.Errorf("every backend DSR: still shared %+v", sh)
	}
	if u := fw.Use(a); u.Direct != 2 || len(u.Excluded)+len(u.ReturnPath) != 0 {
		t.Errorf("use %+v", u)
	}
	a.Backends[1].DSR = false
	if u := fw.Use(a); u.Direct != 1 || len(u.Excluded) != 1 || u.Excluded[0].Node != "n2" {
		t.Errorf("use %+v", u)
	}
	if u := (Forwarding{Mode: datapath.DSR, Fallback: FallbackReturnPath}).Use(a); len(u.ReturnPath) != 1 || len(u.Excluded) != 0 {
		t.Errorf("use %+v", u)
	}
}

// TestDSRServices: a node accepts each frontend with each of its local endpoints, target
// ports resolved, families matched, all-ports frontends paired with port 0.
func TestDSRServices(t *testing.T) {
	a := dsrService("a", "198.18.100.1", 80, 0, "198.18.1.10", "198.18.1.11", "2001:db8:1::10")
	a.VIPs = append(a.VIPs, netip.MustParseAddr("2001:db8:100::1"))
	a.Ports = append(a.Ports, Port{Name: "dns", Port: 53, Protocol: datapath.UDP})
	a.Backends[2].Node = "n1"
	a.Backends[0].TargetPorts = map[string]uint16{"p": 9090}
	b := dsrService("b", "198.18.100.2", 0, 0, "198.18.1.10")
	b.Ports[0].TargetPort = 0
	bad := dsrService("", "198.18.100.3", 80, 0, "198.18.1.10") // invalid: no name
	got := DSRServices([]Service{a, b, bad}, func(b Backend) bool { return b.Node == "n1" })
	pair := func(vip string, port uint16, proto datapath.Protocol, e string) datapath.DSRService {
		return datapath.DSRService{Frontend: datapath.Frontend{Addr: netip.MustParseAddr(vip), Port: port, Proto: proto},
			Endpoint: netip.MustParseAddrPort(e)}
	}
	want := map[datapath.DSRService]bool{
		pair("198.18.100.1", 80, datapath.TCP, "198.18.1.10:9090"):         true,
		pair("198.18.100.1", 53, datapath.UDP, "198.18.1.10:53"):           true,
		pair("2001:db8:100::1", 80, datapath.TCP, "[2001:db8:1::10]:8080"): true,
		pair("2001:db8:100::1", 53, datapath.UDP, "[2001:db8:1::10]:53"):   true,
		pair("198.18.100.2", 0, datapath.TCP, "198.18.1.10:0"):             true,
	}
	if len(got) != len(want) {
		t.Errorf("got %d pairs, want %d: %v", len(got), len(want), got)
	}
	for p := range want {
		if !got[p] {
			t.Errorf("missing %+v", p)
		}
	}
}

func TestParseFallback(t *testing.T) {
	for _, f := range []Fallback{FallbackExclude, FallbackReturnPath} {
		if g, err := ParseFallback(f.String()); err != nil || g != f {
			t.Errorf("%s: %v %v", f, g, err)
		}
	}
	if _, err := ParseFallback("drop"); err == nil {
		t.Error("drop parsed")
	}
}
