package reconcile

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, opts xdp.Options) *xdp.Datapath {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the reconciler tests drive the real datapath: run them as root (make test)")
	}
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 4096
	}
	if opts.MaglevSlots == 0 {
		opts.MaglevSlots = 1 << 20
	}
	if opts.PinPath == "" {
		opts.NoPin = true
	}
	d, err := xdp.Load(opts)
	must(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func web(backends ...string) lb.Service {
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

func plan(t *testing.T, svcs ...lb.Service) *lb.Desired {
	t.Helper()
	d, errs := lb.Plan(svcs, lb.PlanOptions{Seed: 7, TableSize: 251})
	if len(errs) > 0 {
		t.Fatalf("plan: %v", errs)
	}
	return d
}

// checkDatapath verifies the datapath holds exactly what d plans, table slot by table slot.
func checkDatapath(t *testing.T, dp *xdp.Datapath, d *lb.Desired) {
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
		cfg, ok := vips[xdpFrontend(f)]
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
			want := p.Backends[idx].Key
			if netip.AddrPortFrom(got.Addr, got.Port) != want {
				t.Fatalf("frontend %s slot %d: backend %v, plan %s", f, i, got, want)
			}
		}
	}
	rev, err := dp.Reverses()
	must(t, err)
	if len(rev) != len(d.Reverse) {
		t.Fatalf("datapath has %d reverse entries, plan %d", len(rev), len(d.Reverse))
	}
}

