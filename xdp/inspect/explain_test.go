// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// explain runs ExplainFlow for client -> to (TCP unless proto says otherwise) with seed (nil:
// the attached program's).
func (l *lab) explain(t *testing.T, client, to string, proto datapath.Protocol, seed *uint32) Explanation {
	t.Helper()
	q := FlowQuery{Client: netip.MustParseAddrPort(client), To: netip.MustParseAddrPort(to), Proto: cmp.Or(proto, datapath.TCP), Seed: seed}
	e, err := ExplainFlow(l.p, q)
	if err != nil {
		t.Fatalf("explain %s -> %s/%s: %v", client, to, q.Proto, err)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

// hasStep reports whether e has a step named name saying something matching re.
func hasStep(e Explanation, name, re string) bool {
	return slices.ContainsFunc(e.Steps, func(s Step) bool { return s.Step == name && regexp.MustCompile(re).MatchString(s.Says) })
}

// TestExplainFlow: for 20 flows the program balanced over five backends, ExplainFlow gives the
// backend the program chose, by the conntrack entry and by the Maglev pick of a new connection,
// with the seed and timeouts read from the attached program (the chance of a wrong hash passing
// is 5^-20); and the other cases: nothing attached (the seed must be given, expiry unchecked), an
// all-ports VIP, no VIP, outside the source ranges, no entry, an empty slot, another seed, an
// expired UDP entry.
func TestExplainFlow(t *testing.T) {
	l := newLab(t)
	// Nothing attached: the seed must be given, and the entries' expiry cannot be checked.
	_, err := ExplainFlow(l.p, FlowQuery{Client: netip.MustParseAddrPort("198.18.0.30:5000"), To: netip.MustParseAddrPort("198.18.100.3:80"),
		Proto: datapath.TCP})
	if !errors.Is(err, ErrSeedUnknown) || !errors.Is(err, gateway.ErrNotAttached) {
		t.Errorf("explain with nothing attached and no seed: %v", err)
	}
	if e := l.explain(t, "198.18.0.30:5000", "198.18.100.3:80", 0, ptr[uint32](labSeed)); e.Conntrack != ctUnchecked ||
		e.Established == "" || e.NewFlow != e.Established || !hasStep(e, "conntrack", `expiry not checked \(.*no interface attached`) {
		t.Errorf("explain with a seed, nothing attached: %+v", e)
	}
	a, b := netlab.New(t, netlab.Prefix()+"a"), netlab.New(t, netlab.Prefix()+"b")
	netlab.Veth(t, a, "x0", "02:00:00:00:00:01", b, "x1", "02:00:00:00:00:02")
	l.must(t, a.Do(func() error { return l.d.Attach("x0", datapath.AttachAuto, datapath.RoleBoth) }))

	// The settings the attached program runs with, all of them.
	st, iface, err := l.p.Settings()
	if want := l.opts.Settings.WithDefaults(); err != nil || iface != "x0" || st != want {
		t.Errorf("the attached program's settings: %+v through %q, %v; want %+v through x0", st, iface, err, want)
	}

	flows, err := ReadFlows(l.p, v4c, 0)
	l.must(t, err)
	if flows.Total != 20 {
		t.Fatalf("flows of 198.18.100.3: %d, want 20", flows.Total)
	}
	picked := map[string]int{}
	for _, fl := range flows.Flows {
		e := l.explain(t, fl.Src, fl.Dst, 0, nil)
		picked[fl.Backend]++
		if e.Seed == nil || *e.Seed != labSeed || e.Conntrack != "used" || e.Established != fl.Backend || e.NewFlow != fl.Backend ||
			e.Handshake != "" {
			t.Errorf("explain %s -> %s (to %s): %+v", fl.Src, fl.Dst, fl.Backend, e)
		}
	}
	t.Logf("20 flows over 5 backends: %v", picked)
	if len(picked) < 2 {
		t.Errorf("20 flows all went to %v: the test does not exercise the hash", picked)
	}

	e := l.explain(t, "198.18.0.10:3000", "198.18.100.2:443", 0, nil)
	if e.Frontend != "198.18.100.2:*/TCP" || e.Established != "198.18.1.13:443" || e.NewFlow != "198.18.1.13:443" ||
		e.Verdict != "established packets to 198.18.1.13:443; a SYN on its tuple: to 198.18.1.13:443 (kept while the flow lives); a new connection after it: to 198.18.1.13:443" ||
		!hasStep(e, "syn", `^a SYN on this live flow's tuple keeps backend 3 198\.18\.1\.13:443 `) ||
		!hasStep(e, "conntrack", `of 2h0m0s$`) {
		t.Errorf("explain, the all-ports VIP: %+v", e)
	}
	out := text(t, e)
	if !regexp.MustCompile(`(?m)^conntrack +backend 3 198\.18\.1\.13:443 \(VIP 198\.18\.100\.2:\*/TCP\), idle [0-9.]+m?s of 2h0m0s$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^=> +established packets to 198\.18\.1\.13:443; `).MatchString(out) ||
		!regexp.MustCompile(`^flow +198\.18\.0\.10:3000 -> 198\.18\.100\.2:443/TCP\n`).MatchString(out) {
		t.Errorf("explain, the all-ports VIP, as text:\n%s", out)
	}
	t.Logf("xlb show flow:\n%s", out)
	// The JSON document keeps its fields (the lab and operators read them).
	js, err := json.Marshal(e)
	l.must(t, err)
	for _, k := range []string{"client", "to", "proto", "frontend", "vipID", "m", "seed", "hash", "slot", "newFlow", "conntrack",
		"established", "steps", "verdict"} {
		if !strings.Contains(string(js), `"`+k+`":`) {
			t.Errorf("explain as JSON: no %q in %s", k, js)
		}
	}
	if e := l.explain(t, "198.18.0.10:1", "198.18.100.9:80", 0, nil); e.Frontend != "" || e.Conntrack != "none" ||
		e.Verdict != "a new connection (SYN), or a packet of an unknown one: not balanced: passed to the host" {
		t.Errorf("explain, no VIP: %+v", e)
	}
	if e := l.explain(t, "198.18.9.1:1", "198.18.100.1:80", 0, nil); e.NewFlow != "" || e.M != 13 ||
		!hasStep(e, "source ranges", `^198\.18\.9\.1 is in none of 198\.18\.0\.0/24: dropped \(drop_src_range\)$`) ||
		e.Verdict != "a new connection (SYN), or a packet of an unknown one: dropped (drop_src_range)" {
		t.Errorf("explain, outside the source ranges: %+v", e)
	}
	if e := l.explain(t, "198.18.0.10:1000", "198.18.100.1:80", 0, nil); e.Conntrack != "used" || e.Established == "" ||
		!hasStep(e, "source ranges", `^198\.18\.0\.10 is allowed \(198\.18\.0\.0/24\)$`) ||
		!hasStep(e, "frontend", `affinity ClientIP`) {
		t.Errorf("explain, inside the source ranges: %+v", e)
	}
	e = l.explain(t, "198.18.0.99:4242", "198.18.100.3:80", 0, nil)
	if e.Conntrack != "none" || e.Established != "" || e.Slot == nil || e.Hash == nil || *e.Slot != int(*e.Hash%13) || e.M != 13 ||
		*e.Hash != datapath.FlowHash(labSeed, netip.MustParseAddr("198.18.0.99"), 4242, 80, datapath.TCP, false) ||
		!hasStep(e, "conntrack", `^no entry$`) || slices.ContainsFunc(e.Steps, func(s Step) bool { return s.Step == "handshake" }) {
		t.Errorf("explain, a new flow: %+v", e)
	}
	for c := uint16(1); ; c++ { // a client whose slot of VIP 3 is one of the two empty ones
		e := l.explain(t, fmt.Sprintf("198.18.0.77:%d", c), "198.18.100.2:22", 0, nil)
		if *e.Slot == 0 || *e.Slot == 5 {
			if e.NewFlow != "" || !hasStep(e, "maglev", `: empty, dropped \(drop_no_backend\)$`) ||
				e.Verdict != "a new connection (SYN), or a packet of an unknown one: dropped (drop_no_backend)" {
				t.Errorf("explain, an empty slot: %+v", e)
			}
			break
		}
		if c == 200 {
			t.Fatal("no client of 200 hashes to an empty slot of 2 in 13")
		}
	}
	if e := l.explain(t, "198.18.0.99:4242", "198.18.100.3:80", 0, ptr[uint32](7)); e.Seed == nil || *e.Seed != 7 ||
		*e.Hash != datapath.FlowHash(7, netip.MustParseAddr("198.18.0.99"), 4242, 80, datapath.TCP, false) {
		t.Errorf("explain with seed 7: %+v", e)
	}
	// An IPv4 flow written with IPv4-mapped addresses is the same flow.
	if e := l.explain(t, "[::ffff:198.18.0.10]:3000", "[::ffff:198.18.100.2]:443", 0, nil); e.Established != "198.18.1.13:443" {
		t.Errorf("explain, IPv4-mapped: %+v", e)
	}
	udpClient := netip.MustParseAddrPort("198.18.0.31:5353")
	l.send(t, udpFrame(t, udpClient, netip.AddrPortFrom(v4c, 53)))
	e = l.explain(t, udpClient.String(), "198.18.100.3:53", datapath.UDP, nil)
	if e.Conntrack != "none" || e.Handshake == "" || e.Handshake != e.NewFlow ||
		e.Verdict != "the flow's next datagram to "+e.Handshake+" (where its first went); a new flow: to "+e.NewFlow ||
		!hasStep(e, "first datagram", `first datagram seen .* ago: the flow's second datagram follows it and enters conntrack$`) {
		t.Errorf("explain, a UDP flow after one datagram: %+v", e)
	}
	l.send(t, udpFrame(t, udpClient, netip.AddrPortFrom(v4c, 53)))
	e = l.explain(t, udpClient.String(), "198.18.100.3:53", datapath.UDP, nil)
	if e.Conntrack != "used" || e.Established == "" || e.Established != e.NewFlow || e.Verdict != "datagrams to "+e.Established {
		t.Errorf("explain, a UDP flow: %+v", e)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1 s UDP timeout (entries are stamped once a second)
	if e := l.explain(t, udpClient.String(), "198.18.100.3:53", datapath.UDP, ptr[uint32](7)); e.Conntrack != "expired" ||
		e.Established != "" || !strings.HasPrefix(e.Verdict, "a new flow: to ") || !hasStep(e, "conntrack", `of 1s: expired`) {
		t.Errorf("explain, an expired UDP flow (a seed given: the timeouts still read): %+v", e)
	}
	// A deleted backend: its flows are balanced again.
	l.must(t, l.d.DeleteBackend(3))
	if e := l.explain(t, "198.18.0.10:3000", "198.18.100.2:443", 0, nil); e.Conntrack != "backend-gone" || e.Established != "" ||
		!hasStep(e, "conntrack", `^backend 3 \(deleted\): the flow is balanced again$`) {
		t.Errorf("explain, a deleted backend: %+v", e)
	}
	for _, q := range []FlowQuery{
		{Client: netip.MustParseAddrPort("198.18.0.10:1"), To: netip.MustParseAddrPort("[2001:db8::1]:80"), Proto: datapath.TCP},
		{Client: netip.MustParseAddrPort("198.18.0.10:1"), To: netip.MustParseAddrPort("198.18.100.1:80"), Proto: 132},
		{Client: netip.MustParseAddrPort("[::ffff:198.18.0.1]:1"), To: netip.MustParseAddrPort("[2001:db8::1]:80"), Proto: datapath.TCP},
		{To: netip.MustParseAddrPort("198.18.100.1:80"), Proto: datapath.TCP},
	} {
		if _, err := ExplainFlow(l.p, q); err == nil || q.Validate() == nil {
			t.Errorf("explain %+v: no error", q)
		}
	}
}

// TestExplainHandshake: a TCP handshake in flight, as the program's handshake table holds it.
// Two SYNs run through the program; then the frontend's table changes to a third backend, and
// the first SYN's backend stays up while the second's goes down. ExplainFlow says the first
// handshake's ACK follows its SYN and the second's is balanced again (both new connections going
// to the new table's backend); the two ACKs run through the program then land where it said.
func TestExplainHandshake(t *testing.T) {
	l := newLab(t)
	hsVIP := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.4"), 80)
	l.must(t, l.d.UpsertVIP(datapath.Frontend{Addr: hsVIP.Addr(), Port: hsVIP.Port(), Proto: datapath.TCP}, datapath.VIPConfig{ID: 8}))
	endpoint := map[datapath.BackendID]string{}
	for i := range 5 {
		id, ep := datapath.BackendID(13+i), netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(30 + i)}), 8080)
		l.must(t, l.d.UpsertBackend(id, datapath.Backend{Addr: ep.Addr(), Port: ep.Port()}))
		endpoint[id] = ep.String()
	}
	l.must(t, l.d.SetMaglevTable(8, fill(13, 13, 14, 15, 16, 17)))

	// The first SYN, then SYNs of other ports until one goes to another backend.
	const isn = 0x7f000000
	syn := func(port uint16) datapath.Handshake {
		t.Helper()
		c := netip.AddrPortFrom(client, port)
		l.send(t, tcpFrame(t, c, hsVIP, true, isn))
		h, ok, err := l.p.Handshake(c, hsVIP, datapath.TCP)
		if err != nil || !ok || h.ISN != isn || h.VIP != 8 || endpoint[h.Backend] == "" {
			t.Fatalf("the handshake entry of the SYN from %s: %+v %v %v", c, h, ok, err)
		}
		return h
	}
	first := syn(7000)
	var second datapath.Handshake
	for port := uint16(7001); ; port++ {
		if second = syn(port); second.Backend != first.Backend {
			break
		}
		if port == 7100 {
			t.Fatal("100 SYNs all went to one backend of 5")
		}
	}
	var third datapath.BackendID
	for id := range endpoint {
		if id != first.Backend && id != second.Backend {
			third = id
			break
		}
	}
	l.must(t, l.d.SetMaglevTable(8, fill(13, third)))
	l.must(t, l.d.UpsertBackend(second.Backend, datapath.Backend{Addr: netip.MustParseAddrPort(endpoint[second.Backend]).Addr(), Port: 8080, Down: true}))

	seed := ptr[uint32](labSeed) // nothing attached
	e := l.explain(t, first.Client.String(), hsVIP.String(), 0, seed)
	if e.Handshake != endpoint[first.Backend] || e.NewFlow != endpoint[third] || e.Conntrack != "none" || e.Established != "" ||
		!hasStep(e, "handshake", fmt.Sprintf(`^backend %d %s \(VIP id 8\), SYN seen [0-9.]+m?s ago, ISN %d: the handshake's ACK and a retransmitted SYN follow it$`,
			first.Backend, regexp.QuoteMeta(endpoint[first.Backend]), uint32(isn))) ||
		e.Verdict != fmt.Sprintf("the handshake in flight (its ACK) to %s; a new connection (SYN): to %s", endpoint[first.Backend], endpoint[third]) {
		t.Errorf("explain, a handshake in flight:\n%s%+v", text(t, e), e)
	}
	if js, err := json.Marshal(e); err != nil || !strings.Contains(string(js), `"handshake":"`+endpoint[first.Backend]+`"`) {
		t.Errorf("explain, a handshake in flight, as JSON: %s %v", js, err)
	}
	t.Logf("xlb show flow, a handshake in flight:\n%s", text(t, e))
	e = l.explain(t, second.Client.String(), hsVIP.String(), 0, seed)
	if e.Handshake != "" || e.NewFlow != endpoint[third] ||
		!hasStep(e, "handshake", fmt.Sprintf(`^backend %d %s \(down\) \(VIP id 8\), .*: not followed`, second.Backend, regexp.QuoteMeta(endpoint[second.Backend]))) ||
		e.Verdict != "a new connection (SYN), or a packet of an unknown one: to "+endpoint[third] {
		t.Errorf("explain, a handshake whose backend is down:\n%s%+v", text(t, e), e)
	}

	// The ACKs, through the program: each lands where ExplainFlow said.
	hits := func() uint64 {
		rs, err := l.p.ReasonCounts()
		l.must(t, err)
		return rs[gateway.ReasonHandshakeHit]
	}
	before := hits()
	for _, c := range []struct {
		h    datapath.Handshake
		want datapath.BackendID
	}{{first, first.Backend}, {second, third}} {
		l.send(t, tcpFrame(t, c.h.Client, hsVIP, false, isn+1))
		fl, ok, err := l.p.Flow(c.h.Client, hsVIP, datapath.TCP)
		if err != nil || !ok || fl.Backend != c.want {
			t.Errorf("the ACK from %s: conntrack %+v %v %v, want backend %d", c.h.Client, fl, ok, err, c.want)
		}
	}
	if n := hits() - before; n != 1 {
		t.Errorf("handshake_hit counted %d times, want once", n)
	}
	// The first handshake is done: conntrack holds it, the handshake table no more.
	e = l.explain(t, first.Client.String(), hsVIP.String(), 0, seed)
	if e.Conntrack != ctUnchecked || e.Established != endpoint[first.Backend] || e.Handshake != "" ||
		slices.ContainsFunc(e.Steps, func(s Step) bool { return s.Step == "handshake" }) {
		t.Errorf("explain, a handshake done:\n%s", text(t, e))
	}
}

