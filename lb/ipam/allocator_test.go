// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// pool returns an auto-assigning pool of the given ranges.
func pool(name string, ranges ...string) Pool {
	p := Pool{Name: name, AutoAssign: true}
	for _, r := range ranges {
		p.Ranges = append(p.Ranges, mustRange(r))
	}
	return p
}

// newAlloc returns an allocator with pools set.
func newAlloc(t *testing.T, pools ...Pool) *Allocator {
	t.Helper()
	a := New()
	if _, err := a.SetPools(pools); err != nil {
		t.Fatal(err)
	}
	return a
}

// v4 is an IPv4 single-stack request of service default/NAME.
func v4(name string) Request {
	return Request{Service: "default/" + name, Namespace: "default", Families: []Family{IPv4},
		Ports: []Port{{datapath.TCP, 80}}}
}

func ips(ss ...string) []netip.Addr {
	out := []netip.Addr{}
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// assign calls Assign and fails the test on error.
func assign(t *testing.T, a *Allocator, req Request, current ...string) []netip.Addr {
	t.Helper()
	got, err := a.Assign(req, ips(current...))
	if err != nil {
		t.Fatalf("Assign(%s): %v", req.Service, err)
	}
	return got
}

// wantErr checks that err is an *Error with the reason and exact message.
func wantErr(t *testing.T, err error, reason Reason, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *Error %s: %s", err, reason, msg)
	}
	if e.Reason != reason || e.Error() != msg {
		t.Errorf("got %s: %s\nwant %s: %s", e.Reason, e.Error(), reason, msg)
	}
}

func TestExhaustionAndRelease(t *testing.T) {
	a := newAlloc(t, pool("edge", "198.18.100.1-198.18.100.3"))
	for i, want := range []string{"198.18.100.1", "198.18.100.2", "198.18.100.3"} {
		if got := assign(t, a, v4(fmt.Sprint("s", i))); !reflect.DeepEqual(got, ips(want)) {
			t.Errorf("service %d got %v, want %s", i, got, want)
		}
	}
	_, err := a.Assign(v4("late"), nil)
	wantErr(t, err, ReasonPoolExhausted, `service default/late: pool "edge" exhausted (3 of 3 IPv4 addresses in use)`)
	if a.Addrs("default/late") != nil {
		t.Errorf("a failed first Assign recorded %v", a.Addrs("default/late"))
	}
	a.Release("default/s1")
	if got := assign(t, a, v4("late")); !reflect.DeepEqual(got, ips("198.18.100.2")) {
		t.Errorf("after release got %v, want the released 198.18.100.2", got)
	}
	if got := a.Owners(netip.MustParseAddr("198.18.100.2")); !reflect.DeepEqual(got, []string{"default/late"}) {
		t.Errorf("Owners = %v", got)
	}
	a.Release("default/nobody") // no-op
	if u := a.Usage(); !reflect.DeepEqual(u, []PoolUsage{{Pool: "edge", Family: IPv4, Size: 3, Used: 3}}) {
		t.Errorf("Usage = %+v", u)
	}

	two := newAlloc(t, pool("a", "198.18.100.1"), pool("b", "198.18.101.1"))
	assign(t, two, v4("x"))
	assign(t, two, v4("y"))
	_, err = two.Assign(v4("z"), nil)
	wantErr(t, err, ReasonPoolExhausted, `service default/z: every pool it may use is exhausted: "a" (1 of 1 IPv4 addresses in use), "b" (1 of 1 IPv4 addresses in use)`)
}

func TestPoolOrderAndAvoidBuggy(t *testing.T) {
	// Configuration order, not name order, and ranges in address order.
	a := newAlloc(t, pool("z-first", "198.18.101.5", "198.18.101.1"), pool("a-second", "198.18.100.0/24"))
	for _, want := range []string{"198.18.101.1", "198.18.101.5", "198.18.100.0"} {
		if got := assign(t, a, v4(want)); got[0] != netip.MustParseAddr(want) {
			t.Errorf("got %v, want %s", got, want)
		}
	}
	p := pool("edge", "198.18.100.254-198.18.101.1")
	p.AvoidBuggyIPs = true
	a = newAlloc(t, p)
	if got := assign(t, a, v4("a")); got[0] != netip.MustParseAddr("198.18.100.254") {
		t.Errorf("got %v", got)
	}
	if got := assign(t, a, v4("b")); got[0] != netip.MustParseAddr("198.18.101.1") {
		t.Errorf("got %v, want .255 and .0 skipped", got)
	}
	_, err := a.Assign(v4("c"), nil)
	wantErr(t, err, ReasonPoolExhausted, `service default/c: pool "edge" exhausted (2 of 2 IPv4 addresses in use)`)
	// Requested explicitly, a .0 address is fine.
	req := v4("d")
	req.Addresses = ips("198.18.101.0")
	if got := assign(t, a, req); got[0] != netip.MustParseAddr("198.18.101.0") {
		t.Errorf("got %v", got)
	}
}

