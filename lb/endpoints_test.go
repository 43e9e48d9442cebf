// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

func TestEndpointIndex(t *testing.T) {
	svc := func(name string, port, target uint16, proto datapath.Protocol, pods ...string) Service {
		s := Service{Name: name, VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.1")},
			Ports: []Port{{Name: "p", Port: port, TargetPort: target, Protocol: proto}}}
		for _, p := range pods {
			s.Backends = append(s.Backends, Backend{Addr: netip.MustParseAddr(p)})
		}
		return s
	}
	x := NewEndpointIndex()
	v6only := svc("g", 80, 8080, datapath.TCP, "198.18.3.1")
	v6only.VIPs = []netip.Addr{netip.MustParseAddr("2001:db8:100::1")} // its IPv4 backend gets no frontend
	for _, s := range []Service{
		svc("a", 80, 8080, datapath.TCP, "198.18.3.1", "198.18.3.2"),
		svc("c", 81, 8080, datapath.TCP, "198.18.3.1"), // shares .1:8080 with a, on another port
		svc("d", 80, 8080, datapath.UDP, "198.18.3.1"), // UDP: shares nothing with the TCP ones
		svc("e", 80, 9090, datapath.TCP, "198.18.3.1"), // another target port: nothing
		svc("f", 443, 0, datapath.TCP, "198.18.3.9"),   // target port = port: nothing
		v6only,
	} {
		x.Set(s)
	}
	// b shares .2:8080 with a on the same port: a is touched (its Sharing changes).
	if got := x.Set(svc("b", 80, 8080, datapath.TCP, "198.18.3.2", "198.18.3.3")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Set(b) touched %v, want [a]", got)
	}
	want := map[string]Sharing{
		"a": {SamePort: []string{"b"}, OtherPort: []string{"c"}},
		"b": {SamePort: []string{"a"}},
		"c": {OtherPort: []string{"a"}},
	}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		got, ok := x.Sharing(name)
		if w, shared := want[name]; ok != shared || (shared && !reflect.DeepEqual(got, w)) {
			t.Errorf("Sharing(%s) = %+v, %v; want %+v, %v", name, got, ok, w, shared)
		}
	}
	// The same endpoints again (say a backend's state changed): nothing touched.
	if got := x.Set(svc("b", 80, 8080, datapath.TCP, "198.18.3.3", "198.18.3.2")); len(got) != 0 {
		t.Errorf("Set(b) with the same endpoints touched %v", got)
	}
	// b moves to other Pods: a no longer shares with b (a was touched).
	if got := x.Set(svc("b", 80, 8080, datapath.TCP, "198.18.3.7")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Set(b) on other pods touched %v, want [a]", got)
	}
	if got, _ := x.Sharing("a"); !reflect.DeepEqual(got, Sharing{OtherPort: []string{"c"}}) {
		t.Errorf("a after b moved: %+v", got)
	}
	if got := x.Delete("a"); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("Delete(a) touched %v, want [c]", got)
	}
	if _, ok := x.Sharing("c"); ok {
		t.Errorf("c still shares after a left")
	}
}

// TestEndpointIndexLarge: a service with 100,000 endpoints (it must stay linear: the
// controller's one worker waits on it) shares all of them with another.
func TestEndpointIndexLarge(t *testing.T) {
	big := func(name string) Service {
		s := Service{Name: name, VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.1")},
			Ports: []Port{{Name: "p", Port: 80, TargetPort: 8080, Protocol: datapath.TCP}}}
		for i := range 100_000 {
			s.Backends = append(s.Backends, Backend{Addr: netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))})
		}
		return s
	}
	x := NewEndpointIndex()
	x.Set(big("a"))
	if got := x.Set(big("b")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Set(b) touched %v", got)
	}
	if sh, _ := x.Sharing("a"); !reflect.DeepEqual(sh.SamePort, []string{"b"}) {
		t.Errorf("Sharing(a) = %+v", sh)
	}
}
