// SPDX-License-Identifier: Apache-2.0
package l2

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func addrs(format string, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.MustParseAddr(fmt.Sprintf(format, i+1))
	}
	return out
}

func set(as ...netip.Addr) map[netip.Addr]bool {
	s := map[netip.Addr]bool{}
	for _, a := range as {
		s[a] = true
	}
	return s
}

// Losing a gateway moves only its VIPs, and the VIPs spread over every gateway.
func TestOwnersConsistent(t *testing.T) {
	vips := append(addrs("198.18.100.%d", 200), addrs("2001:db8:100::%d", 200)...)
	gws := addrs("198.18.20.1%d", 3)
	all := set(vips...)
	members := func(ids ...netip.Addr) []Member {
		var out []Member
		for _, id := range ids {
			out = append(out, Member{ID: id, Serves: all})
		}
		return out
	}
	for _, failback := range []bool{false, true} {
		before := Owners(vips, members(gws...), failback)
		count := map[netip.Addr]int{}
		for _, o := range before {
			count[o]++
		}
		for _, g := range gws {
			if count[g] < len(vips)/6 {
				t.Errorf("failback %v: gateway %v owns %d of %d VIPs: not spread", failback, g, count[g], len(vips))
			}
		}
		after := Owners(vips, members(gws[0], gws[2]), failback)
		for _, v := range vips {
			switch {
			case before[v] == gws[1] && after[v] == gws[1]:
				t.Errorf("VIP %v still owned by the dead gateway", v)
			case before[v] != gws[1] && after[v] != before[v]:
				t.Errorf("VIP %v moved from %v to %v though its owner lives", v, before[v], after[v])
			}
		}
		// The order of the members does not matter.
		rev := members(gws[2], gws[1], gws[0])
		if !reflect.DeepEqual(Owners(vips, rev, failback), before) {
			t.Errorf("failback %v: the owners depend on the members' order", failback)
		}
	}
}

// Without fail-back a claimed VIP stays with its claimer when a better-ranked gateway returns;
// with fail-back it moves back. Two claimers resolve to the better-ranked one either way.
func TestOwnersFailback(t *testing.T) {
	v := netip.MustParseAddr("198.18.100.1")
	a, b := netip.MustParseAddr("198.18.20.11"), netip.MustParseAddr("198.18.20.12")
	if !better(v, a, b) {
		a, b = b, a
	}
	// b owns v (a was away); a returns.
	ms := []Member{{ID: a, Serves: set(v)}, {ID: b, Serves: set(v), Claims: set(v)}}
	if got := Owners([]netip.Addr{v}, ms, false)[v]; got != b {
		t.Errorf("no fail-back: owner %v, want the claimer %v", got, b)
	}
	if got := Owners([]netip.Addr{v}, ms, true)[v]; got != a {
		t.Errorf("fail-back: owner %v, want the best-ranked %v", got, a)
	}
	ms[0].Claims = set(v) // both claim: a healed partition
	for _, fb := range []bool{false, true} {
		if got := Owners([]netip.Addr{v}, ms, fb)[v]; got != a {
			t.Errorf("failback %v, two claimers: owner %v, want %v", fb, got, a)
		}
	}
	if d := Duplicates(b, ms); !reflect.DeepEqual(d, []netip.Addr{v}) {
		t.Errorf("Duplicates = %v, want [%v]", d, v)
	}
	// A claimer that cannot serve (eTP=Local with no local endpoint, unhealthy) loses it.
	ms = []Member{{ID: a, Serves: set(), Claims: set(v)}, {ID: b, Serves: set(v)}}
	if got := Owners([]netip.Addr{v}, ms, false)[v]; got != b {
		t.Errorf("claimer cannot serve: owner %v, want %v", got, b)
	}
	// Nobody serves: no owner.
	if o := Owners([]netip.Addr{v}, []Member{{ID: a, Claims: set(v)}}, false); len(o) != 0 {
		t.Errorf("nobody serves, owners %v", o)
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	h := Heartbeat{Flags: FlagReady, Seq: 7, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Name: "g1",
		Serves: []netip.Addr{netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8:100::1")},
		Claims: []netip.Addr{netip.MustParseAddr("2001:db8:100::1")}}
	b, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("round trip: %+v, want %+v", got, h)
	}
	// Every truncation is an error, never a panic; so is a trailing byte.
	for i := range b {
		if _, err := ParseHeartbeat(b[:i]); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	if _, err := ParseHeartbeat(append(b, 0)); err == nil {
		t.Error("trailing byte: no error")
	}
	bad := func(name string, mut func([]byte)) {
		c := append([]byte(nil), b...)
		mut(c)
		if _, err := ParseHeartbeat(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	bad("magic", func(c []byte) { c[0] = 'Y' })
	bad("version", func(c []byte) { c[4] = 9 })
	bad("family", func(c []byte) { c[headerLen+2+4] = 5 })
	bad("name", func(c []byte) { c[headerLen] = 0 })
	bad("count", func(c []byte) { c[headerLen+2] = 0xff })
	if _, err := (Heartbeat{Serves: make([]netip.Addr, MaxAddresses+1)}).Marshal(); err == nil {
		t.Error("too many addresses marshalled")
	}
}

func FuzzParseHeartbeat(f *testing.F) {
	b, _ := Heartbeat{Name: "g", Serves: []netip.Addr{netip.MustParseAddr("198.18.100.1")}}.Marshal()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeartbeat(b)
		if err != nil {
			return
		}
		out, err := h.Marshal()
		if err != nil || string(out) != string(b) {
			t.Fatalf("a parsed heartbeat does not marshal back: %v", err)
		}
	})
}

func TestMembers(t *testing.T) {
	m := Members{DeadAfter: 300 * time.Millisecond}
	id := netip.MustParseAddr("198.18.20.12")
	t0 := time.Unix(1000, 0)
	h := Heartbeat{Flags: FlagReady, Serves: []netip.Addr{netip.MustParseAddr("198.18.100.1")}}
	if !m.Heard(id, h, t0) {
		t.Error("a new peer is not a change")
	}
	if m.Heard(id, h, t0.Add(100*time.Millisecond)) {
		t.Error("the same heartbeat again is a change")
	}
	if len(m.Expire(t0.Add(399*time.Millisecond))) != 0 || len(m.Alive(t0.Add(399*time.Millisecond))) != 1 {
		t.Error("a peer heard 299 ms ago is dead")
	}
	if d := m.Expire(t0.Add(400 * time.Millisecond)); len(d) != 1 || len(m.Alive(t0.Add(400*time.Millisecond))) != 0 {
		t.Errorf("a peer silent for 300 ms is alive (expired %v)", d)
	}
	p := Peer{ID: id, Heartbeat: Heartbeat{Serves: h.Serves}}
	if len(p.AsMember().Serves) != 0 {
		t.Error("a peer not ready serves")
	}
}