func TestRequestedAddress(t *testing.T) {
	edge := pool("edge", "198.18.100.0/24", "2001:db8:100::/120")
	manual := pool("manual", "198.18.101.0/24")
	manual.AutoAssign = false
	prod := pool("prod", "198.18.102.0/24")
	prod.Namespaces = []string{"prod"}
	a := newAlloc(t, edge, manual, prod)
	assign(t, a, v4("first")) // 198.18.100.0

	for _, c := range []struct {
		name   string
		req    func(r *Request)
		want   []netip.Addr
		reason Reason
		msg    string
	}{
		{"honoured", func(r *Request) { r.Addresses = ips("198.18.100.77") }, ips("198.18.100.77"), "", ""},
		{"honoured in a manual pool", func(r *Request) { r.Addresses = ips("198.18.101.9") }, ips("198.18.101.9"), "", ""},
		{"honoured, dual-stack, in family order", func(r *Request) {
			r.Families, r.RequireAll, r.Addresses = []Family{IPv6, IPv4}, true, ips("198.18.100.5", "2001:db8:100::5")
		}, ips("2001:db8:100::5", "198.18.100.5"), "", ""},
		{"IPv4-mapped is unmapped", func(r *Request) { r.Addresses = ips("::ffff:198.18.100.78") }, ips("198.18.100.78"), "", ""},
		{"taken", func(r *Request) { r.Addresses = ips("198.18.100.0") }, nil, ReasonAddressInUse,
			"service default/web: address 198.18.100.0 is in use by service default/first (give both Services the same sharing key to share it)"},
		{"outside every pool", func(r *Request) { r.Addresses = ips("198.18.200.1") }, nil, ReasonNotInAnyPool,
			`service default/web: requested address 198.18.200.1 is in no address pool (pools: "edge", "manual", "prod")`},
		{"outside the requested pool", func(r *Request) { r.Addresses, r.Pool = ips("198.18.100.9"), "manual" }, nil, ReasonNotInAnyPool,
			`service default/web: requested address 198.18.100.9 is in pool "edge", not in the requested pool "manual"`},
		{"in a pool of another namespace", func(r *Request) { r.Addresses = ips("198.18.102.1") }, nil, ReasonNoPoolMatches,
			`service default/web: requested address 198.18.102.1 cannot be used: pool "prod" admits only namespace prod`},
		{"wrong family", func(r *Request) { r.Addresses = ips("2001:db8:100::1") }, nil, ReasonInvalidRequest,
			"service default/web: requested address 2001:db8:100::1 is IPv6, but the Service's IP families are IPv4"},
		{"two of a family", func(r *Request) { r.Addresses = ips("198.18.100.1", "198.18.100.2") }, nil, ReasonInvalidRequest,
			"service default/web: more than one IPv4 address requested (a Service has one per family)"},
		{"required family missing", func(r *Request) {
			r.Families, r.RequireAll, r.Addresses = []Family{IPv4, IPv6}, true, ips("198.18.100.5")
		}, nil, ReasonInvalidRequest, "service default/web: the requested addresses include no IPv6 address, and the Service requires one"},
		{"preferred family missing is fine", func(r *Request) {
			r.Families, r.Addresses = []Family{IPv4, IPv6}, ips("198.18.100.5")
		}, ips("198.18.100.5"), "", ""},
		{"unknown pool", func(r *Request) { r.Pool = "egde" }, nil, ReasonUnknownPool,
			`service default/web: pool "egde" does not exist (pools: "edge", "manual", "prod")`},
		{"zero address", func(r *Request) { r.Addresses = []netip.Addr{{}} }, nil, ReasonInvalidRequest,
			"service default/web: requested address 1 is not an IP address"},
		{"multicast", func(r *Request) { r.Addresses = ips("224.0.0.1") }, nil, ReasonInvalidRequest,
			"service default/web: requested address 224.0.0.1 is not a usable unicast address"},
		{"no family", func(r *Request) { r.Families = nil }, nil, ReasonInvalidRequest, "service default/web: it asks for no IP family"},
		{"bad family", func(r *Request) { r.Families = []Family{5} }, nil, ReasonInvalidRequest, "service default/web: unknown IP family 5"},
		{"family twice", func(r *Request) { r.Families = []Family{IPv4, IPv4} }, nil, ReasonInvalidRequest,
			"service default/web: IP family IPv4 is listed twice"},
		{"port twice", func(r *Request) { r.Ports = []Port{{datapath.TCP, 80}, {datapath.TCP, 80}} }, nil, ReasonInvalidRequest,
			"service default/web: port 80/TCP is listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := v4("web")
			c.req(&req)
			got, err := a.Assign(req, nil)
			if c.reason != "" {
				wantErr(t, err, c.reason, c.msg)
				if a.Addrs("default/web") != nil {
					t.Errorf("failed Assign recorded %v", a.Addrs("default/web"))
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, %v; want %v", got, err, c.want)
			}
			a.Release("default/web")
		})
	}
	if _, err := a.Assign(Request{Families: []Family{IPv4}}, nil); err == nil {
		t.Error("a request without a service was accepted")
	}
}

