// SPDX-License-Identifier: Apache-2.0
package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The ConnectReconciler's tests run against fakeConnect, an in-memory datapath.Connect: no
// kernel, no root. xdp/socklb's own tests hold the real datapath to the contract.

// fakeConnect is a datapath.Connect in memory that records every call and fails the writes
// of the frontends in fail.
type fakeConnect struct {
	held map[datapath.Frontend]datapath.ConnectFrontend
	// ops: every call, in order: "set F", "delete F", "commit true|false".
	ops []string
	// fail: frontends whose Set or Delete fails (and changes nothing).
	fail map[datapath.Frontend]bool
	// commitErr is what Commit returns.
	commitErr error
}

var errFake = errors.New("fake datapath: write refused")

func newFakeConnect() *fakeConnect {
	return &fakeConnect{held: map[datapath.Frontend]datapath.ConnectFrontend{}, fail: map[datapath.Frontend]bool{}}
}

func (f *fakeConnect) ConnectFrontends() (map[datapath.Frontend]datapath.ConnectFrontend, error) {
	out := map[datapath.Frontend]datapath.ConnectFrontend{}
	for k, v := range f.held {
		out[k] = datapath.ConnectFrontend{Endpoints: slices.Clone(v.Endpoints), AffinityTimeout: v.AffinityTimeout}
	}
	return out, nil
}

func (f *fakeConnect) SetConnectFrontend(fr datapath.Frontend, cf datapath.ConnectFrontend) error {
	f.ops = append(f.ops, "set "+fr.String())
	if f.fail[fr] {
		return errFake
	}
	f.held[fr] = datapath.ConnectFrontend{Endpoints: slices.Clone(cf.Endpoints), AffinityTimeout: cf.AffinityTimeout}
	return nil
}

func (f *fakeConnect) DeleteConnectFrontend(fr datapath.Frontend) error {
	f.ops = append(f.ops, "delete "+fr.String())
	if f.fail[fr] {
		return errFake
	}
	delete(f.held, fr)
	return nil
}

func (f *fakeConnect) Commit(complete bool) error {
	f.ops = append(f.ops, fmt.Sprint("commit ", complete))
	return f.commitErr
}

// takeOps returns the calls recorded since the last takeOps.
func (f *fakeConnect) takeOps() []string {
	ops := f.ops
	f.ops = nil
	return ops
}

var _ datapath.Connect = (*fakeConnect)(nil)

func cfront(s string, proto datapath.Protocol) datapath.Frontend {
	ap := netip.MustParseAddrPort(s)
	return datapath.Frontend{Addr: ap.Addr(), Port: ap.Port(), Proto: proto}
}

// ceps is a frontend without affinity sending to endpoints eps.
func ceps(eps ...string) datapath.ConnectFrontend {
	out := []netip.AddrPort{}
	for _, e := range eps {
		out = append(out, netip.MustParseAddrPort(e))
	}
	return datapath.ConnectFrontend{Endpoints: out}
}

var (
	webTCP = cfront("198.18.96.1:80", datapath.TCP)
	dnsUDP = cfront("198.18.96.10:53", datapath.UDP)
	dnsTCP = cfront("198.18.96.10:53", datapath.TCP)
	v6UDP  = cfront("[2001:db8:96::10]:53", datapath.UDP)
)

// connectPlan is a plan of four frontends, IPv4 and IPv6, TCP and UDP.
func connectPlan() lb.ConnectPlan {
	return lb.ConnectPlan{
		webTCP: {Endpoints: ceps("198.18.1.10:8080", "198.18.1.11:8080").Endpoints, AffinityTimeout: 3 * time.Hour},
		dnsUDP: ceps("198.18.1.20:5353", "198.18.1.21:5353"),
		dnsTCP: ceps("198.18.1.20:5353"),
		v6UDP:  ceps("[2001:db8:1::20]:5353"),
	}
}