// TestApplyIsDiffBasedAndIdempotent: a first Apply writes the plan; the same plan again writes
// nothing; a changed backend set rewrites only that frontend's table; removals clean up.
func TestApplyIsDiffBasedAndIdempotent(t *testing.T) {
	dp := load(t, xdp.Options{})
	r, err := New(dp, nil)
	must(t, err)
	other := lb.Service{Name: "default/other", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
		Ports:    []lb.Port{{Port: 443, Protocol: datapath.TCP}},
		Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.20"), Weight: 1}}}
	d1 := plan(t, web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"), other)
	res, err := r.Apply(d1)
	must(t, err)
	if res.VIPsWritten != 5 || res.TablesWritten != 5 {
		t.Fatalf("first apply: %+v", res)
	}
	checkDatapath(t, dp, d1)
	res, err = r.Apply(d1)
	must(t, err)
	if res.Changes() != 0 {
		t.Fatalf("second apply of the same plan wrote %+v", res)
	}

	// A third IPv4 backend: only the two IPv4 frontends of web get new tables.
	d2 := plan(t, web("198.18.1.10", "198.18.1.11", "198.18.1.12", "2001:db8:1::10"), other)
	res, err = r.Apply(d2)
	must(t, err)
	if res.TablesWritten != 2 || res.VIPsWritten != 0 || res.BackendsWritten != 2 || res.ReverseWritten != 2 {
		t.Fatalf("adding a backend wrote %+v", res)
	}
	checkDatapath(t, dp, d2)

	// A backend drains: still configured (its flows stay), out of the tables.
	drain := web("198.18.1.10", "198.18.1.11", "198.18.1.12", "2001:db8:1::10")
	drain.Backends[0].State = lb.Draining
	d3 := plan(t, drain, other)
	res, err = r.Apply(d3)
	must(t, err)
	if res.TablesWritten != 2 || res.BackendsDeleted != 0 {
		t.Fatalf("draining a backend wrote %+v", res)
	}
	checkDatapath(t, dp, d3)

	// Removing a service removes its VIP, its backends and its reverse entries.
	d4 := plan(t, drain)
	res, err = r.Apply(d4)
	must(t, err)
	if res.VIPsDeleted != 1 || res.BackendsDeleted != 1 || res.ReverseDeleted != 1 {
		t.Fatalf("removing a service wrote %+v", res)
	}
	checkDatapath(t, dp, d4)
}

// TestAdoptPinnedState: a new process adopts what the last one left pinned and, given the same
// services, writes nothing.
func TestAdoptPinnedState(t *testing.T) {
	dir := "/sys/fs/bpf/" + netlab.Prefix()
	opts := xdp.Options{PinPath: dir, MaglevSlots: 1 << 20, Settings: datapath.Settings{ConntrackSize: 4096}}
	t.Cleanup(func() {
		if d, err := xdp.Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(dir)
	})
	d := plan(t, web("198.18.1.10", "198.18.1.11", "2001:db8:1::10"))
	dp1, err := xdp.Load(opts)
	must(t, err)
	r1, err := New(dp1, nil)
	must(t, err)
	_, err = r1.Apply(d)
	must(t, err)
	must(t, dp1.Close())

	dp2 := load(t, opts)
	r2, err := New(dp2, nil)
	must(t, err)
	res, err := r2.Apply(d)
	must(t, err)
	if res.Changes() != 0 {
		t.Fatalf("adopting process rewrote %+v", res)
	}
	checkDatapath(t, dp2, d)
}

// failing wraps the datapath and fails writes of one backend address.
type failing struct {
	*xdp.Datapath
	addr netip.Addr
}

func (f failing) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	if b.Addr == f.addr {
		return errors.New("injected failure")
	}
	return f.Datapath.UpsertBackend(id, b)
}

// TestApplyFailureIsContained: a backend that cannot be written keeps its frontends on their old
// tables (never a table naming an unwritten backend), the error says what failed, other services
// are applied, and the next Apply finishes the job.
func TestApplyFailureIsContained(t *testing.T) {
	dp := load(t, xdp.Options{})
	f := failing{Datapath: dp}
	r, err := New(f, nil)
	must(t, err)
	other := lb.Service{Name: "default/other", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
		Ports:    []lb.Port{{Port: 443, Protocol: datapath.TCP}},
		Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.20"), Weight: 1}}}
	d1 := plan(t, web("198.18.1.10"), other)
	_, err = r.Apply(d1)
	must(t, err)

	f.addr = netip.MustParseAddr("198.18.1.11")
	r.dp = f
	d2 := plan(t, web("198.18.1.10", "198.18.1.11"), lb.Service{Name: "default/other", VIPs: other.VIPs, Ports: other.Ports,
		Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.20"), Weight: 1}, {Addr: netip.MustParseAddr("198.18.1.21"), Weight: 1}}})
	res, err := r.Apply(d2)
	if err == nil || !strings.Contains(err.Error(), "198.18.1.11") || !strings.Contains(err.Error(), "keeping its old table") {
		t.Fatalf("apply with a failing backend: %v", err)
	}
	if res.TablesWritten != 1 {
		t.Fatalf("the unaffected service should get its new table: %+v", res)
	}
	m := mix(d1, d2, "default/web")
	for ep := range d2.Reverse {
		if ep.Addr != f.addr {
			m.Reverse[ep] = d2.Reverse[ep]
		}
	}
	checkDatapath(t, dp, m)

	f.addr = netip.Addr{}
	r.dp = f
	_, err = r.Apply(d2)
	must(t, err)
	checkDatapath(t, dp, d2)
}

// mix is d2 with the frontends of service svc as in d1.
func mix(d1, d2 *lb.Desired, svc string) *lb.Desired {
	out := &lb.Desired{Frontends: map[datapath.Frontend]*lb.FrontendPlan{}, Reverse: map[datapath.Endpoint]lb.ReversePlan{}}
	for f, p := range d2.Frontends {
		out.Frontends[f] = p
		if p.Service == svc {
			out.Frontends[f] = d1.Frontends[f]
		}
	}
	return out
}

// TestPlannedTrafficFlows: a SYN to the VIP goes to the backend the plan's table names for the
// flow's slot (the datapath hashes exactly as xdp.FlowHash).
func TestPlannedTrafficFlows(t *testing.T) {
	p := netlab.Prefix()
	ns := netlab.New(t, p+"g")
	peer := netlab.New(t, p+"p")
	netlab.Veth(t, ns, "ext0", "02:00:00:00:01:01", peer, "extp", "02:00:00:00:0c:01")
	netlab.Veth(t, ns, "int0", "02:00:00:00:01:02", peer, "intp", "02:00:00:00:0b:01")
	for _, c := range []string{"addr add 198.18.0.1/24 dev ext0", "addr add 198.18.1.1/24 dev int0"} {
		ns.MustIP(t, c)
	}
	bes := []string{"198.18.1.10", "198.18.1.11", "198.18.1.12"}
	for i, b := range bes {
		ns.MustIP(t, fmt.Sprintf("neigh replace %s lladdr 02:00:00:00:0b:1%d dev int0 nud permanent", b, i))
	}
	ns.Forwarding(t)
	dp := load(t, xdp.Options{Settings: datapath.Settings{Seed: 7}})
	var ext int
	must(t, ns.Do(func() error {
		for _, n := range []string{"ext0", "int0"} {
			if err := dp.Attach(n, datapath.AttachAuto); err != nil {
				return err
			}
		}
		i, err := net.InterfaceByName("ext0")
		ext = i.Index
		return err
	}))
	r, err := New(dp, nil)
	must(t, err)
	d := plan(t, web(bes...))
	_, err = r.Apply(d)
	must(t, err)
	fp := d.Frontends[datapath.Frontend{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: datapath.TCP}]
	client := netip.MustParseAddr("198.18.0.10")
	seen := map[string]bool{}
	for port := uint16(40000); port < 40060; port++ {
		want := fp.Backends[fp.Table[datapath.FlowHash(7, client, port, 80, 6, false)%uint32(len(fp.Table))]].Key
		var res progrun.Result
		must(t, ns.Do(func() error {
			var err error
			res, err = progrun.XDP(dp.Program(), syn(t, client, port), ext, 1)
			return err
		}))
		dst := netip.AddrFrom4([4]byte(res.Data[30:34]))
		dport := uint16(res.Data[36])<<8 | uint16(res.Data[37])
		if got := netip.AddrPortFrom(dst, dport); got != want || res.Verdict != 4 {
			t.Fatalf("flow from port %d: verdict %d to %s, plan says %s", port, res.Verdict, got, want)
		}
		seen[want.String()] = true
	}
	if len(seen) != 3 {
		t.Fatalf("60 flows reached only %v", seen)
	}
}

func syn(t *testing.T, src netip.Addr, sport uint16) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP,
		SrcIP: src.AsSlice(), DstIP: net.ParseIP("198.18.100.1").To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 80, SYN: true, Window: 1000}
	must(t, tcp.SetNetworkLayerForChecksum(ip))
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0xc, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 1, 1},
		EthernetType: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	must(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp))
	return buf.Bytes()
}

