package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// checkShow runs `xlb show` against a daemon's pins while the pinned program forwards with no
// daemon: web's frontend with the live backends sharing its table, the down one in no table,
// and conntrack entries of the load, each to a live backend.
func checkShow(t *testing.T, pinPath string, live []netip.Addr, down netip.Addr) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := showCLI(append([]string{"--pin-path", pinPath}, args...), &out, &errb); rc != 0 {
			t.Fatalf("xlb show %v: exit %d: %s", args, rc, errb.String())
		}
		return out.String()
	}
	var doc servicesDoc
	if err := json.Unmarshal([]byte(run("--json")), &doc); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s:%d/TCP", labVIP, labVIPPort)
	if len(doc.Services) != 1 || doc.Services[0].Frontend != want {
		t.Fatalf("xlb show with no daemon: services %+v, want %s", doc.Services, want)
	}
	s := doc.Services[0]
	var got []string
	slots := 0
	for _, b := range s.Backends {
		got = append(got, b.Endpoint)
		slots += b.Slots
		if b.Slots == 0 || b.Down {
			t.Errorf("backend %+v of web: want slots and not down", b)
		}
	}
	var wantEPs []string
	for _, a := range live {
		wantEPs = append(wantEPs, netip.AddrPortFrom(a, labBackendPort).String())
	}
	if !slices.Equal(got, wantEPs) || slots != s.TableSize || s.EmptySlots != 0 || s.Packets == 0 {
		t.Errorf("web in xlb show: %+v, want backends %v sharing its %d slots and packets counted", s, wantEPs, s.TableSize)
	}
	if len(doc.Unmapped) != 1 || doc.Unmapped[0].Endpoint != netip.AddrPortFrom(down, labBackendPort).String() || !doc.Unmapped[0].Down {
		t.Errorf("backends in no table: %+v, want %s down", doc.Unmapped, down)
	}
	text := run()
	if !strings.Contains(text, want) || !strings.Contains(text, "backends in no table") {
		t.Errorf("xlb show prints:\n%s", text)
	}

	var flows flowsDoc
	if err := json.Unmarshal([]byte(run("--json", "--limit", "10", "flows")), &flows); err != nil {
		t.Fatal(err)
	}
	if flows.Total == 0 || len(flows.Flows) == 0 || len(flows.Flows) > 10 {
		t.Fatalf("xlb show flows: %d of %d entries, want some, at most 10", len(flows.Flows), flows.Total)
	}
	// Each of the most recent flows (the load's, balanced since .12 went down) explained: its
	// entry's backend, and the Maglev pick of a new connection, computed with the seed read from
	// the attached program, are the backend the program chose.
	for _, f := range flows.Flows {
		if f.Dst != fmt.Sprintf("%s:%d", labVIP, labVIPPort) || !slices.Contains(wantEPs, f.Backend) || f.Proto != "TCP" {
			t.Errorf("flow %+v: want to %s:%d, balanced to one of %v", f, labVIP, labVIPPort, wantEPs)
		}
		var e explainDoc
		if err := json.Unmarshal([]byte(run("flow", "--json", "--client", f.Src, "--to", f.Dst)), &e); err != nil {
			t.Fatal(err)
		}
		if e.Established != f.Backend || e.NewFlow != f.Backend {
			t.Errorf("xlb show flow of %s (to %s): %+v", f.Src, f.Backend, e)
		}
	}
	if text := run("reasons"); !regexp.MustCompile(`(?m)^nat_forward +[1-9]`).MatchString(text) {
		t.Errorf("xlb show reasons:\n%s", text)
	}
	t.Logf("xlb show with no daemon running:\n%s", run())
}

// frame is an IPv4 TCP ACK (udp false) or UDP datagram from src to dst as it reaches the
// gateway (checksums right).
func frame(t *testing.T, src, dst netip.AddrPort, udp bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	var l4 interface {
		gopacket.SerializableLayer
		SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
	} = &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), ACK: true, Seq: 1, Ack: 1, Window: 1024}
	if udp {
		ip.Protocol = layers.IPProtocolUDP
		l4 = &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	}
	if err := l4.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, l4, gopacket.Payload("x")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestShow: `xlb show` on a pinned datapath whose program remembered flows: the text and JSON