func TestSharing(t *testing.T) {
	a := newAlloc(t, pool("edge", "198.18.100.1-198.18.100.9"))
	web := v4("web")
	web.SharingKey = "k"
	dns := Request{Service: "default/dns", Namespace: "default", Families: []Family{IPv4}, SharingKey: "k", Ports: []Port{{datapath.UDP, 53}, {datapath.TCP, 53}}}
	assign(t, a, web)
	// Same key, no clash: the shared address is preferred to a free one.
	if got := assign(t, a, dns); !reflect.DeepEqual(got, ips("198.18.100.1")) {
		t.Fatalf("dns got %v, want web's 198.18.100.1", got)
	}
	if got := a.Owners(netip.MustParseAddr("198.18.100.1")); !reflect.DeepEqual(got, []string{"default/dns", "default/web"}) {
		t.Errorf("Owners = %v", got)
	}
	// Same key, clashing port: a new address.
	web2 := v4("web2")
	web2.SharingKey = "k"
	if got := assign(t, a, web2); !reflect.DeepEqual(got, ips("198.18.100.2")) {
		t.Errorf("web2 got %v, want a fresh address", got)
	}
	// Explicitly, the clash is an error naming the service and port.
	web3 := v4("web3")
	web3.SharingKey, web3.Addresses = "k", ips("198.18.100.1")
	_, err := a.Assign(web3, nil)
	wantErr(t, err, ReasonPortsClash, "service default/web3: address 198.18.100.1 is shared with service default/web, which already uses 80/TCP")
	all := v4("all")
	all.SharingKey, all.Addresses, all.Ports = "k", ips("198.18.100.2"), []Port{{datapath.UDP, 0}}
	assign(t, a, all) // every UDP port: no clash with web2's 80/TCP
	udp := v4("udp")
	udp.SharingKey, udp.Addresses, udp.Ports = "k", ips("198.18.100.2"), []Port{{datapath.UDP, 5353}}
	_, err = a.Assign(udp, nil)
	wantErr(t, err, ReasonPortsClash, "service default/udp: address 198.18.100.2 is shared with service default/all, which already uses every UDP port")
	// Another key, or none.
	other := v4("other")
	other.SharingKey, other.Addresses, other.Ports = "j", ips("198.18.100.1"), []Port{{datapath.TCP, 8443}}
	_, err = a.Assign(other, nil)
	wantErr(t, err, ReasonSharingKeyMismatch, `service default/other: address 198.18.100.1 is shared by service default/dns under sharing key "k", not "j"`)
	nokey := v4("nokey")
	nokey.Addresses, nokey.Ports = ips("198.18.100.1"), []Port{{datapath.TCP, 8443}}
	_, err = a.Assign(nokey, nil)
	wantErr(t, err, ReasonAddressInUse, `service default/nokey: address 198.18.100.1 is in use by service default/dns, which shares it under sharing key "k"; this Service has no sharing key`)
	plain := v4("plain")
	assign(t, a, plain) // 198.18.100.3
	keyed := v4("keyed")
	keyed.SharingKey, keyed.Addresses, keyed.Ports = "k", ips("198.18.100.3"), []Port{{datapath.TCP, 8443}}
	_, err = a.Assign(keyed, nil)
	wantErr(t, err, ReasonAddressInUse, "service default/keyed: address 198.18.100.3 is in use by service default/plain, which has no sharing key")
	// Once web and dns are gone, the address is free again.
	a.Release("default/web")
	if got := a.Owners(netip.MustParseAddr("198.18.100.1")); !reflect.DeepEqual(got, []string{"default/dns"}) {
		t.Errorf("Owners after release = %v", got)
	}
	a.Release("default/dns")
	if got := assign(t, a, v4("new")); !reflect.DeepEqual(got, ips("198.18.100.1")) {
		t.Errorf("new got %v, want the freed 198.18.100.1", got)
	}
}