func newConnect(t *testing.T, dp datapath.Connect) *ConnectReconciler {
	t.Helper()
	r, err := NewConnect(dp, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConnectApply: a plan is written in order and committed complete; the same plan again
// writes nothing (but still commits, so that the datapath frees what it replaced); a change
// writes only what changed, removals first.
func TestConnectApply(t *testing.T) {
	dp := newFakeConnect()
	r := newConnect(t, dp)
	p := connectPlan()
	res, err := r.Apply(p)
	if err != nil || res != (ConnectResult{Added: 4}) {
		t.Fatalf("first Apply: %+v, %v; want 4 added", res, err)
	}
	want := []string{"set 198.18.96.1:80/TCP", "set 198.18.96.10:53/TCP", "set 198.18.96.10:53/UDP", "set [2001:db8:96::10]:53/UDP", "commit true"}
	if ops := dp.takeOps(); !slices.Equal(ops, want) {
		t.Errorf("first Apply called\n%s\nwant\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	if !maps.EqualFunc(dp.held, p, datapath.ConnectFrontend.Equal) || r.Frontends() != 4 {
		t.Errorf("datapath holds %v (reconciler: %d), want %v", dp.held, r.Frontends(), p)
	}

	res, err = r.Apply(connectPlan())
	if err != nil || res != (ConnectResult{Unchanged: 4}) || res.Changes() != 0 {
		t.Fatalf("the same plan again: %+v, %v; want 4 unchanged", res, err)
	}
	if ops := dp.takeOps(); !slices.Equal(ops, []string{"commit true"}) {
		t.Errorf("the same plan again called %v, want only the commit", ops)
	}

	// web gains an endpoint; dns/TCP goes; a new frontend comes; an affinity timeout changes.
	p = connectPlan()
	p[webTCP] = datapath.ConnectFrontend{Endpoints: ceps("198.18.1.10:8080", "198.18.1.11:8080", "198.18.1.12:8080").Endpoints, AffinityTimeout: 3 * time.Hour}
	delete(p, dnsTCP)
	p[cfront("198.18.96.2:443", datapath.TCP)] = ceps()
	p[v6UDP] = datapath.ConnectFrontend{Endpoints: p[v6UDP].Endpoints, AffinityTimeout: time.Minute}
	res, err = r.Apply(p)
	if err != nil || res != (ConnectResult{Added: 1, Updated: 2, Removed: 1, Unchanged: 1}) {
		t.Fatalf("a change: %+v, %v", res, err)
	}
	want = []string{"delete 198.18.96.10:53/TCP", "set 198.18.96.1:80/TCP", "set 198.18.96.2:443/TCP", "set [2001:db8:96::10]:53/UDP", "commit true"}
	if ops := dp.takeOps(); !slices.Equal(ops, want) {
		t.Errorf("a change called\n%s\nwant\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
	if !maps.EqualFunc(dp.held, p, datapath.ConnectFrontend.Equal) {
		t.Errorf("datapath holds %v, want %v", dp.held, p)
	}

	// The plan's slices are the caller's: changing them later changes nothing held.
	p[webTCP].Endpoints[0] = netip.MustParseAddrPort("198.18.1.99:1")
	if res, err := r.Apply(p); err != nil || res.Updated != 1 {
		t.Errorf("a plan changed in place: %+v, %v; want web rewritten", res, err)
	}
}

// TestConnectAdopt: a new reconciler over a datapath that holds the plan (an earlier agent's
// pins) writes nothing; over one that holds more, it removes the rest.
func TestConnectAdopt(t *testing.T) {
	dp := newFakeConnect()
	if _, err := newConnect(t, dp).Apply(connectPlan()); err != nil {
		t.Fatal(err)
	}
	dp.takeOps()
	r := newConnect(t, dp)
	if r.Frontends() != 4 {
		t.Errorf("adopted %d frontends, want 4", r.Frontends())
	}
	res, err := r.Apply(connectPlan())
	if err != nil || res != (ConnectResult{Unchanged: 4}) {
		t.Errorf("the adopted plan: %+v, %v; want 4 unchanged", res, err)
	}
	if ops := dp.takeOps(); !slices.Equal(ops, []string{"commit true"}) {
		t.Errorf("the adopted plan called %v, want only the commit", ops)
	}
	p := connectPlan()
	delete(p, dnsUDP)
	r = newConnect(t, dp)
	res, err = r.Apply(p)
	if err != nil || res != (ConnectResult{Removed: 1, Unchanged: 3, UDPLost: 1}) {
		t.Errorf("a smaller plan over adopted frontends: %+v, %v", res, err)
	}
	if _, ok := dp.held[dnsUDP]; ok {
		t.Error("the frontend left out of the plan is still held")
	}
}

// TestConnectDamaged: frontends read back with endpoints missing (the zero AddrPort in their
// place) equal no plan: they are rewritten, and a UDP one counts as having lost an endpoint.
func TestConnectDamaged(t *testing.T) {
	dp := newFakeConnect()
	p := connectPlan()
	for f, cf := range p {
		dp.held[f] = cf
	}
	dp.held[webTCP] = datapath.ConnectFrontend{Endpoints: []netip.AddrPort{netip.MustParseAddrPort("198.18.1.10:8080"), {}}, AffinityTimeout: 3 * time.Hour}
	dp.held[dnsUDP] = datapath.ConnectFrontend{Endpoints: []netip.AddrPort{{}, netip.MustParseAddrPort("198.18.1.21:5353")}}
	r := newConnect(t, dp)
	res, err := r.Apply(p)
	if err != nil || res != (ConnectResult{Updated: 2, Unchanged: 2, UDPLost: 1}) {
		t.Fatalf("Apply over damaged frontends: %+v, %v; want both rewritten, dns counted as UDP lost", res, err)
	}
	want := []string{"set 198.18.96.1:80/TCP", "set 198.18.96.10:53/UDP", "commit true"}
	if ops := dp.takeOps(); !slices.Equal(ops, want) {
		t.Errorf("Apply called %v, want %v", ops, want)
	}
	if !maps.EqualFunc(dp.held, p, datapath.ConnectFrontend.Equal) {
		t.Errorf("datapath holds %v, want %v", dp.held, p)
	}
	// A damaged UDP frontend that goes counts too.
	dp.held[dnsUDP] = datapath.ConnectFrontend{Endpoints: []netip.AddrPort{{}}}
	r = newConnect(t, dp)
	delete(p, dnsUDP)
	if res, err := r.Apply(p); err != nil || res != (ConnectResult{Removed: 1, Unchanged: 3, UDPLost: 1}) {
		t.Errorf("removing a damaged UDP frontend: %+v, %v", res, err)
	}
}

// TestConnectFailedWrite: a write that fails is reported, keeps the datapath's old state for
// that frontend, does not stop the others, makes the pass's Commit incomplete, and is tried
// again by the next Apply.
func TestConnectFailedWrite(t *testing.T) {
	dp := newFakeConnect()
	r := newConnect(t, dp)
	if _, err := r.Apply(connectPlan()); err != nil {
		t.Fatal(err)
	}
	dp.takeOps()

	p := connectPlan()
	refused := cfront("198.18.96.3:80", datapath.TCP)
	p[dnsUDP] = ceps("198.18.1.21:5353")                               // fails: keeps both endpoints
	p[webTCP] = ceps("198.18.1.10:8080")                               // written
	p[refused] = ceps()                                                // fails: not added
	delete(p, v6UDP)                                                   // fails: kept
	p[cfront("198.18.96.4:80", datapath.TCP)] = ceps("198.18.1.40:80") // written
	dp.fail[dnsUDP], dp.fail[v6UDP], dp.fail[refused] = true, true, true
	old := maps.Clone(dp.held)
	res, err := r.Apply(p)
	if err == nil || res != (ConnectResult{Added: 1, Updated: 1, Unchanged: 1}) {
		t.Fatalf("Apply with failing writes: %+v, %v; want 1 added, 1 updated and errors", res, err)
	}
	for _, w := range []string{"frontend 198.18.96.10:53/UDP: " + errFake.Error(), "frontend 198.18.96.3:80/TCP", "remove frontend [2001:db8:96::10]:53/UDP"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if !errors.Is(err, errFake) {
		t.Errorf("error %v does not wrap the datapath's", err)
	}
	if ops := dp.takeOps(); ops[len(ops)-1] != "commit false" {
		t.Errorf("Apply with failing writes called %v, want an incomplete commit last", ops)
	}
	if !dp.held[dnsUDP].Equal(old[dnsUDP]) || !dp.held[v6UDP].Equal(old[v6UDP]) {
		t.Errorf("the failed frontends changed: %v", dp.held)
	}
	if r.Frontends() != 5 {
		t.Errorf("reconciler holds %d frontends, want 5 (web, dns×2, v6 kept, the added one)", r.Frontends())
	}

	// The same plan, the datapath well again: only what failed is written.
	clear(dp.fail)
	res, err = r.Apply(p)
	if err != nil || res != (ConnectResult{Added: 1, Updated: 1, Removed: 1, Unchanged: 3, UDPLost: 2}) {
		t.Fatalf("Apply retrying: %+v, %v", res, err)
	}
	want := []string{"delete [2001:db8:96::10]:53/UDP", "set 198.18.96.3:80/TCP", "set 198.18.96.10:53/UDP", "commit true"}
	if ops := dp.takeOps(); !slices.Equal(ops, want) {
		t.Errorf("Apply retrying called %v, want %v", ops, want)
	}
	if !maps.EqualFunc(dp.held, p, datapath.ConnectFrontend.Equal) {
		t.Errorf("datapath holds %v, want %v", dp.held, p)
	}
}

// TestConnectUDPLost: UDPLost counts the UDP frontends that lost an endpoint (updated without
// it, or removed with endpoints), not those that only gained one, nor TCP frontends, nor UDP
// frontends removed without an endpoint.
func TestConnectUDPLost(t *testing.T) {
	a, b, c := "198.18.1.20:5353", "198.18.1.21:5353", "198.18.1.22:5353"
	f := func(i int, proto datapath.Protocol) datapath.Frontend {
		return cfront(fmt.Sprintf("198.18.96.%d:53", i), proto)
	}
	before := lb.ConnectPlan{
		f(1, datapath.UDP): ceps(a, b), // loses b
		f(2, datapath.UDP): ceps(a),    // gains b
		f(3, datapath.UDP): ceps(a),    // moves to c
		f(4, datapath.UDP): ceps(a),    // removed
		f(5, datapath.UDP): ceps(),     // removed, had no endpoint
		f(6, datapath.UDP): ceps(a),    // loses every endpoint
		f(7, datapath.TCP): ceps(a, b), // loses b: TCP is left to end on its own
		f(8, datapath.TCP): ceps(a),    // removed
		f(9, datapath.UDP): ceps(a, b), // unchanged
	}
	after := lb.ConnectPlan{
		f(1, datapath.UDP): ceps(a),
		f(2, datapath.UDP): ceps(a, b),
		f(3, datapath.UDP): ceps(c),
		f(6, datapath.UDP): ceps(),
		f(7, datapath.TCP): ceps(a),
		f(9, datapath.UDP): ceps(a, b),
	}
	dp := newFakeConnect()
	r := newConnect(t, dp)
	if res, err := r.Apply(before); err != nil || res.UDPLost != 0 {
		t.Fatalf("first Apply: %+v, %v; want nothing lost", res, err)
	}
	res, err := r.Apply(after)
	if err != nil || res != (ConnectResult{Updated: 5, Removed: 3, Unchanged: 1, UDPLost: 4}) {
		t.Errorf("Apply: %+v, %v; want 4 UDP frontends lost an endpoint (1, 3, 4, 6)", res, err)
	}
	// Back: 2 loses b, 3 moves back to a. A UDP frontend whose update fails has lost nothing
	// yet: it counts when it is written.
	dp.fail[f(2, datapath.UDP)] = true
	if res, err := r.Apply(before); err == nil || res.UDPLost != 1 {
		t.Errorf("Apply back with 2's write failing: %+v, %v; want 1 UDP frontend lost an endpoint (3)", res, err)
	}
	clear(dp.fail)
	if res, err := r.Apply(before); err != nil || res != (ConnectResult{Updated: 1, Unchanged: 8, UDPLost: 1}) {
		t.Errorf("Apply back again: %+v, %v; want 2 written and counted", res, err)
	}
}

// TestConnectCommit: every Apply ends with one Commit, complete only when every write of the
// pass succeeded; a Commit's error is reported, and the next Apply commits again.
func TestConnectCommit(t *testing.T) {
	dp := newFakeConnect()
	r := newConnect(t, dp)
	dp.commitErr = errors.New("replace the old pins: no room")
	res, err := r.Apply(connectPlan())
	if err == nil || !strings.Contains(err.Error(), "commit: replace the old pins: no room") || res.Added != 4 {
		t.Errorf("Apply with Commit failing: %+v, %v", res, err)
	}
	if ops := dp.takeOps(); len(ops) != 5 || ops[4] != "commit true" {
		t.Errorf("Apply called %v, want 4 sets and a complete commit", ops)
	}
	dp.commitErr = nil
	if _, err := r.Apply(connectPlan()); err != nil {
		t.Fatal(err)
	}
	if ops := dp.takeOps(); !slices.Equal(ops, []string{"commit true"}) {
		t.Errorf("Apply after a failed Commit called %v, want a complete commit again", ops)
	}
	// Empty plans commit too (complete: nothing failed).
	r = newConnect(t, newFakeConnect())
	if res, err := r.Apply(lb.ConnectPlan{}); err != nil || res != (ConnectResult{}) {
		t.Errorf("an empty plan: %+v, %v", res, err)
	}
	if ops := r.dp.(*fakeConnect).ops; !slices.Equal(ops, []string{"commit true"}) {
		t.Errorf("an empty plan called %v", ops)
	}
}

// BenchmarkConnectApply10k: the reconciler's own work (the diff, the sort, the bookkeeping)
// for a node agent's plan of 10,000 frontends of 3 endpoints, on the in-memory datapath: what
// each pass costs before and besides the map writes (xdp/socklb's BenchmarkApply10k).
func BenchmarkConnectApply10k(b *testing.B) {
	const n = 10000
	p := make(lb.ConnectPlan, n)
	for i := range n {
		f := datapath.Frontend{Addr: netip.AddrFrom4([4]byte{198, 18, 96 + byte(i>>8), byte(i)}), Port: 80, Proto: datapath.TCP}
		var cf datapath.ConnectFrontend
		for j := range 3 {
			cf.Endpoints = append(cf.Endpoints, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), uint16(8080+j)))
		}
		p[f] = cf
	}
	r, err := NewConnect(newFakeConnect(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.Apply(p); err != nil {
		b.Fatal(err)
	}
	f := datapath.Frontend{Addr: netip.MustParseAddr("198.18.96.7"), Port: 80, Proto: datapath.TCP}
	orig := p[f]
	b.Run("one-change", func(b *testing.B) {
		i := 0
		for b.Loop() {
			cf := datapath.ConnectFrontend{Endpoints: slices.Clone(orig.Endpoints)}
			cf.Endpoints[0] = netip.AddrPortFrom(cf.Endpoints[0].Addr(), uint16(9000+i%2))
			p[f] = cf
			i++
			if res, err := r.Apply(p); err != nil || res.Updated != 1 {
				b.Fatalf("Apply: %+v, %v", res, err)
			}
		}
	})
}