// failingVIP fails every VIP write.
type failingVIP struct{ *xdp.Datapath }

func (failingVIP) UpsertVIP(datapath.Frontend, datapath.VIPConfig) error {
	return errors.New("injected failure")
}

// TestFailedVIPUpdateKeepsReverse: when a frontend's update fails, its old configuration and table
// keep serving, and so do its reverse NAT entries (replies must still get the VIP back).
func TestFailedVIPUpdateKeepsReverse(t *testing.T) {
	dp := load(t, xdp.Options{})
	r, err := New(dp, nil)
	must(t, err)
	s := web("198.18.1.10", "198.18.1.11")
	_, err = r.Apply(plan(t, s))
	must(t, err)
	before, err := dp.Reverses()
	must(t, err)

	r.dp = failingVIP{dp}
	s.Affinity = datapath.AffinityClientIP
	res, err := r.Apply(plan(t, s))
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
	r.dp = dp
	res, err = r.Apply(plan(t, s))
	must(t, err)
	if res.VIPsWritten == 0 {
		t.Fatalf("the retry did not rewrite the VIPs: %+v", res)
	}
}

// TestUnhealthyBackendIsDown: a backend failing its health check everywhere is marked down (even
// its established flows move); a draining one is not (its flows stay).
func TestUnhealthyBackendIsDown(t *testing.T) {
	dp := load(t, xdp.Options{})
	r, err := New(dp, nil)
	must(t, err)
	s := web("198.18.1.10", "198.18.1.11", "198.18.1.12")
	s.Backends[0].State = lb.Unhealthy
	s.Backends[1].State = lb.Draining
	_, err = r.Apply(plan(t, s))
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

// recording records the order of table and backend writes.
type recording struct {
	*xdp.Datapath
	ops []string
}

func (r *recording) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	if b.Down {
		r.ops = append(r.ops, "down "+b.Addr.String())
	}
	return r.Datapath.UpsertBackend(id, b)
}

