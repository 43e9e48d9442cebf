// SPDX-License-Identifier: Apache-2.0
package socklb

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// site is a namespace whose loopback holds four backends (b10 and b11, IPv4 and IPv6), each
// answering TCP on 8080 and UDP on 5353 with its name, and a cgroup with the programs
// attached. Cluster IPs are 198.18.200.0/24 and 2001:db8:200::/64: nothing in the namespace
// routes them, so a connect the programs leave alone fails with ENETUNREACH.
type site struct {
	ns     *netlab.NS
	cgroup string
	dp     *Datapath
}

var (
	b10  = netip.MustParseAddr("198.18.1.10")
	b11  = netip.MustParseAddr("198.18.1.11")
	b10s = netip.MustParseAddr("2001:db8:1::10")
	b11s = netip.MustParseAddr("2001:db8:1::11")
)

func newSite(t *testing.T) *site {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("needs root (cgroup BPF programs, network namespaces)")
	}
	s := &site{ns: netlab.New(t, netlab.Prefix()+"sl")}
	names := map[netip.Addr]string{b10: "b10", b11: "b11", b10s: "b10", b11s: "b11"}
	for a := range names {
		bits := 32
		if a.Is6() {
			bits = 128
		}
		s.ns.MustIP(t, "addr add "+netip.PrefixFrom(a, bits).String()+" dev lo nodad")
	}
	for a, name := range names {
		s.ns.ServeName(t, "tcp", netip.AddrPortFrom(a, 8080), name)
		s.ns.ServeName(t, "udp", netip.AddrPortFrom(a, 5353), name)
	}
	root, err := RootCgroup()
	if err != nil {
		t.Fatal(err)
	}
	s.cgroup = filepath.Join(root, "xlb-test-"+netlab.Prefix())
	if err := os.Mkdir(s.cgroup, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := netlab.RemoveCgroup(s.cgroup); err != nil {
			t.Error(err)
		}
	})
	dp, err := Load(Options{Cgroup: s.cgroup})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Error(err)
		}
	})
	s.dp = dp
	return s
}

// client runs the client process with actions (see runAction) in the site's namespace, inside
// its cgroup unless outside is set, and returns its reports.
func (s *site) client(t *testing.T, outside bool, actions ...string) []report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", s.ns.Name, os.Args[0], "-test.run=^TestClientHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), envClient+"="+strings.Join(actions, ","))
	if !outside {
		cg, err := netlab.InCgroup(cmd, s.cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client %v: %v\n%s", actions, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, reportTag); ok {
			var r []report
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatalf("client report %q: %v", rest, err)
			}
			return r
		}
	}
	t.Fatalf("client %v printed no report:\n%s", actions, out)
	return nil
}

// plan is the frontends a test wants the Datapath to hold (lb.ConnectPlan's shape: packages
// under xdp/ do not import lb).
type plan map[datapath.Frontend]datapath.ConnectFrontend

// changes counts what apply wrote.
type changes struct{ set, deleted int }

// apply makes d hold p through the contract, as lb/reconcile's ConnectReconciler does: it
// deletes the frontends d holds that p lacks, then sets those that differ (a frontend read back
// damaged differs from every plan) in order, then commits, complete when every write
// succeeded.
func apply(d *Datapath, p plan) (changes, error) {
	var ch changes
	held, err := d.ConnectFrontends()
	if err != nil {
		return ch, err
	}
	var errs []error
	for f := range held {
		if _, keep := p[f]; keep {
			continue
		}
		if err := d.DeleteConnectFrontend(f); err != nil {
			errs = append(errs, err)
			continue
		}
		ch.deleted++
	}
	var fronts []datapath.Frontend
	for f, cf := range p {
		if cur, had := held[f]; !had || !cur.Equal(cf) {
			fronts = append(fronts, f)
		}
	}
	slices.SortFunc(fronts, datapath.Frontend.Compare)
	for _, f := range fronts {
		if err := d.SetConnectFrontend(f, p[f]); err != nil {
			errs = append(errs, err)
			continue
		}
		ch.set++
	}
	return ch, errors.Join(append(errs, d.Commit(len(errs) == 0))...)
}