// TestExplainDSR: a new flow to a backend of direct server return is said to be carried, with
// the frontend the carrier names; one to a plain backend is not.
func TestExplainDSR(t *testing.T) {
	l := newLab(t)
	vip := netip.MustParseAddr("198.18.100.5")
	l.must(t, l.d.UpsertVIP(datapath.Frontend{Addr: vip, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 9}))
	l.must(t, l.d.UpsertBackend(20, datapath.Backend{Addr: netip.MustParseAddr("198.18.1.50"), Port: 8080, DSR: true}))
	l.must(t, l.d.SetMaglevTable(9, fill(13, 20)))
	e := l.explain(t, "198.18.0.40:5000", "198.18.100.5:80", 0, ptr[uint32](labSeed))
	if !e.Carried || e.NewFlow != "198.18.1.50:8080" || !hasStep(e, "dsr", `carry 198\.18\.100\.5:80/TCP`) {
		t.Errorf("a new flow to a DSR backend: %+v", e)
	}
	l.must(t, l.d.UpsertBackend(20, datapath.Backend{Addr: netip.MustParseAddr("198.18.1.50"), Port: 8080}))
	if e := l.explain(t, "198.18.0.40:5000", "198.18.100.5:80", 0, ptr[uint32](labSeed)); e.Carried || hasStep(e, "dsr", ".") {
		t.Errorf("a new flow to a plain backend: %+v", e)
	}
}
