// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// FuzzAllocator runs a sequence of operations read from the input against small pools and
// checks the allocator's invariants after each: the address index agrees with the
// allocations, an address is shared only under one key without clashing ports, every answer
// has one address per family with the required ones, new addresses come from pools that admit
// the Service, and Assign given its own answer answers the same.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 17, 33, 49, 65, 3, 2, 3, 7, 200, 100, 50, 25})
	f.Fuzz(runOps)
}

var poolSets = [][]Pool{
	{pool("a", "198.18.100.0-198.18.100.3", "2001:db8::/126"), pool("b", "198.18.101.254-198.18.102.1")},
	{pool("a", "198.18.100.0-198.18.100.1"), {Name: "b", Ranges: []Range{mustRange("198.18.101.255-198.18.102.1"), mustRange("2001:db8::8/125")},
		AvoidBuggyIPs: true, Namespaces: []string{"ns1"}}},
	{{Name: "c", Ranges: []Range{mustRange("198.18.100.2-198.18.100.5")}, ServiceSelector: map[string]string{"x": "1"}, AutoAssign: true}},
}

var space = ips("198.18.100.0", "198.18.100.2", "198.18.101.255", "198.18.102.0", "2001:db8::1", "2001:db8::9", "198.18.200.1")

// runOps runs the operations read from ops and checks the invariants after each.
func runOps(t *testing.T, ops []byte) {
	a := New()
	a.SetPools(poolSets[0])
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i], ops[i+1]
		owner := fmt.Sprintf("ns%d/s%d", arg%2, arg%6)
		switch op % 5 {
		case 0, 1, 2:
			req := Request{Service: owner, Namespace: fmt.Sprint("ns", arg%2), Labels: map[string]string{"x": fmt.Sprint(op % 2)}}
			req.Families = [][]Family{{IPv4}, {IPv6}, {IPv4, IPv6}, {IPv6, IPv4}}[op/5%4]
			req.RequireAll = op&0x40 != 0
			if op%5 == 1 {
				req.Addresses = []netip.Addr{space[int(op/5)%len(space)]}
			}
			if op%5 == 2 {
				req.Pool = []string{"a", "b", "c"}[int(arg/6)%3]
			}
			if arg&0x80 != 0 {
				req.SharingKey = fmt.Sprint("k", arg/32%2)
			}
			req.Ports = []Port{{datapath.Protocol([]uint8{6, 17}[op/3%2]), uint16(arg / 64 % 3)}}
			current := a.Addrs(owner)
			got, err := a.Assign(req, current)
			if err != nil {
				continue
			}
			checkAnswer(t, a, req, current, got)
			again, err := a.Assign(req, got)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("Assign(%+v) again with %v = %v, %v", req, got, again, err)
			}
		case 3:
			a.Release(owner)
		case 4:
			if _, err := a.SetPools(poolSets[int(arg)%len(poolSets)]); err != nil {
				t.Fatal(err)
			}
		}
		checkIndex(t, a)
	}
}

// checkAnswer checks one successful Assign.
func checkAnswer(t *testing.T, a *Allocator, req Request, current, got []netip.Addr) {
	t.Helper()
	var fams []Family
	for _, addr := range got {
		fams = append(fams, FamilyOf(addr))
		if slices.Contains(current, addr) || slices.Contains(req.Addresses, addr) {
			continue
		}
		p := a.poolOf(addr)
		switch {
		case p == nil:
			t.Fatalf("%s got %s, in no pool", req.Service, addr)
		case p.refusal(req.Namespace, req.Labels) != "":
			t.Fatalf("%s got %s of pool %s, which refuses it", req.Service, addr, p.Name)
		case req.Pool != "" && p.Name != req.Pool:
			t.Fatalf("%s asked for pool %s, got %s of pool %s", req.Service, req.Pool, addr, p.Name)
		case req.Pool == "" && !p.AutoAssign:
			t.Fatalf("%s got %s of pool %s, which is not automatic", req.Service, addr, p.Name)
		case p.AvoidBuggyIPs && buggy(addr):
			t.Fatalf("%s got %s of pool %s, which avoids it", req.Service, addr, p.Name)
		}
	}
	want := slices.DeleteFunc(slices.Clone(req.Families), func(f Family) bool { return !slices.Contains(fams, f) })
	if !slices.Equal(fams, want) {
		t.Fatalf("%s asked for %v, got %v", req.Service, req.Families, got)
	}
	for _, f := range req.required() {
		if !slices.Contains(fams, f) {
			t.Fatalf("%s requires %s, got %v", req.Service, f, got)
		}
	}
	if !slices.Equal(a.Addrs(req.Service), got) {
		t.Fatalf("%s got %v, recorded %v", req.Service, got, a.Addrs(req.Service))
	}
}

// checkIndex checks that owners and used agree with allocs, and the sharing rules.
func checkIndex(t *testing.T, a *Allocator) {
	t.Helper()
	want := map[netip.Addr][]string{}
	for owner, al := range a.allocs {
		if len(al.addrs) == 0 {
			t.Fatalf("%s has an empty allocation", owner)
		}
		for _, addr := range al.addrs {
			want[addr] = append(want[addr], owner)
		}
	}
	for _, o := range want {
		slices.Sort(o)
	}
	if !reflect.DeepEqual(want, a.owners) {
		t.Fatalf("owners index %v, allocations say %v", a.owners, want)
	}
	if !slices.IsSortedFunc(a.used, netip.Addr.Compare) || len(a.used) != len(want) {
		t.Fatalf("used %v for %d addresses", a.used, len(want))
	}
	for addr, owners := range want {
		for i, o := range owners {
			for _, p := range owners[:i] {
				x, y := a.allocs[o].req, a.allocs[p].req
				if x.SharingKey == "" || x.SharingKey != y.SharingKey {
					t.Fatalf("%s shared by %s (key %q) and %s (key %q)", addr, o, x.SharingKey, p, y.SharingKey)
				}
				for _, xp := range x.Ports {
					for _, yp := range y.Ports {
						if xp.clashes(yp) {
							t.Fatalf("%s shared by %s and %s, both on %s", addr, o, p, xp)
						}
					}
				}
			}
		}
	}
}