func ep(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// eps is a frontend without affinity sending to endpoints e.
func eps(e ...netip.AddrPort) datapath.ConnectFrontend { return datapath.ConnectFrontend{Endpoints: e} }

func front(addr string, port uint16, proto datapath.Protocol) datapath.Frontend {
	return datapath.Frontend{Addr: netip.MustParseAddr(addr), Port: port, Proto: proto}
}

// count tallies answers by server name.
func count(answers []string) map[string]int {
	m := map[string]int{}
	for _, a := range answers {
		m[a]++
	}
	return m
}

func allEqual(xs []string, want string) bool {
	return len(xs) > 0 && !slices.ContainsFunc(xs, func(x string) bool { return x != want })
}

func TestSocketBalancing(t *testing.T) {
	s := newSite(t)
	p := plan{
		front("198.18.200.1", 80, datapath.TCP):    eps(ep(b10, 8080), ep(b11, 8080)),
		front("198.18.200.1", 53, datapath.UDP):    eps(ep(b10, 5353), ep(b11, 5353)),
		front("2001:db8:200::1", 80, datapath.TCP): eps(ep(b10s, 8080), ep(b11s, 8080)),
		front("198.18.200.2", 80, datapath.TCP):    eps(),
	}
	ch, err := apply(s.dp, p)
	if err != nil || ch != (changes{set: 4}) {
		t.Fatalf("apply: %+v, %v", ch, err)
	}
	if got, err := s.dp.ConnectFrontends(); err != nil || !samePlan(got, p) {
		t.Errorf("ConnectFrontends: %v, %v; want %v", got, err, p)
	}
	r := s.client(t, false,
		"tcp=198.18.200.1:80*60", "tcp=[2001:db8:200::1]:80*40", "mapped=198.18.200.1:80*20",
		"udp=198.18.200.1:53*10", "udpconn=198.18.200.1:53*20",
		"tcp=198.18.200.2:80", "tcp=198.18.1.10:8080", "tcp=198.18.200.1:81")

	for _, i := range []int{0, 1, 2, 4} { // spread over both backends, the cluster IP as peer
		c := count(r[i].Answers)
		if r[i].Err != "" || c["b10"] == 0 || c["b11"] == 0 || c["b10"]+c["b11"] != len(r[i].Answers) {
			t.Errorf("%s: answers %v, error %q: want both backends and nothing else", r[i].Action, c, r[i].Err)
		}
	}
	for i, peer := range []string{"198.18.200.1:80", "[2001:db8:200::1]:80", "[::ffff:198.18.200.1]:80", "198.18.200.1:53", "198.18.200.1:53"} {
		if !allEqual(r[i].Peers, peer) {
			t.Errorf("%s: peers %v, want %s throughout", r[i].Action, r[i].Peers, peer)
		}
	}
	// One unconnected socket's datagrams keep one backend.
	if c := count(r[3].Answers); r[3].Err != "" || len(c) != 1 || len(r[3].Answers) != 10 {
		t.Errorf("udp: answers %v, error %q: want 10 from one backend", c, r[3].Err)
	}
	if r[5].Err != "ECONNREFUSED" {
		t.Errorf("service without endpoints: error %q, want ECONNREFUSED", r[5].Err)
	}
	if r[6].Err != "" || !allEqual(r[6].Answers, "b10") || !allEqual(r[6].Peers, "198.18.1.10:8080") {
		t.Errorf("a backend's own address: %+v, want b10 untouched", r[6])
	}
	if r[7].Err != "ENETUNREACH" {
		t.Errorf("another port of the cluster IP: error %q, want ENETUNREACH (left alone)", r[7].Err)
	}
	c, err := s.dp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Connects != 60+40+20+20 || c.Refused != 1 || c.Datagrams != 10 || c.DatagramsKept != 9 || c.NoSlot != 0 || c.Revnat < 30 {
		t.Errorf("counters %+v", c)
	}

	// Outside the cgroup nothing is balanced.
	if r := s.client(t, true, "tcp=198.18.200.1:80"); r[0].Err != "ENETUNREACH" {
		t.Errorf("outside the cgroup: error %q, want ENETUNREACH", r[0].Err)
	}

	// One backend left: every connection goes there; a removed frontend is left alone.
	p[front("198.18.200.1", 80, datapath.TCP)] = eps(ep(b11, 8080))
	delete(p, front("2001:db8:200::1", 80, datapath.TCP))
	ch, err = apply(s.dp, p)
	if err != nil || ch != (changes{set: 1, deleted: 1}) {
		t.Fatalf("apply: %+v, %v", ch, err)
	}
	r = s.client(t, false, "tcp=198.18.200.1:80*20", "tcp=[2001:db8:200::1]:80")
	if r[0].Err != "" || !allEqual(r[0].Answers, "b11") {
		t.Errorf("after the update: %+v, want b11 only", r[0])
	}
	if r[1].Err != "ENETUNREACH" {
		t.Errorf("removed frontend: error %q, want ENETUNREACH", r[1].Err)
	}
	// The replaced and removed slot sets stay until the next pass's Commit (a program may have
	// read their id just before this one's), which deletes them.
	if n := mapLen(t, s.dp.objs.Slots); n != 3+4 {
		t.Errorf("slots holds %d entries, want 7 (3 live, 4 retired)", n)
	}
	if ch, err := apply(s.dp, p); err != nil || ch != (changes{}) {
		t.Fatalf("apply again: %+v, %v", ch, err)
	}
	if n := mapLen(t, s.dp.objs.Slots); n != 1+2 {
		t.Errorf("slots holds %d entries, want 3", n)
	}
	if n := mapLen(t, s.dp.objs.Members); n != 1+2 {
		t.Errorf("members holds %d entries, want 3", n)
	}
}

// samePlan reports whether a and b hold the same frontends.
func samePlan(a, b plan) bool {
	return maps.EqualFunc(a, b, datapath.ConnectFrontend.Equal)
}

// TestSetRefusesBadFrontends: a frontend that cannot be written is reported and keeps what it
// had; the others are written.
func TestSetRefusesBadFrontends(t *testing.T) {
	s := newSite(t)
	good := front("198.18.200.1", 80, datapath.TCP)
	if _, err := apply(s.dp, plan{good: eps(ep(b10, 8080))}); err != nil {
		t.Fatal(err)
	}
	bad := plan{
		good:                                     eps(ep(b10s, 8080)), // the other family: keeps what it had
		front("198.18.200.3", 0, datapath.TCP):   eps(ep(b10, 8080)),
		front("198.18.200.4", 80, 132):           eps(ep(b10, 8080)),
		front("198.18.200.5", 80, datapath.TCP):  eps(ep(b10, 0)),
		front("198.18.200.6", 443, datapath.TCP): eps(ep(b11, 8080)),
	}
	ch, err := apply(s.dp, bad)
	if err == nil || ch.set != 1 {
		t.Fatalf("apply: %+v, %v; want 1 written and errors", ch, err)
	}
	want := plan{good: eps(ep(b10, 8080)), front("198.18.200.6", 443, datapath.TCP): eps(ep(b11, 8080))}
	if got, _ := s.dp.ConnectFrontends(); !samePlan(got, want) {
		t.Errorf("ConnectFrontends after the refusals: %v, want %v", got, want)
	}
	for _, w := range []string{"endpoint [2001:db8:1::10]:8080 is not a usable endpoint", "198.18.200.3:0/TCP: needs an address and a port", "protocol 132", "198.18.1.10:0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	r := s.client(t, false, "tcp=198.18.200.1:80*5", "tcp=198.18.200.6:443")
	if !allEqual(r[0].Answers, "b10") || !allEqual(r[1].Answers, "b11") {
		t.Errorf("clients saw %+v: want the old b10 kept and the good new frontend served", r)
	}
}

// TestUDPAndAffinity: IPv6 datagrams, a connected UDP socket that names its peer on every send,
// and sessionAffinity: ClientIP (the client being the network namespace).
func TestUDPAndAffinity(t *testing.T) {
	s := newSite(t)
	sticky := front("198.18.200.9", 80, datapath.TCP)
	p := plan{
		front("198.18.200.1", 53, datapath.UDP):    eps(ep(b10, 5353), ep(b11, 5353)),
		front("2001:db8:200::1", 53, datapath.UDP): eps(ep(b10s, 5353), ep(b11s, 5353)),
		sticky: {Endpoints: []netip.AddrPort{ep(b10, 8080), ep(b11, 8080)}, AffinityTimeout: time.Minute},
	}
	if _, err := apply(s.dp, p); err != nil {
		t.Fatal(err)
	}
	r := s.client(t, false, "udp=[2001:db8:200::1]:53*8", "udpconnsendto=198.18.200.1:53*20", "tcp=198.18.200.9:80*20")
	if c := count(r[0].Answers); r[0].Err != "" || len(c) != 1 || len(r[0].Answers) != 8 || !allEqual(r[0].Peers, "[2001:db8:200::1]:53") {
		t.Errorf("IPv6 datagrams: %+v: want 8 answers from one backend, from the cluster IP", r[0])
	}
	if c := count(r[1].Answers); r[1].Err != "" || len(c) != 1 || len(r[1].Answers) != 20 {
		t.Errorf("connected socket with sendto: %+v: want 20 answers from its one endpoint", r[1])
	}
	c := count(r[2].Answers)
	if r[2].Err != "" || len(c) != 1 {
		t.Fatalf("affinity: %+v: want every connection on one backend", r[2])
	}
	first := r[2].Answers[0]
	// Another process of the same client (namespace) gets the same endpoint.
	if r := s.client(t, false, "tcp=198.18.200.9:80*10"); !allEqual(r[0].Answers, first) {
		t.Errorf("affinity, second process: %v, want %s throughout", r[0].Answers, first)
	}
	cnt, err := s.dp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.AffinityKept != 29 {
		t.Errorf("AffinityKept = %d, want 29 (every connection but the first)", cnt.AffinityKept)
	}
	// The client's endpoint leaves: it moves to the other, and stays there when the first
	// comes back.
	other := "b11"
	if first == "b11" {
		other = "b10"
	}
	keep := map[string]netip.AddrPort{"b10": ep(b10, 8080), "b11": ep(b11, 8080)}
	p[sticky] = datapath.ConnectFrontend{Endpoints: []netip.AddrPort{keep[other]}, AffinityTimeout: time.Minute}
	if _, err := apply(s.dp, p); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.9:80*5"); !allEqual(r[0].Answers, other) {
		t.Errorf("after its endpoint left: %v, want %s throughout", r[0].Answers, other)
	}
	p[sticky] = datapath.ConnectFrontend{Endpoints: []netip.AddrPort{ep(b10, 8080), ep(b11, 8080)}, AffinityTimeout: time.Minute}
	if _, err := apply(s.dp, p); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.9:80*10"); !allEqual(r[0].Answers, other) {
		t.Errorf("after the first endpoint came back: %v, want %s throughout", r[0].Answers, other)
	}
}