func TestSharingNeedsAdmittingPool(t *testing.T) {
	prod := pool("prod", "198.18.100.0/24")
	prod.Namespaces = []string{"prod"}
	a := newAlloc(t, prod, pool("any", "198.18.101.0/24"))
	p := Request{Service: "prod/web", Namespace: "prod", Families: []Family{IPv4}, SharingKey: "k", Ports: []Port{{datapath.TCP, 80}}}
	assign(t, a, p)
	d := Request{Service: "dev/web", Namespace: "dev", Families: []Family{IPv4}, SharingKey: "k", Ports: []Port{{datapath.TCP, 443}}}
	if got := assign(t, a, d); !reflect.DeepEqual(got, ips("198.18.101.0")) {
		t.Errorf("dev/web got %v: it shared an address of a pool that does not admit it", got)
	}
}

func TestDualStack(t *testing.T) {
	v4only := newAlloc(t, pool("v4", "198.18.100.0/24"))
	both := newAlloc(t, pool("v4", "198.18.100.0/24"), pool("v6", "2001:db8:100::/120"))
	prefer := Request{Service: "default/web", Families: []Family{IPv4, IPv6}}
	require := Request{Service: "default/web", Families: []Family{IPv4, IPv6}, RequireAll: true}
	v6first := Request{Service: "default/web", Families: []Family{IPv6, IPv4}, RequireAll: true}
	v6single := Request{Service: "default/web", Families: []Family{IPv6}}
	preferV6 := Request{Service: "default/web", Families: []Family{IPv6, IPv4}}

	if got := assign(t, v4only, prefer); !reflect.DeepEqual(got, ips("198.18.100.0")) {
		t.Errorf("prefer, IPv4 pool only: %v", got)
	}
	v4only.Release("default/web")
	_, err := v4only.Assign(require, nil)
	wantErr(t, err, ReasonFamilyUnavailable, "service default/web: no address pool has IPv6 addresses")
	_, err = v4only.Assign(preferV6, nil)
	wantErr(t, err, ReasonFamilyUnavailable, "service default/web: no address pool has IPv6 addresses")
	if got := assign(t, both, require); !reflect.DeepEqual(got, ips("198.18.100.0", "2001:db8:100::")) {
		t.Errorf("require: %v", got)
	}
	both.Release("default/web")
	if got := assign(t, both, v6first); !reflect.DeepEqual(got, ips("2001:db8:100::", "198.18.100.0")) {
		t.Errorf("IPv6 first: %v", got)
	}
	// Single-stack now: the IPv4 address is dropped, the IPv6 one kept.
	if got := assign(t, both, v6single, "2001:db8:100::", "198.18.100.0"); !reflect.DeepEqual(got, ips("2001:db8:100::")) {
		t.Errorf("to single stack: %v", got)
	}
	if o := both.Owners(netip.MustParseAddr("198.18.100.0")); o != nil {
		t.Errorf("dropped address still owned by %v", o)
	}
	// Prefer, with the IPv6 pool exhausted: IPv4 only, no error; it gets IPv6 once there is room.
	small := newAlloc(t, pool("v4", "198.18.100.0/24"), pool("v6", "2001:db8:100::1"))
	assign(t, small, Request{Service: "default/hog", Families: []Family{IPv6}})
	if got := assign(t, small, prefer); !reflect.DeepEqual(got, ips("198.18.100.0")) {
		t.Errorf("prefer, IPv6 exhausted: %v", got)
	}
	_, err = small.Assign(Request{Service: "default/req", Families: []Family{IPv4, IPv6}, RequireAll: true}, nil)
	wantErr(t, err, ReasonPoolExhausted, `service default/req: pool "v6" exhausted (1 of 1 IPv6 addresses in use)`)
	small.Release("default/hog")
	if got := assign(t, small, prefer, "198.18.100.0"); !reflect.DeepEqual(got, ips("198.18.100.0", "2001:db8:100::1")) {
		t.Errorf("prefer, IPv6 free again: %v", got)
	}
}

