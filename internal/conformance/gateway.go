// SPDX-License-Identifier: Apache-2.0
package conformance

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Gateway is a gateway datapath implementation under test.
type Gateway struct {
	// New returns an empty datapath, removed when t ends.
	New func(t *testing.T) datapath.Services
	// Reopen returns dp as a new process would find it: a datapath with dp's state, dp itself
	// no longer used (the XDP datapath: dp closed, its pins loaded again).
	Reopen func(t *testing.T, dp datapath.Services) datapath.Services
}

// RunGateway runs every gateway scenario against g, each as a subtest.
func RunGateway(t *testing.T, g Gateway) {
	for _, s := range []struct {
		name string
		run  func(*testing.T, Gateway)
	}{
		{"DiffBasedAndIdempotent", diffBasedAndIdempotent},
		{"AdoptState", adoptState},
		{"FailureIsContained", failureIsContained},
		{"FailedVIPUpdateKeepsReverse", failedVIPUpdateKeepsReverse},
		{"UnhealthyBackendIsDown", unhealthyBackendIsDown},
		{"DownAfterTables", downAfterTables},
		{"AmbiguousCandidates", ambiguousCandidates},
	} {
		t.Run(s.name, func(t *testing.T) { s.run(t, g) })
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Web is the scenarios' main service: an IPv4 and an IPv6 VIP, TCP 80 → 8080 and UDP 53 →
// 5353, over backends.
func Web(backends ...string) lb.Service {
	s := lb.Service{
		Name:  "default/web",
		VIPs:  []netip.Addr{netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8:100::1")},
		Ports: []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}, {Name: "dns", Port: 53, Protocol: datapath.UDP, TargetPort: 5353}},
	}
	for _, b := range backends {
		s.Backends = append(s.Backends, lb.Backend{Addr: netip.MustParseAddr(b), Weight: 1})
	}
	return s
}

// Plan plans svcs as the scenarios do: seed 7, tables of 251 slots.
func Plan(t testing.TB, svcs ...lb.Service) *lb.Desired {
	t.Helper()
	d, errs := lb.Plan(svcs, lb.PlanOptions{Seed: 7, TableSize: 251})
	if len(errs) > 0 {
		t.Fatalf("plan: %v", errs)
	}
	return d
}

// Check verifies that dp holds exactly what d plans, table slot by table slot.
func Check(t testing.TB, dp datapath.Services, d *lb.Desired) {
	t.Helper()
	vips, err := dp.VIPs()
	must(t, err)
	if len(vips) != len(d.Frontends) {
		t.Fatalf("datapath has %d VIPs, plan %d", len(vips), len(d.Frontends))
	}
	bes, err := dp.Backends()
	must(t, err)
	tables, err := dp.MaglevTables()
	must(t, err)
	for f, p := range d.Frontends {
		cfg, ok := vips[f]
		if !ok {
			t.Fatalf("frontend %s missing", f)
		}
		tbl := tables[cfg.ID]
		if len(tbl) != len(p.Table) {
			t.Fatalf("frontend %s: table of %d slots, plan %d", f, len(tbl), len(p.Table))
		}
		for i, idx := range p.Table {
			if idx < 0 {
				if tbl[i] != 0 {
					t.Fatalf("frontend %s slot %d: backend %d, plan: empty", f, i, tbl[i])
				}
				continue
			}
			got := bes[tbl[i]]
			if want := p.Backends[idx].Key; netip.AddrPortFrom(got.Addr, got.Port) != want {
				t.Fatalf("frontend %s slot %d: backend %v, plan %s", f, i, got, want)
			}
			if got.DSR != p.Backends[idx].DSR {
				t.Fatalf("frontend %s slot %d: backend %v has DSR %v, plan %v", f, i, got, got.DSR, p.Backends[idx].DSR)
			}
		}
	}
	rev, err := dp.Reverses()
	must(t, err)
	if len(rev) != len(d.Reverse) {
		t.Fatalf("datapath has %d reverse entries, plan %d", len(rev), len(d.Reverse))
	}
	for ep := range d.Reverse {
		if _, ok := rev[ep]; !ok {
			t.Fatalf("reverse entry of %s missing", ep)
		}
	}
}

func other(backends ...string) lb.Service {
	s := lb.Service{Name: "default/other", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
		Ports: []lb.Port{{Port: 443, Protocol: datapath.TCP}}}
	for _, b := range backends {
		s.Backends = append(s.Backends, lb.Backend{Addr: netip.MustParseAddr(b), Weight: 1})
	}
	return s
}

// diffBasedAndIdempotent: a first Apply writes the plan; the same plan again writes nothing; a
// changed backend set rewrites only that frontend's table; removals clean up.
func diffBasedAndIdempotent(t *testing.T, g Gateway) {
	dp := g.New(t)
	r, err := reconcile.New(dp, nil)
	must(t, err)
	d1 := Plan(t, Web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"), other("198.18.1.20"))
	res, err := r.Apply(d1)
	must(t, err)
	if res.VIPsWritten != 5 || res.TablesWritten != 5 {
		t.Fatalf("first apply: %+v", res)
	}
	Check(t, dp, d1)
	if res, err = r.Apply(d1); err != nil || res.Changes() != 0 {
		t.Fatalf("second apply of the same plan wrote %+v (%v)", res, err)
	}

	// A third IPv4 backend: only the two IPv4 frontends of web get new tables.
	d2 := Plan(t, Web("198.18.1.10", "198.18.1.11", "198.18.1.12", "2001:db8:1::10"), other("198.18.1.20"))
	res, err = r.Apply(d2)
	must(t, err)
	if res.TablesWritten != 2 || res.VIPsWritten != 0 || res.BackendsWritten != 2 || res.ReverseWritten != 2 {
		t.Fatalf("adding a backend wrote %+v", res)
	}
	Check(t, dp, d2)

	// A backend drains: still configured (its flows stay), out of the tables.
	drain := Web("198.18.1.10", "198.18.1.11", "198.18.1.12", "2001:db8:1::10")
	drain.Backends[0].State = lb.Draining
	d3 := Plan(t, drain, other("198.18.1.20"))
	res, err = r.Apply(d3)
	must(t, err)
	if res.TablesWritten != 2 || res.BackendsDeleted != 0 {
		t.Fatalf("draining a backend wrote %+v", res)
	}
	Check(t, dp, d3)

	// Removing a service removes its VIP, its backends and its reverse entries.
	d4 := Plan(t, drain)
	res, err = r.Apply(d4)
	must(t, err)
	if res.VIPsDeleted != 1 || res.BackendsDeleted != 1 || res.ReverseDeleted != 1 {
		t.Fatalf("removing a service wrote %+v", res)
	}
	Check(t, dp, d4)
}

// adoptState: a new process adopts what the last one left and, given the same services,
// writes nothing; it knows which backends served (they take no warm-up).
func adoptState(t *testing.T, g Gateway) {
	d := Plan(t, Web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"))
	dp := g.New(t)
	r1, err := reconcile.New(dp, nil)
	must(t, err)
	_, err = r1.Apply(d)
	must(t, err)

	dp2 := g.Reopen(t, dp)
	r2, err := reconcile.New(dp2, nil)
	must(t, err)
	if got := r2.Serving(); len(got) != 6 { // 3 backends × (8080, 5353)
		t.Errorf("adopted serving backends %v, want the 3 backends' 6 endpoints", got)
	}
	res, err := r2.Apply(d)
	must(t, err)
	if res.Changes() != 0 {
		t.Fatalf("adopting process rewrote %+v", res)
	}
	Check(t, dp2, d)
}

// failing wraps a datapath and fails writes of one backend address, or of every VIP.
type failing struct {
	datapath.Services
	backend netip.Addr
	vips    bool
}

func (f *failing) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	if b.Addr == f.backend {
		return errors.New("injected failure")
	}
	return f.Services.UpsertBackend(id, b)
}

func (f *failing) UpsertVIP(fe datapath.Frontend, c datapath.VIPConfig) error {
	if f.vips {
		return errors.New("injected failure")
	}
	return f.Services.UpsertVIP(fe, c)
}

// failureIsContained: a backend that cannot be written keeps its frontends on their old tables
// (never a table naming an unwritten backend), the error says what failed, other services are
// applied, and the next Apply finishes the job.
func failureIsContained(t *testing.T, g Gateway) {
	dp := g.New(t)
	f := &failing{Services: dp}
	r, err := reconcile.New(f, nil)
	must(t, err)
	d1 := Plan(t, Web("198.18.1.10"), other("198.18.1.20"))
	_, err = r.Apply(d1)
	must(t, err)

	f.backend = netip.MustParseAddr("198.18.1.11")
	d2 := Plan(t, Web("198.18.1.10", "198.18.1.11"), other("198.18.1.20", "198.18.1.21"))
	res, err := r.Apply(d2)
	if err == nil || !strings.Contains(err.Error(), "198.18.1.11") || !strings.Contains(err.Error(), "keeping its old table") {
		t.Fatalf("apply with a failing backend: %v", err)
	}
	if res.TablesWritten != 1 {
		t.Fatalf("the unaffected service should get its new table: %+v", res)
	}
	m := &lb.Desired{Frontends: map[datapath.Frontend]*lb.FrontendPlan{}, Reverse: map[datapath.Endpoint]lb.ReversePlan{}}
	for fe, p := range d2.Frontends {
		m.Frontends[fe] = p
		if p.Service == "default/web" {
			m.Frontends[fe] = d1.Frontends[fe]
		}
	}
	for ep := range d2.Reverse {
		if ep.Addr != f.backend {
			m.Reverse[ep] = d2.Reverse[ep]
		}
	}
	Check(t, dp, m)

	f.backend = netip.Addr{}
	_, err = r.Apply(d2)
	must(t, err)
	Check(t, dp, d2)
}

// failedVIPUpdateKeepsReverse: when a frontend's update fails, its old configuration and table
// keep serving, and so do its reverse NAT entries (replies must still get the VIP back).
func failedVIPUpdateKeepsReverse(t *testing.T, g Gateway) {
	dp := g.New(t)
	f := &failing{Services: dp}
	r, err := reconcile.New(f, nil)
	must(t, err)
	s := Web("198.18.1.10", "198.18.1.11")
	_, err = r.Apply(Plan(t, s))
	must(t, err)
	before, err := dp.Reverses()
	must(t, err)

	f.vips = true
	s.Affinity = datapath.AffinityClientIP
	res, err := r.Apply(Plan(t, s))
	if err == nil {
		t.Fatal("no error for failed VIP writes")
	}
	if res.ReverseDeleted != 0 || res.VIPsDeleted != 0 {
		t.Fatalf("a failed update removed state: %+v", res)
	}
	after, err := dp.Reverses()
	must(t, err)
	if len(after) != len(before) {
		t.Fatalf("reverse entries %d -> %d", len(before), len(after))
	}
	f.vips = false
	res, err = r.Apply(Plan(t, s))
	must(t, err)
	if res.VIPsWritten == 0 {
		t.Fatalf("the retry did not rewrite the VIPs: %+v", res)
	}
}

// unhealthyBackendIsDown: a backend failing its health check everywhere is marked down (even
// its established flows move); a draining one is not (its flows stay).
func unhealthyBackendIsDown(t *testing.T, g Gateway) {
	dp := g.New(t)
	r, err := reconcile.New(dp, nil)
	must(t, err)
	s := Web("198.18.1.10", "198.18.1.11", "198.18.1.12")
	s.Backends[0].State = lb.Unhealthy
	s.Backends[1].State = lb.Draining
	_, err = r.Apply(Plan(t, s))
	must(t, err)
	bes, err := dp.Backends()
	must(t, err)
	down := map[string]bool{}
	for _, b := range bes {
		down[b.Addr.String()] = b.Down
	}
	if !down["198.18.1.10"] || down["198.18.1.11"] || down["198.18.1.12"] {
		t.Fatalf("down flags: %v", down)
	}
}

// recording records the order of table writes and backends marked down.
type recording struct {
	datapath.Services
	ops []string
}

func (r *recording) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	if b.Down {
		r.ops = append(r.ops, "down "+b.Addr.String())
	}
	return r.Services.UpsertBackend(id, b)
}

func (r *recording) SetMaglevTable(id datapath.VIPID, t []datapath.BackendID) error {
	r.ops = append(r.ops, "table")
	return r.Services.SetMaglevTable(id, t)
}

// downAfterTables: a backend is marked down only after every table leaves it out; marked down
// while a table still names it, it would drop the first packets of new flows.
func downAfterTables(t *testing.T, g Gateway) {
	rec := &recording{Services: g.New(t)}
	r, err := reconcile.New(rec, nil)
	must(t, err)
	s := Web("198.18.1.10", "198.18.1.11")
	_, err = r.Apply(Plan(t, s))
	must(t, err)
	rec.ops = nil
	s.Backends[1].State = lb.Unhealthy
	_, err = r.Apply(Plan(t, s))
	must(t, err)
	last := rec.ops[len(rec.ops)-1]
	if last != "down 198.18.1.11" || !slices.Contains(rec.ops, "table") {
		t.Fatalf("write order %v: the backend must go down after the tables", rec.ops)
	}
}

// ambiguousCandidates: an endpoint shared by two services gets an ambiguous reverse entry naming
// both VIPs (by id) as Maglev candidates; applying the same plan again writes nothing; once one
// service leaves, the entry is plain again.
func ambiguousCandidates(t *testing.T, g Gateway) {
	dp := g.New(t)
	r, err := reconcile.New(dp, nil)
	must(t, err)
	api := lb.Service{Name: "default/api", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
		Ports:    []lb.Port{{Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.10"), Weight: 1}}}
	d := Plan(t, Web("198.18.1.10", "198.18.1.11"), api)
	_, err = r.Apply(d)
	must(t, err)
	Check(t, dp, d)
	vips, err := dp.VIPs()
	must(t, err)
	rev, err := dp.Reverses()
	must(t, err)
	ep := datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}
	want := datapath.ReverseNAT{Ambiguous: true}
	for i, f := range d.Reverse[ep].Candidates {
		want.Candidates[i] = vips[f].ID
	}
	if got := rev[ep]; got != want || got.Candidates[0] == 0 || got.Candidates[1] == 0 || got.Candidates[2] != 0 {
		t.Fatalf("shared endpoint: %+v, want %+v (web and api)", got, want)
	}
	res, err := r.Apply(d)
	must(t, err)
	if res.Changes() != 0 {
		t.Fatalf("second apply of the same plan wrote %+v", res)
	}
	d = Plan(t, Web("198.18.1.10", "198.18.1.11"))
	_, err = r.Apply(d)
	must(t, err)
	rev, err = dp.Reverses()
	must(t, err)
	if got := rev[ep]; got.Ambiguous || got.Candidates != ([datapath.MaxReverseCandidates]datapath.VIPID{}) {
		t.Fatalf("endpoint of web alone: %+v", got)
	}
}

// Services returns n services of backends backends each (one TCP port 80 → 8080, an IPv4 VIP
// each in 198.19.0.0/16, backends in 198.18.0.0/16): the scale the control-plane benchmarks
// measure.
func Services(n, backends int) []lb.Service {
	svcs := make([]lb.Service, n)
	for i := range svcs {
		s := lb.Service{
			Name:  "bench/svc-" + strconv.Itoa(i),
			VIPs:  []netip.Addr{netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})},
			Ports: []lb.Port{{Name: "http", Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		}
		for j := range backends {
			k := i*backends + j
			s.Backends = append(s.Backends, lb.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, byte(k >> 8), byte(k)}), Weight: 1})
		}
		svcs[i] = s
	}
	return svcs
}