// mapLen counts m's entries.
func mapLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k, v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// pinDir is a new pin directory under /sys/fs/bpf; whatever is pinned there is removed when
// the test ends.
func pinDir(t *testing.T) string {
	t.Helper()
	pin := filepath.Join("/sys/fs/bpf", "xlb-test-"+netlab.Prefix())
	t.Cleanup(func() {
		if err := RemovePinned(pin); err != nil {
			t.Error(err)
		}
	})
	return pin
}

// TestPinnedRestart: with pins, balancing outlives the Datapath; the next Load adopts the maps
// (reading back what they hold, a damaged frontend with a zero AddrPort in place of its missing
// slot, dropping a stray slot set) and Remove detaches everything. Pins it cannot adopt are
// replaced at the first Commit(true), not before.
func TestPinnedRestart(t *testing.T) {
	s := newSite(t)
	pin := pinDir(t)
	web, dns := front("198.18.200.1", 80, datapath.TCP), front("198.18.200.1", 53, datapath.UDP)
	p := plan{
		web: eps(ep(b10, 8080), ep(b11, 8080)),
		dns: eps(ep(b10, 5353)),
	}
	d1, err := Load(Options{Cgroup: s.cgroup, PinPath: pin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apply(d1, p); err != nil {
		t.Fatal(err)
	}
	// A slot set no frontend points to, as an agent killed inside a reconcile pass leaves.
	stray := socklbSlotKey{Id: 999, Slot: 0}
	e := socklbSlotValue{Ep: endpointOf(ep(b11, 1))}
	if err := d1.objs.Slots.Put(&stray, &e); err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*20"); r[0].Err != "" || len(count(r[0].Answers)) != 2 {
		t.Errorf("with the agent gone: %+v, want both backends still", r[0])
	}
	// web's second slot lost while no agent runs (as by something else writing the maps).
	slots, err := ebpf.LoadPinnedMap(filepath.Join(pin, "map_slots"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var webID uint32
	var sk socklbSlotKey
	var sv socklbSlotValue
	for it := slots.Iterate(); it.Next(&sk, &sv); {
		if sv.Ep == endpointOf(ep(b11, 8080)) {
			webID = sk.Id
			break
		}
	}
	if err := slots.Delete(&socklbSlotKey{Id: webID, Slot: 1}); err != nil {
		t.Fatalf("delete web's slot 1 (set %d): %v", webID, err)
	}
	slots.Close()

	d2, err := Load(Options{Cgroup: s.cgroup, PinPath: pin})
	if err != nil {
		t.Fatal(err)
	}
	if d2.Replaced() != nil {
		t.Errorf("pins replaced, not adopted: %v", d2.Replaced())
	}
	if d2.reap == nil {
		t.Errorf("no UDP socket iterator on the adopted maps: %v", d2.reapErr)
	}
	if _, err := Load(Options{Cgroup: s.cgroup, PinPath: pin}); err == nil || !strings.Contains(err.Error(), "in use by another agent") {
		t.Errorf("a second Load on the same pins: %v, want a refusal", err)
	}
	if d2.Frontends() != 2 || d2.nextID <= 2 {
		t.Errorf("adopted %d frontends, next id %d", d2.Frontends(), d2.nextID)
	}
	damaged := plan{web: eps(ep(b10, 8080), netip.AddrPort{}), dns: p[dns]}
	if got, err := d2.ConnectFrontends(); err != nil || !samePlan(got, damaged) {
		t.Errorf("ConnectFrontends after adoption: %v, %v; want %v (the missing slot a zero AddrPort)", got, err, damaged)
	}
	if n := mapLen(t, d2.objs.Slots); n != 2 {
		t.Errorf("slots holds %d entries after adoption, want 2 (the stray set dropped)", n)
	}
	if ch, err := apply(d2, p); err != nil || ch != (changes{set: 1}) {
		t.Errorf("the same plan again: %+v, %v; want the damaged frontend rewritten", ch, err)
	}
	if ch, err := apply(d2, p); err != nil || ch != (changes{}) {
		t.Errorf("the same plan a third time: %+v, %v; want nothing written", ch, err)
	}
	// The damaged set, read back in part, is found by its id and deleted.
	if n := mapLen(t, d2.objs.Slots); n != 3 {
		t.Errorf("slots holds %d entries, want 3 (the damaged set deleted)", n)
	}
	p[web] = eps(ep(b10, 8080))
	if ch, err := apply(d2, p); err != nil || ch != (changes{set: 1}) {
		t.Errorf("one change: %+v, %v", ch, err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*10", "udp=198.18.200.1:53*3"); !allEqual(r[0].Answers, "b10") || !allEqual(r[1].Peers, "198.18.200.1:53") {
		t.Errorf("after adoption: %+v", r)
	}
	// Pins attached to another cgroup are replaced, make before break: the new Load attaches
	// to its own cgroup, the old pins keep balancing until its first Commit(true), then go (the
	// site's cgroup is no longer balanced).
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	other := s.cgroup + "-b"
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlab.RemoveCgroup(other) })
	d3, err := Load(Options{Cgroup: other, PinPath: pin})
	if err != nil {
		t.Fatal(err)
	}
	if r := d3.Replaced(); r == nil || !strings.Contains(r.Error(), "another cgroup") || d3.Frontends() != 0 {
		t.Errorf("Load for another cgroup over the pins: replaced %v, %d frontends; want a replacement", r, d3.Frontends())
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*3"); !allEqual(r[0].Answers, "b10") {
		t.Errorf("the old cgroup before the new Datapath's first Commit: %+v, want still balanced", r[0])
	}
	if err := d3.Commit(false); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80*3"); !allEqual(r[0].Answers, "b10") {
		t.Errorf("the old cgroup after an incomplete pass: %+v, want still balanced", r[0])
	}
	if _, err := apply(d3, plan{}); err != nil {
		t.Fatal(err)
	}
	if r := s.client(t, false, "tcp=198.18.200.1:80"); r[0].Err != "ENETUNREACH" {
		t.Errorf("the old cgroup after the replacement: %+v, want ENETUNREACH", r[0])
	}
	if !HasPins(pin) || d3.Replaced() == nil {
		t.Error("the new objects are not pinned after the replacement")
	}
	if err := d3.Remove(); err != nil {
		t.Fatal(err)
	}
	if HasPins(pin) {
		t.Error("pins left after Remove")
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory left after Remove: %v", err)
	}
}

// TestSockets: Options.Sockets sizes the LRU maps (the iterator's included), out-of-range sizes
// are refused, and pins of another size are replaced rather than adopted.
func TestSockets(t *testing.T) {
	s := newSite(t)
	for _, n := range []int{MinSockets - 1, MaxSockets + 1, -5} {
		if d, err := Load(Options{Cgroup: s.cgroup, Sockets: n}); err == nil {
			d.Close()
			t.Errorf("Load with %d sockets: no error", n)
		}
	}
	pin := filepath.Join("/sys/fs/bpf", "xlb-test-"+netlab.Prefix()+"-sz")
	t.Cleanup(func() { _ = RemovePinned(pin) })
	d, err := Load(Options{Cgroup: s.cgroup, PinPath: pin, Sockets: MinSockets})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*ebpf.Map{d.objs.Affinity, d.objs.ClientAffinity, d.objs.RevnatUdp, d.objs.RevnatTcp} {
		if m.MaxEntries() != MinSockets {
			t.Errorf("map %v holds %d entries, want %d", m, m.MaxEntries(), MinSockets)
		}
	}
	if d.reap == nil {
		t.Errorf("no UDP socket iterator on resized maps: %v", d.reapErr)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Load(Options{Cgroup: s.cgroup, PinPath: pin, Sockets: 2 * MinSockets})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Remove()
	if d2.Replaced() == nil || d2.objs.RevnatUdp.MaxEntries() != 2*MinSockets {
		t.Errorf("Load with another size over the pins: replaced %v, %d entries; want a replacement with %d", d2.Replaced(), d2.objs.RevnatUdp.MaxEntries(), 2*MinSockets)
	}
}