// forms of each part, the filters, the order and the limit of flows, all-ports frontends and an
// ambiguous endpoint's reverse entry; and clear errors for bad arguments and for a directory
// with no datapath.
func TestShow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (BPF)")
	}
	prefix := netlab.Prefix()
	dir := filepath.Join("/sys/fs/bpf", prefix)
	const seed = 0x5eed
	opts := xdp.Options{PinPath: dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096, Seed: seed, TCPEstablishedTimeout: 2 * time.Hour, UDPTimeout: time.Second}}
	d, err := xdp.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		os.RemoveAll(dir)
	})
	v4, v4b, v6 := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("2001:db8:100::1")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	fill := func(m int, ids ...datapath.BackendID) []datapath.BackendID {
		tb := make([]datapath.BackendID, m)
		for i := range tb {
			tb[i] = ids[i%len(ids)]
		}
		return tb
	}
	// 1: web, two backends with 9 and 4 of 13 slots; 2: an IPv6 frontend without a table;
	// 3: all ports, its backend keeping the client's port, 2 of 13 slots empty; 4 and 5: two
	// frontends of one endpoint (ambiguous: its flows keep reverse entries); backend 7 draining.
	must(d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1, Affinity: datapath.AffinityClientIP,
		SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}}))
	must(d.UpsertVIP(datapath.Frontend{Addr: v6, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 2}))
	must(d.UpsertVIP(datapath.Frontend{Addr: v4b, Port: 0, Proto: datapath.TCP}, datapath.VIPConfig{ID: 3}))
	must(d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 4}))
	must(d.UpsertVIP(datapath.Frontend{Addr: v4, Port: 82, Proto: datapath.TCP}, datapath.VIPConfig{ID: 5}))
	for id, ep := range map[datapath.BackendID]string{1: "198.18.1.10:8080", 2: "198.18.1.11:8080", 3: "198.18.1.13:0",
		5: "198.18.1.14:9000", 6: "198.18.1.14:9000", 7: "198.18.1.12:8080"} {
		a := netip.MustParseAddrPort(ep)
		must(d.UpsertBackend(id, datapath.Backend{Addr: a.Addr(), Port: a.Port()}))
	}
	table := make([]datapath.BackendID, 13)
	for i := range table {
		table[i] = datapath.BackendID(1 + i%3%2) // 1, 2, 1, 1, 2, 1, ...: 9 and 4 slots
	}
	must(d.SetMaglevTable(1, table))
	all := fill(13, 3)
	all[0], all[5] = 0, 0
	must(d.SetMaglevTable(3, all))
	must(d.SetMaglevTable(4, fill(13, 5)))
	must(d.SetMaglevTable(5, fill(13, 6)))
	amb := netip.MustParseAddr("198.18.1.14")
	must(d.SetReverse(datapath.Endpoint{Addr: amb, Port: 9000, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 4, Ambiguous: true,
		Candidates: [4]datapath.VIPID{4, 5}}))

	// Flows: four clients of web, one of the ambiguous frontend 81, then (later: the most
	// recent) one of the all-ports VIP, to port 443. BPF_PROG_TEST_RUN sends nothing.
	client := netip.MustParseAddr("198.18.0.10")
	send := func(src, dst netip.AddrPort) {
		t.Helper()
		if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame(t, src, dst, false)}); err != nil {
			t.Fatal(err)
		}
	}
	for p := range uint16(4) {
		send(netip.AddrPortFrom(client, 1000+p), netip.AddrPortFrom(v4, 80))
	}
	send(netip.AddrPortFrom(client, 2000), netip.AddrPortFrom(v4, 81))
	time.Sleep(100 * time.Millisecond) // the datapath's clock moves in 10 ms ticks
	send(netip.AddrPortFrom(client, 3000), netip.AddrPortFrom(v4b, 443))

	show := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := showCLI(append([]string{"--pin-path", dir}, args...), &out, &errb)
		return rc, out.String(), errb.String()
	}
	rc, out, errs := show()
	if rc != 0 {
		t.Fatalf("xlb show: exit %d: %s", rc, errs)
	}
	for _, re := range []string{
		`(?m)^198\.18\.100\.1:80/TCP +id 1 +M 13 +packets 4 .*affinity ClientIP; source ranges 198\.18\.0\.0/24$`,
		`(?m)^  198\.18\.1\.10:8080 +id 1 +slots 9 \(69\.2%\)`,
		`(?m)^  198\.18\.1\.11:8080 +id 2 +slots 4 \(30\.8%\)`,
		`(?m)^\[2001:db8:100::1\]:53/UDP +id 2 +M 0 .*NO BACKEND: new flows dropped$`,
		`(?m)^198\.18\.100\.2:\*/TCP +id 3 +M 13 +packets 1 .*2 empty slots: their new flows dropped$`,
		`(?m)^  198\.18\.1\.13:\* +id 3 +slots 11 \(84\.6%\) +packets 1 `,
		`(?m)^backends in no table`,
		`(?m)^  198\.18\.1\.12:8080 +id 7 +draining`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("xlb show: no line matching %s in\n%s", re, out)
		}
	}
	t.Logf("xlb show:\n%s", out)
	if rc, out, _ := show("--vip", "2001:db8:100::1", "--json"); rc != 0 || !strings.Contains(out, `"frontend": "[2001:db8:100::1]:53/UDP"`) ||
		strings.Contains(out, "198.18.100.1") || !strings.Contains(out, `"unmappedBackends": null`) {
		t.Errorf("xlb show --vip 2001:db8:100::1 --json: exit %d:\n%s", rc, out)
	}

	// Flows: the most recent first, forward entries with their backend (the all-ports VIP's
	// with the client's port), the ambiguous endpoint's reverse entry, --limit and --vip (the
	// flags after the part, as the README writes them).
	rc, out, errs = show("flows", "--limit", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if rc != 0 || len(lines) != 6 || !regexp.MustCompile(`^TCP +198\.18\.0\.10:3000 +198\.18\.100\.2:443 +198\.18\.1\.13:443 `).MatchString(lines[1]) ||
		lines[4] != "... and 4 more (--limit)" || lines[5] != "7 entries" {
		t.Errorf("xlb show flows --limit 3: exit %d %s\n%s", rc, errs, out)
	}
	rc, out, errs = show("flows", "--vip", "198.18.100.1", "--json", "--limit", "0")
	var flows flowsDoc
	if err := json.Unmarshal([]byte(out), &flows); rc != 0 || err != nil {
		t.Fatalf("xlb show flows --vip 198.18.100.1 --json: exit %d %s %v\n%s", rc, errs, err, out)
	}
	var fwd, rev []string
	for _, f := range flows.Flows {
		if f.Reverse {
			rev = append(rev, fmt.Sprintf("%s>%s vip %d", f.Src, f.Dst, f.VIPID))
			continue
		}
		fwd = append(fwd, fmt.Sprintf("%s>%s=%s", f.Src, f.Dst, f.Backend))
	}
	slices.Sort(fwd)
	if flows.Total != 6 || len(fwd) != 5 || !strings.HasSuffix(fwd[0], ">198.18.100.1:80=198.18.1.10:8080") &&
		!strings.HasSuffix(fwd[0], ">198.18.100.1:80=198.18.1.11:8080") ||
		fwd[4] != "198.18.0.10:2000>198.18.100.1:81=198.18.1.14:9000" ||
		!slices.Equal(rev, []string{"198.18.1.14:9000>198.18.0.10:2000 vip 4"}) {
		t.Errorf("xlb show flows --vip 198.18.100.1: total %d, forward %v, reverse %v", flows.Total, fwd, rev)
	}
	if rc, out, _ := show("reasons", "--json"); rc != 0 || !strings.Contains(out, `"nat_forward": 6`) {
		t.Errorf("xlb show reasons --json: exit %d\n%s", rc, out)
	}

	// xlb show flow. A frontend of five backends, no affinity: 20 flows the program balances,
	// each of which xlb show flow must give the backend the program chose, by its entry and by
	// the Maglev pick it computes (the chance of a wrong hash passing is 5^-20). Later a UDP
	// flow left to expire.
	v4c := netip.MustParseAddr("198.18.100.3")
	must(d.UpsertVIP(datapath.Frontend{Addr: v4c, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 6}))
	must(d.UpsertVIP(datapath.Frontend{Addr: v4c, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 7}))
	for i := range 5 {
		must(d.UpsertBackend(datapath.BackendID(8+i), datapath.Backend{Addr: netip.AddrFrom4([4]byte{198, 18, 1, byte(20 + i)}), Port: 8080}))
	}
	must(d.SetMaglevTable(6, fill(13, 8, 9, 10, 11, 12)))
	must(d.SetMaglevTable(7, fill(13, 8, 9, 10, 11, 12)))
	for i := range uint16(20) {
		send(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.30"), 5000+7*i), netip.AddrPortFrom(v4c, 80))
	}
	explain := func(args ...string) explainDoc {
		t.Helper()
		rc, out, errs := show(append([]string{"flow", "--json"}, args...)...)
		var e explainDoc
		if err := json.Unmarshal([]byte(out), &e); rc != 0 || err != nil {
			t.Fatalf("xlb show flow %v: exit %d %s %v\n%s", args, rc, errs, err, out)
		}
		return e
	}
	// Nothing attached: the seed must be given, and the entries' expiry cannot be checked.
	if rc, _, errs := show("flow", "--client", "198.18.0.30:5000", "--to", "198.18.100.3:80"); rc != 1 ||
		!strings.Contains(errs, "no interface attached") || !strings.Contains(errs, "--seed") {
		t.Errorf("xlb show flow, nothing attached: exit %d, %q", rc, errs)
	}
	if e := explain("--client", "198.18.0.30:5000", "--to", "198.18.100.3:80", "--seed", fmt.Sprint(seed)); e.Conntrack != ctUnchecked ||
		e.Established == "" || e.NewFlow != e.Established {
		t.Errorf("xlb show flow --seed, nothing attached: %+v", e)
	}
	a, b := netlab.New(t, prefix+"a"), netlab.New(t, prefix+"b")
	netlab.Veth(t, a, "x0", "02:00:00:00:00:01", b, "x1", "02:00:00:00:00:02")
	must(a.Do(func() error { return d.Attach("x0", datapath.AttachAuto) }))

	rc, out, errs = show("flows", "--vip", "198.18.100.3", "--json", "--limit", "0")
	flows = flowsDoc{}
	if err := json.Unmarshal([]byte(out), &flows); rc != 0 || err != nil || flows.Total != 20 {
		t.Fatalf("xlb show flows --vip 198.18.100.3: exit %d %s %v, %d flows", rc, errs, err, flows.Total)
	}
	picked := map[string]int{}
	for _, fl := range flows.Flows {
		if fl.Proto != "TCP" {
			continue
		}
		e := explain("--client", fl.Src, "--to", fl.Dst)
		picked[fl.Backend]++
		if e.Seed == nil || *e.Seed != seed || e.Conntrack != ctUsed || e.Established != fl.Backend || e.NewFlow != fl.Backend {
			t.Errorf("xlb show flow for %s -> %s (to %s): %+v", fl.Src, fl.Dst, fl.Backend, e)
		}
	}
	t.Logf("20 flows over 5 backends: %v", picked)
	if len(picked) < 2 {
		t.Errorf("20 flows all went to %v: the test does not exercise the hash", picked)
	}
	// The other cases: an all-ports VIP; no VIP; outside the source ranges (new flow) and an
	// established flow of that VIP; no entry (the pick alone); an empty slot; --seed; expiry.
	e := explain("--client", "198.18.0.10:3000", "--to", "198.18.100.2:443")
	if e.Frontend != "198.18.100.2:*/TCP" || e.Established != "198.18.1.13:443" || e.NewFlow != "198.18.1.13:443" ||
		e.Verdict != "established packets to 198.18.1.13:443; a new connection (SYN): to 198.18.1.13:443" ||
		!slices.ContainsFunc(e.Steps, func(s explainStep) bool { return s.Step == "conntrack" && strings.Contains(s.Says, "of 2h0m0s") }) {
		t.Errorf("xlb show flow of the all-ports VIP: %+v", e)
	}
	if e := explain("--client", "198.18.0.10:1", "--to", "198.18.100.9:80"); e.Frontend != "" ||
		e.Verdict != "a new connection (SYN), or a packet of an unknown one: not balanced: passed to the host (the ACK of a handshake in flight follows its SYN's backend)" {
		t.Errorf("xlb show flow to no VIP: %+v", e)
	}
	if e := explain("--client", "198.18.9.1:1", "--to", "198.18.100.1:80"); e.NewFlow != "" || !strings.Contains(e.Verdict, "dropped (drop_src_range)") {
		t.Errorf("xlb show flow from outside the source ranges: %+v", e)
	}
	e = explain("--client", "198.18.0.99:4242", "--to", "198.18.100.3:80", "--proto", "TCP")
	if e.Conntrack != ctNone || e.Established != "" || e.Slot == nil || e.Hash == nil || *e.Slot != int(*e.Hash%13) || e.M != 13 ||
		*e.Hash != datapath.FlowHash(seed, netip.MustParseAddr("198.18.0.99"), 4242, 80, 6, false) {
		t.Errorf("xlb show flow of a new flow: %+v", e)
	}
	for c := uint16(1); ; c++ { // a client whose slot of VIP 3 is one of the two empty ones
		e := explain("--client", fmt.Sprintf("198.18.0.77:%d", c), "--to", "198.18.100.2:22")
		if *e.Slot == 0 || *e.Slot == 5 {
			if e.NewFlow != "" || !strings.HasSuffix(e.Verdict, "dropped (drop_no_backend) (the ACK of a handshake in flight follows its SYN's backend)") {
				t.Errorf("xlb show flow to an empty slot: %+v", e)
			}
			break
		}
		if c == 200 {
			t.Fatal("no client of 200 hashes to an empty slot of 2 in 13")
		}
	}
	if e := explain("--client", "198.18.0.99:4242", "--to", "198.18.100.3:80", "--seed", "7"); e.Seed == nil || *e.Seed != 7 ||
		*e.Hash != datapath.FlowHash(7, netip.MustParseAddr("198.18.0.99"), 4242, 80, 6, false) {
		t.Errorf("xlb show flow --seed 7: %+v", e)
	}
	udpClient := netip.MustParseAddrPort("198.18.0.31:5353")
	if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame(t, udpClient, netip.AddrPortFrom(v4c, 53), true)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1 s UDP timeout (entries are stamped once a second)
	if e := explain("--client", udpClient.String(), "--to", "198.18.100.3:53", "--proto", "udp", "--seed", "7"); e.Conntrack != ctExpired ||
		e.Established != "" || !strings.HasPrefix(e.Verdict, "a new flow: to ") {
		t.Errorf("xlb show flow of an expired UDP flow (--seed: the timeouts still read): %+v", e)
	}
	rc, out, errs = show("flow", "--client", "198.18.0.10:3000", "--to", "198.18.100.2:443")
	if rc != 0 || !regexp.MustCompile(`(?m)^conntrack +backend 3 198\.18\.1\.13:443 \(VIP 198\.18\.100\.2:\*/TCP\), idle [0-9.]+m?s of 2h0m0s$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^=> +established packets to 198\.18\.1\.13:443; `).MatchString(out) {
		t.Errorf("xlb show flow: exit %d %s\n%s", rc, errs, out)
	}
	t.Logf("xlb show flow:\n%s", out)

	empty := filepath.Join(dir, "empty")
	must(os.Mkdir(empty, 0o700))
	for _, c := range []struct {
		args []string
		rc   int
		msg  string
	}{
		{[]string{"routes"}, 2, `unknown part "routes"`},
		{[]string{"flows", "reasons"}, 2, `unexpected argument "reasons" after "flows"`},
		{[]string{"--limit", "-1", "flows"}, 2, "--limit -1"},
		{[]string{"--vip", "not-an-ip"}, 2, "--vip"},
		{[]string{"flow", "--client", "198.18.0.10", "--to", "198.18.100.1:80"}, 2, "--client"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "[2001:db8::1]:80"}, 2, "one IPv4, one IPv6"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--proto", "sctp"}, 2, "--proto"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--seed", "-2"}, 2, "--seed"},
		{[]string{"flow", "--client", "[fe80::1%x0]:1", "--to", "[fe80::2]:80"}, 2, "no zones"},
		{[]string{"flow", "--client", "[::ffff:198.18.0.1]:1", "--to", "[2001:db8::1]:80"}, 2, "IPv4-mapped"},
		{[]string{"flow", "--client", "198.18.0.10:1", "--to", "198.18.100.1:80", "--limit", "3"}, 2, "--limit: not a flag of this part"},
		{[]string{"reasons", "--vip", "198.18.100.1"}, 2, "--vip: not a flag of this part"},
		{[]string{"flows", "--seed", "1"}, 2, "--seed: not a flag of this part"},
		{[]string{"--pin-path", filepath.Join(dir, "nothing")}, 1, "no such file"},
		{[]string{"--pin-path", empty}, 1, "is not pinned"},
	} {
		rc, _, errs := show(c.args...)
		if rc != c.rc || !strings.Contains(errs, c.msg) {
			t.Errorf("xlb show %v: exit %d, %q; want exit %d and %q", c.args, rc, errs, c.rc, c.msg)
		}
	}
}