func (r *recording) SetMaglevTable(id datapath.VIPID, t []datapath.BackendID) error {
	r.ops = append(r.ops, "table")
	return r.Datapath.SetMaglevTable(id, t)
}

// TestDownAfterTables: a backend is marked down only after every table leaves it out; marked
// down while a table still names it, it would drop the first packets of new flows.
func TestDownAfterTables(t *testing.T) {
	dp := load(t, xdp.Options{})
	rec := &recording{Datapath: dp}
	r, err := New(rec, nil)
	must(t, err)
	s := web("198.18.1.10", "198.18.1.11")
	_, err = r.Apply(plan(t, s))
	must(t, err)
	rec.ops = nil
	s.Backends[1].State = lb.Unhealthy
	_, err = r.Apply(plan(t, s))
	must(t, err)
	last := rec.ops[len(rec.ops)-1]
	if last != "down 198.18.1.11" || !slices.Contains(rec.ops, "table") {
		t.Fatalf("write order %v: the backend must go down after the tables", rec.ops)
	}
}

// TestAmbiguousCandidates: an endpoint shared by two services gets an ambiguous reverse entry
// naming both VIPs (by id) as Maglev candidates; applying the same plan again writes nothing.
func TestAmbiguousCandidates(t *testing.T) {
	if datapath.MaxReverseCandidates != datapath.MaxReverseCandidates {
		t.Fatalf("lb plans %d reverse candidates, the datapath holds %d", datapath.MaxReverseCandidates, datapath.MaxReverseCandidates)
	}
	dp := load(t, xdp.Options{})
	r, err := New(dp, nil)
	must(t, err)
	api := lb.Service{Name: "default/api", VIPs: []netip.Addr{netip.MustParseAddr("198.18.100.2")},
		Ports:    []lb.Port{{Port: 80, Protocol: datapath.TCP, TargetPort: 8080}},
		Backends: []lb.Backend{{Addr: netip.MustParseAddr("198.18.1.10"), Weight: 1}}}
	d := plan(t, web("198.18.1.10", "198.18.1.11"), api)
	_, err = r.Apply(d)
	must(t, err)
	checkDatapath(t, dp, d)
	vips, err := dp.VIPs()
	must(t, err)
	rev, err := dp.Reverses()
	must(t, err)
	ep := datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.10"), Port: 8080, Proto: datapath.TCP}
	want := datapath.ReverseNAT{Ambiguous: true}
	for i, f := range d.Reverse[datapath.Endpoint{Addr: ep.Addr, Port: 8080, Proto: datapath.TCP}].Candidates {
		want.Candidates[i] = vips[xdpFrontend(f)].ID
	}
	if got := rev[ep]; got != want || got.Candidates[0] == 0 || got.Candidates[1] == 0 || got.Candidates[2] != 0 {
		t.Fatalf("shared endpoint: %+v, want %+v (web and api)", got, want)
	}
	res, err := r.Apply(d)
	must(t, err)
	if res.Changes() != 0 {
		t.Fatalf("second apply of the same plan wrote %+v", res)
	}
	// api leaves: the endpoint serves web only, statelessly again.
	d = plan(t, web("198.18.1.10", "198.18.1.11"))
	_, err = r.Apply(d)
	must(t, err)
	rev, err = dp.Reverses()
	must(t, err)
	if got := rev[ep]; got.Ambiguous || got.Candidates != ([datapath.MaxReverseCandidates]datapath.VIPID{}) {
		t.Fatalf("endpoint of web alone: %+v", got)
	}
}