func TestSelection(t *testing.T) {
	manual := pool("manual", "198.18.100.0/24")
	manual.AutoAssign = false
	prod := pool("prod", "198.18.101.0/24")
	prod.Namespaces = []string{"prod", "staging"}
	internal := pool("internal", "198.18.102.0/24")
	internal.ServiceSelector = map[string]string{"tier": "internal", "team": "a"}
	v6 := pool("v6", "2001:db8:100::/120")
	v6.AutoAssign = false
	a := newAlloc(t, manual, prod, internal, v6)

	for _, c := range []struct {
		name   string
		req    Request
		want   []netip.Addr
		reason Reason
		msg    string
	}{
		{"nothing admits", Request{Service: "dev/web", Namespace: "dev", Labels: map[string]string{"tier": "internal", "team": "b"},
			Families: []Family{IPv4}}, nil, ReasonNoPoolMatches,
			`service dev/web: no IPv4 pool admits it: pool "manual" is not assigned automatically (request it by name or address); ` +
				`pool "prod" admits only namespaces prod, staging; pool "internal" admits only Services labelled team=a, tier=internal (this one lacks team=a)`},
		{"namespace", Request{Service: "staging/web", Namespace: "staging", Families: []Family{IPv4}}, ips("198.18.101.0"), "", ""},
		{"selector", Request{Service: "dev/web", Namespace: "dev", Labels: map[string]string{"tier": "internal", "team": "a"},
			Families: []Family{IPv4}}, ips("198.18.102.0"), "", ""},
		{"by pool name", Request{Service: "dev/web", Namespace: "dev", Families: []Family{IPv4}, Pool: "manual"}, ips("198.18.100.0"), "", ""},
		{"by pool name, refused", Request{Service: "dev/web", Namespace: "dev", Families: []Family{IPv4}, Pool: "prod"}, nil, ReasonNoPoolMatches,
			`service dev/web: no IPv4 pool admits it: pool "prod" admits only namespaces prod, staging`},
		{"by pool name, wrong family", Request{Service: "prod/web", Namespace: "prod", Families: []Family{IPv6}, Pool: "prod"}, nil,
			ReasonFamilyUnavailable, `service prod/web: pool "prod" has no IPv6 addresses`},
		{"IPv6 pool not automatic", Request{Service: "prod/web", Namespace: "prod", Families: []Family{IPv6}}, nil, ReasonNoPoolMatches,
			`service prod/web: no IPv6 pool admits it: pool "v6" is not assigned automatically (request it by name or address)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := a.Assign(c.req, nil)
			if c.reason != "" {
				wantErr(t, err, c.reason, c.msg)
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, %v; want %v", got, err, c.want)
			}
			a.Release(c.req.Service)
		})
	}
}

func TestIdempotenceAndPoolChange(t *testing.T) {
	a := newAlloc(t, pool("a", "198.18.100.0/24"), pool("b", "198.18.101.0/24"))
	req := v4("web")
	first := assign(t, a, req)
	for range 3 {
		if got := assign(t, a, req, first[0].String()); !reflect.DeepEqual(got, first) {
			t.Fatalf("Assign again = %v, want %v", got, first)
		}
	}
	// The current address is kept even though it is not the lowest free one, and even in a pool
	// that no longer assigns automatically.
	a.Release("default/web")
	if got := assign(t, a, req, "198.18.101.9"); !reflect.DeepEqual(got, ips("198.18.101.9")) {
		t.Errorf("got %v, want the current 198.18.101.9", got)
	}
	b := pool("b", "198.18.101.0/24")
	b.AutoAssign = false
	if orphans, err := a.SetPools([]Pool{pool("a", "198.18.100.0/24"), b}); err != nil || orphans != nil {
		t.Fatalf("SetPools = %v, %v", orphans, err)
	}
	if got := assign(t, a, req, "198.18.101.9"); !reflect.DeepEqual(got, ips("198.18.101.9")) {
		t.Errorf("got %v, want the current 198.18.101.9", got)
	}
	// Asking for another pool moves it.
	req.Pool = "a"
	if got := assign(t, a, req, "198.18.101.9"); !reflect.DeepEqual(got, ips("198.18.100.0")) {
		t.Errorf("got %v, want 198.18.100.0 of the requested pool", got)
	}
}

func TestRebuildConflict(t *testing.T) {
	a := newAlloc(t, pool("a", "198.18.100.0/24"))
	assign(t, a, v4("old"), "198.18.100.7")
	_, err := a.Assign(v4("new"), ips("198.18.100.7", "198.18.100.9"))
	wantErr(t, err, ReasonAddressInUse, "service default/new: address 198.18.100.7 is in use by service default/old (give both Services the same sharing key to share it)")
	// The loser still reserves what it holds alone, so .9 is not handed out.
	if got := a.Addrs("default/new"); !reflect.DeepEqual(got, ips("198.18.100.9")) {
		t.Errorf("reserved %v, want 198.18.100.9", got)
	}
	req := v4("third")
	req.Addresses = ips("198.18.100.9")
	_, err = a.Assign(req, nil)
	wantErr(t, err, ReasonAddressInUse, "service default/third: address 198.18.100.9 is in use by service default/new (give both Services the same sharing key to share it)")
	// A failed Assign of a known owner leaves its allocation alone.
	bad := v4("old")
	bad.Addresses = ips("198.18.100.9")
	if _, err := a.Assign(bad, ips("198.18.100.7")); err == nil {
		t.Fatal("taken address accepted")
	}
	if got := a.Addrs("default/old"); !reflect.DeepEqual(got, ips("198.18.100.7")) {
		t.Errorf("old now holds %v", got)
	}
	// Moving to a free requested address releases the old one.
	move := v4("old")
	move.Addresses = ips("198.18.100.20")
	assign(t, a, move, "198.18.100.7")
	if o := a.Owners(netip.MustParseAddr("198.18.100.7")); o != nil {
		t.Errorf("198.18.100.7 still owned by %v", o)
	}
}

func TestSetPools(t *testing.T) {
	a := newAlloc(t, pool("a", "198.18.100.0/24"), pool("b", "198.18.101.0/24"))
	assign(t, a, v4("x")) // 198.18.100.0
	y := v4("y")
	y.Pool = "a"                          // names its pool from the start
	assign(t, a, y, "198.18.100.200")     // kept
	assign(t, a, v4("z"), "198.18.101.5") // pool b
	prodOnly := pool("b", "198.18.101.0/24")
	prodOnly.Namespaces = []string{"prod"}

	// Shrink a; b stops admitting default: y and z are orphans, and keep their addresses.
	orphans, err := a.SetPools([]Pool{pool("a", "198.18.100.0/25"), prodOnly})
	if err != nil || !reflect.DeepEqual(orphans, []string{"default/y", "default/z"}) {
		t.Fatalf("SetPools = %v, %v", orphans, err)
	}
	if got := a.Orphaned("default/y"); !reflect.DeepEqual(got, ips("198.18.100.200")) {
		t.Errorf("Orphaned(y) = %v", got)
	}
	if got := a.Orphaned("default/x"); got != nil {
		t.Errorf("Orphaned(x) = %v", got)
	}
	if got := assign(t, a, y, "198.18.100.200"); !reflect.DeepEqual(got, ips("198.18.100.200")) {
		t.Errorf("orphan y moved to %v", got)
	}
	if got := assign(t, a, v4("z"), "198.18.101.5"); !reflect.DeepEqual(got, ips("198.18.101.5")) {
		t.Errorf("orphan z moved to %v", got)
	}
	if _, ok := a.PoolOf(netip.MustParseAddr("198.18.100.200")); ok {
		t.Error("PoolOf(orphaned address) found a pool")
	}
	// Asking for another pool moves the orphan.
	moved := v4("z")
	moved.Pool = "a"
	if got := assign(t, a, moved, "198.18.101.5"); !reflect.DeepEqual(got, ips("198.18.100.1")) {
		t.Errorf("z asked for pool a, got %v", got)
	}
	// Growing back: y is no orphan any more, and nobody was given its address meanwhile.
	orphans, err = a.SetPools([]Pool{pool("a", "198.18.100.0/24"), prodOnly})
	if err != nil || orphans != nil {
		t.Fatalf("SetPools = %v, %v", orphans, err)
	}
	for range 200 {
		a.Assign(v4(fmt.Sprint("fill", len(a.allocs))), nil)
	}
	if got := a.Owners(netip.MustParseAddr("198.18.100.200")); !reflect.DeepEqual(got, []string{"default/y"}) {
		t.Errorf("198.18.100.200 owned by %v", got)
	}
	if name, ok := a.PoolOf(netip.MustParseAddr("::ffff:198.18.100.3")); !ok || name != "a" {
		t.Errorf("PoolOf = %q, %v", name, ok)
	}

	for _, c := range []struct {
		pools []Pool
		want  string
	}{
		{[]Pool{pool("Edge", "198.18.100.0/24")}, `pool name "Edge" is not a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)`},
		{[]Pool{pool("", "198.18.100.0/24")}, "pool name is empty"},
		{[]Pool{pool("edge")}, `pool "edge" has no addresses`},
		{[]Pool{pool("a", "198.18.100.0/24"), pool("a", "198.18.101.0/24")}, `pool "a" is defined twice`},
		{[]Pool{pool("a", "198.18.100.0/24"), pool("b", "198.18.101.0/24", "198.18.100.128/25")},
			`pools "a" and "b" overlap: 198.18.100.0/24 and 198.18.100.128/25`},
		{[]Pool{pool("a", "198.18.100.0/24", "198.18.100.10")}, `pool "a": ranges 198.18.100.0/24 and 198.18.100.10 overlap`},
		{[]Pool{{Name: "a", Ranges: []Range{{}}}}, `pool "a": invalid IP-invalid IP is not a range of one family, lowest address first`},
		{[]Pool{{Name: "a", Ranges: []Range{{ips("198.18.100.9")[0], ips("198.18.100.1")[0]}}}},
			`pool "a": 198.18.100.9-198.18.100.1 is not a range of one family, lowest address first`},
		{[]Pool{{Name: "a", Ranges: []Range{mustRange("198.18.100.1")}, Namespaces: []string{""}}}, `pool "a": empty namespace name`},
		{[]Pool{{Name: "a", Ranges: []Range{mustRange("198.18.100.1")}, ServiceSelector: map[string]string{"": "x"}}},
			`pool "a": service selector has an empty label name`},
	} {
		before := slices.Clone(a.pools)
		_, err := a.SetPools(c.pools)
		if err == nil || err.Error() != c.want {
			t.Errorf("SetPools(%v) = %v\nwant %s", c.pools, err, c.want)
		}
		if !reflect.DeepEqual(a.pools, before) {
			t.Errorf("a failed SetPools changed the pools")
		}
	}
}

func TestHugePool(t *testing.T) {
	a := newAlloc(t, pool("v6", "2001:db8:1::/64", "2001:db8:2::/48"))
	req := Request{Service: "default/a", Families: []Family{IPv6}}
	for i := range 1000 {
		req.Service = fmt.Sprint("default/s", i)
		got := assign(t, a, req)
		if want := netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", i)); got[0] != want {
			t.Fatalf("service %d got %v, want %s", i, got, want)
		}
	}
	if u := a.Usage(); !reflect.DeepEqual(u, []PoolUsage{{Pool: "v6", Family: IPv6, Size: math.MaxUint64, Used: 1000}}) {
		t.Errorf("Usage = %+v", u)
	}
	a.Release("default/s500")
	req.Service = "default/again"
	if got := assign(t, a, req); got[0] != netip.MustParseAddr("2001:db8:1::1f4") {
		t.Errorf("got %v, want the released 2001:db8:1::1f4", got)
	}
	// The very last address of the IPv6 space: Next would overflow.
	top := newAlloc(t, Pool{Name: "top", AutoAssign: true, Ranges: []Range{{
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}}})
	assign(t, top, Request{Service: "x/a", Families: []Family{IPv6}})
	assign(t, top, Request{Service: "x/b", Families: []Family{IPv6}})
	_, err := top.Assign(Request{Service: "x/c", Families: []Family{IPv6}}, nil)
	wantErr(t, err, ReasonPoolExhausted, `service x/c: pool "top" exhausted (2 of 2 IPv6 addresses in use)`)
}

// TestDeterminism feeds two allocators the same requests in the same order.
func TestDeterminism(t *testing.T) {
	run := func() [][]netip.Addr {
		a := newAlloc(t, pool("a", "198.18.100.0/28", "2001:db8:100::/124"), pool("b", "198.18.101.0/28"))
		var out [][]netip.Addr
		for i := range 40 {
			req := Request{Service: fmt.Sprint("ns/s", i%25), Families: []Family{IPv4, IPv6}, SharingKey: fmt.Sprint(i % 3),
				Ports: []Port{{datapath.TCP, uint16(i % 4)}}, Labels: map[string]string{"x": "y"}}
			got, _ := a.Assign(req, nil)
			out = append(out, got)
			if i%7 == 0 {
				a.Release(fmt.Sprint("ns/s", i/2))
			}
		}
		return out
	}
	first := run()
	for range 5 {
		if got := run(); !reflect.DeepEqual(got, first) {
			t.Fatalf("runs disagree:\n%v\n%v", first, got)
		}
	}
}

// TestSharingAcrossNamespaces: a refusal names no Service and no sharing key of another
// namespace, and a sharing key shares an address across namespaces only in a pool that allows
// it. On the code before, the refusal quoted tenant-a/web and its key, and tenant b, retrying
// with that key, got tenant a's VIP (and could take :80 beside its :443).
func TestSharingAcrossNamespaces(t *testing.T) {
	cross := pool("cross", "198.18.101.0/24")
	cross.CrossNamespaceSharing, cross.AutoAssign = true, false
	a := newAlloc(t, pool("edge", "198.18.100.0/24"), cross)
	victim := Request{Service: "tenant-a/web", Namespace: "tenant-a", Families: []Family{IPv4}, SharingKey: "acme-7f3",
		Ports: []Port{{datapath.TCP, 443}}}
	vip := assign(t, a, victim)
	attacker := func(key string) Request {
		return Request{Service: "tenant-b/grab", Namespace: "tenant-b", Families: []Family{IPv4}, SharingKey: key,
			Addresses: vip, Ports: []Port{{datapath.TCP, 80}}}
	}
	want := "service tenant-b/grab: address 198.18.100.0 is in use by a Service of another namespace " +
		"(addresses are shared across namespaces only in pools with crossNamespaceSharing)"
	for _, key := range []string{"", "guess", "acme-7f3"} {
		_, err := a.Assign(attacker(key), nil)
		wantErr(t, err, ReasonAddressInUse, want)
		var e *Error
		if errors.As(err, &e) && e.Other != "" {
			t.Errorf("key %q: Other = %q, want another namespace's Service unnamed", key, e.Other)
		}
	}
	if o := a.Owners(vip[0]); !reflect.DeepEqual(o, []string{"tenant-a/web"}) {
		t.Errorf("owners of %s = %v, want tenant-a/web alone", vip[0], o)
	}
	// Allocating with the key does not land on the victim's address either.
	grab := attacker("acme-7f3")
	grab.Addresses = nil
	if got := assign(t, a, grab); slices.Equal(got, vip) {
		t.Errorf("tenant-b/grab with tenant a's key was given its VIP %v", got)
	}
	a.Release("tenant-b/grab")

	// A pool that allows it shares under one key; a wrong key or none gets the same message.
	shared := victim
	shared.Service, shared.Pool = "tenant-a/api", "cross"
	cvip := assign(t, a, shared)
	other := Request{Service: "tenant-b/api", Namespace: "tenant-b", Families: []Family{IPv4}, SharingKey: "acme-7f3",
		Pool: "cross", Ports: []Port{{datapath.TCP, 80}}}
	if got := assign(t, a, other); !slices.Equal(got, cvip) {
		t.Errorf("tenant-b/api in a crossNamespaceSharing pool got %v, want the shared %v", got, cvip)
	}
	for _, key := range []string{"", "guess"} {
		r := other
		r.Service, r.SharingKey, r.Addresses = "tenant-b/other", key, cvip
		_, err := a.Assign(r, nil)
		wantErr(t, err, ReasonAddressInUse, "service tenant-b/other: address 198.18.101.0 is in use by a Service of another namespace")
	}
	clashing := other
	clashing.Service, clashing.Addresses, clashing.Ports = "tenant-b/tls", cvip, []Port{{datapath.TCP, 443}}
	_, err := a.Assign(clashing, nil)
	wantErr(t, err, ReasonPortsClash, "service tenant-b/tls: address 198.18.101.0 is shared with a Service of another namespace, which already uses 443/TCP")
}
