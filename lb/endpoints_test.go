package lb

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestEndpointIndex(t *testing.T) {
	svc := func(name string, port, target uint16, proto Protocol, pods ...string) Service {
		s := Service{Name: name, Ports: []Port{{Name: "p", Port: port, TargetPort: target, Protocol: proto}}}
		for _, p := range pods {
			s.Backends = append(s.Backends, Backend{Addr: netip.MustParseAddr(p)})
		}
		return s
	}
	x := NewEndpointIndex()
	for _, s := range []Service{
		svc("a", 80, 8080, TCP, "198.18.3.1", "198.18.3.2"),
		svc("c", 81, 8080, TCP, "198.18.3.1"), // shares .1:8080 with a, on another port
		svc("d", 80, 8080, UDP, "198.18.3.1"), // UDP: shares nothing with the TCP ones
		svc("e", 80, 9090, TCP, "198.18.3.1"), // another target port: nothing
		svc("f", 443, 0, TCP, "198.18.3.9"),   // target port = port: nothing
	} {
		x.Set(s)
	}
	// b shares .2:8080 with a on the same port: a is touched (its Sharing changes).
	if got := x.Set(svc("b", 80, 8080, TCP, "198.18.3.2", "198.18.3.3")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Set(b) touched %v, want [a]", got)
	}
	ap := netip.MustParseAddrPort
	want := map[string]Sharing{
		"a": {Others: []string{"b", "c"}, SamePort: []string{"b"}, Example: ap("198.18.3.1:8080"), Endpoints: 2},
		"b": {Others: []string{"a"}, SamePort: []string{"a"}, Example: ap("198.18.3.2:8080"), Endpoints: 1},
		"c": {Others: []string{"a"}, Example: ap("198.18.3.1:8080"), Endpoints: 1},
	}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		got, ok := x.Sharing(name)
		if w, shared := want[name]; ok != shared || !reflect.DeepEqual(got, w) && shared {
			t.Errorf("Sharing(%s) = %+v, %v; want %+v, %v", name, got, ok, w, shared)
		}
	}
	// b moves to other Pods: a no longer shares with b (a was touched).
	if got := x.Set(svc("b", 80, 8080, TCP, "198.18.3.7")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Set(b) again touched %v, want [a]", got)
	}
	if got, _ := x.Sharing("a"); !reflect.DeepEqual(got.Others, []string{"c"}) || got.SamePort != nil {
		t.Errorf("a after b moved: %+v", got)
	}
	if got := x.Delete("a"); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("Delete(a) touched %v, want [c]", got)
	}
	if _, ok := x.Sharing("c"); ok {
		t.Errorf("c still shares after a left")
	}
	if got := x.Set(svc("b", 80, 8080, TCP, "198.18.3.7")); len(got) != 0 {
		t.Errorf("Set(b) unchanged touched %v", got)
	}
}
