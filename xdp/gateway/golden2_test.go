// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// clientTCP returns a client -> VIP TCP packet and the same packet as the backend should get it.
func clientTCP(cport uint16, vip netip.AddrPort, flags string, be netip.AddrPort, beMAC string) (pk, pk) {
	in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, cport), Dst: vip, Proto: layers.IPProtocolTCP, Flags: flags}
	out := in
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, beMAC, be, 63
	return in, out
}

// TestGoldenEstablishedFlowKeepsBackend: an established flow stays on its backend when the Maglev
// table is replaced and while that backend drains; it moves only when its backend is deleted or
// marked down, or its entry expires. New flows follow the new table at once.
func TestGoldenEstablishedFlowKeepsBackend(t *testing.T) {
	g := newGW(t, Options{Settings: datapath.Settings{UDPTimeout: time.Second}})
	services(t, g)
	d := g.dp
	must(t, d.UpsertBackend(11, datapath.Backend{Addr: be2v4, Port: 8080}))
	must(t, d.SetReverse(datapath.Endpoint{Addr: be2v4, Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}))

	ack, toBE1 := clientTCP(41000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})

	// Table replaced: backend 1 drains (still configured, out of the table).
	must(t, d.SetMaglevTable(1, table(13, 11)))
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	// A new flow (SYN) follows the new table.
	syn, toBE2 := clientTCP(41001, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
	g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, toBE2.bytes(t), fwd(ReasonFwdRedirect)})
	// A FIN keeps the backend and marks the entry closing.
	fin, finOut := clientTCP(41000, ap(vip4, 80), "FA", ap(be1v4, 8080), macBE1)
	g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, finOut.bytes(t), fwd(ReasonFwdRedirect)})
	flows, err := d.Flows()
	must(t, err)
	if len(flows) != 1 || !flows[0].Closing || flows[0].Backend != 1 {
		t.Fatalf("flows after FIN: %+v", flows)
	}

	// Backend 1 is marked down: the flow is re-balanced onto the table's backend.
	must(t, d.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080, Down: true}))
	_, ackToBE2 := clientTCP(41000, ap(vip4, 80), "A", ap(be2v4, 8080), macBE2)
	r := fwd(ReasonFwdRedirect)
	r[ReasonCTReselect] = 1
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE2.bytes(t), r})
	// ... and stays there.
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE2.bytes(t), fwd(ReasonFwdRedirect)})

	// Deleting a backend re-balances its flows too.
	must(t, d.SetMaglevTable(1, table(13, 1)))
	must(t, d.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.DeleteBackend(11))
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), r})

	// UDP entries expire after the UDP timeout (1 s here): age the entry instead of sleeping.
	udp := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 6000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: []byte("x")}
	udpOut := udp
	udpOut.SrcMAC, udpOut.DstMAC, udpOut.Dst, udpOut.TTL = macInt, macBE2, ap(be2v4, 5353), 63
	for range 2 { // the second datagram makes the conntrack entry
		g.expect(t, udp.bytes(t), g.ext, want{xdpRedirect, udpOut.bytes(t), fwd(ReasonFwdRedirect)})
	}
	ageFlows(t, d, 2*time.Second)
	r = fwd(ReasonFwdRedirect)
	r[ReasonCTReselect] = 1
	g.expect(t, udp.bytes(t), g.ext, want{xdpRedirect, udpOut.bytes(t), r})
	tr, err := d.VIPTraffic(2)
	must(t, err)
	if tr.NewFlows != 2 {
		t.Errorf("UDP VIP new flows %d, want 2 (the first packet, and the datagram after the timeout: a datagram flow idle past it is a new flow)", tr.NewFlows)
	}
}

// ageFlows makes every conntrack entry look idle for d.
func ageFlows(t *testing.T, dp *Datapath, d time.Duration) {
	t.Helper()
	var k xlbFlowKey
	var e xlbCtEntry
	var keys []xlbFlowKey
	it := dp.objs.Conntrack.Iterate()
	for it.Next(&k, &e) {
		keys = append(keys, k)
	}
	must(t, it.Err())
	for _, k := range keys {
		must(t, dp.objs.Conntrack.Lookup(&k, &e))
		e.LastSeen = stampBack(t, e.LastSeen, d)
		must(t, dp.objs.Conntrack.Put(&k, &e))
	}
	must(t, dp.invalidateCaches())
}

// TestGoldenReverseNAT: replies from a backend get the VIP as their source, without conntrack
// when the endpoint serves one VIP:port, from conntrack when it serves several.
func TestGoldenReverseNAT(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	reply := func(be netip.AddrPort, beMAC string, cport uint16, proto layers.IPProtocol) pk {
		src := client4
		if be.Addr().Is6() {
			src = client6
		}
		return pk{SrcMAC: beMAC, DstMAC: macInt, Src: be, Dst: ap(src, cport), Proto: proto, Flags: "SA", Payload: []byte("r")}
	}
	toClient := func(p pk, vip netip.AddrPort) pk {
		p.SrcMAC, p.DstMAC, p.Src, p.TTL = macExt, macClient, vip, 63
		return p
	}
	rev := map[Reason]uint64{ReasonNATReverse: 1, ReasonFwdRedirect: 1}
	cases := []struct {
		name string
		in   pk
		vip  netip.AddrPort
	}{
		{"tcp4", reply(ap(be1v4, 8080), macBE1, 40000, layers.IPProtocolTCP), ap(vip4, 80)},
		{"udp4", reply(ap(be2v4, 5353), macBE2, 5000, layers.IPProtocolUDP), ap(vip4, 53)},
		{"tcp6", reply(ap(be1v6, 8080), macBE1, 40000, layers.IPProtocolTCP), ap(vip6, 80)},
		{"udp6", reply(ap(be2v6, 5353), macBE2, 5000, layers.IPProtocolUDP), ap(vip6, 53)},
		{"all-ports keeps the port", reply(ap(be3v4, 4444), macBE3, 1234, layers.IPProtocolTCP), ap(vip4b, 4444)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g.expect(t, c.in.bytes(t), g.int, want{xdpRedirect, toClient(c.in, c.vip).bytes(t), rev})
		})
	}

	t.Run("ambiguous endpoint needs conntrack", func(t *testing.T) {
		in := reply(ap(be2v4, 9000), macBE2, 42000, layers.IPProtocolTCP)
		g.expect(t, in.bytes(t), g.int, want{xdpPass, nil, map[Reason]uint64{ReasonPassReverseNoCT: 1}})
		// The client's SYN to VIP 10 (vip4:82) records the reverse entry, even before the ACK.
		syn, synOut := clientTCP(42000, ap(vip4, 82), "S", ap(be2v4, 9000), macBE2)
		g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, synOut.bytes(t), fwd(ReasonFwdRedirect)})
		g.expect(t, in.bytes(t), g.int, want{xdpRedirect, toClient(in, ap(vip4, 82)).bytes(t), rev})
		flows, err := g.dp.Flows()
		must(t, err)
		if len(flows) != 1 || !flows[0].Reverse || flows[0].VIP != 10 || flows[0].VIPPort != 82 {
			t.Fatalf("flows: %+v", flows)
		}
	})

	// The gateway's own health probe of a backend: the reply is for this host, not a client.
	t.Run("reply to the gateway itself: untouched", func(t *testing.T) {
		in := pk{SrcMAC: macBE1, DstMAC: macInt, Src: ap(be1v4, 8080), Dst: ap(netipMust("198.18.1.1"), 40000),
			Proto: layers.IPProtocolTCP, Flags: "SA"}
		g.expect(t, in.bytes(t), g.int, want{xdpPass, nil, map[Reason]uint64{ReasonPassLocal: 1}})
	})

	t.Run("not a backend: passes untouched", func(t *testing.T) {
		in := reply(ap(be1v4, 9999), macBE1, 40000, layers.IPProtocolTCP)
		g.expect(t, in.bytes(t), g.int, want{xdpPass, nil, map[Reason]uint64{ReasonPassNotVIP: 1}})
	})
}

// TestGoldenSourceRanges: loadBalancerSourceRanges admit the listed prefixes only.
func TestGoldenSourceRanges(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	in, out := clientTCP(43000, ap(vip4, 443), "S", ap(be1v4, 8443), macBE1)
	g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwd(ReasonFwdRedirect)})
	far := in
	far.Src = ap(netip.MustParseAddr("198.18.0.100"), 43000)
	g.expect(t, far.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropSrcRange: 1}})

	// Widening the ranges admits it; clearing them admits everyone.
	must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{ID: 6, SourceRanges: []netip.Prefix{
		netip.MustParsePrefix("198.18.0.0/24")}}))
	farOut := out
	farOut.Src = far.Src
	g.expect(t, far.bytes(t), g.ext, want{xdpRedirect, farOut.bytes(t), fwd(ReasonFwdRedirect)})
	vips, err := g.dp.VIPs()
	must(t, err)
	if got := vips[datapath.Frontend{Addr: vip4, Port: 443, Proto: datapath.TCP}].SourceRanges; len(got) != 1 || got[0].String() != "198.18.0.0/24" {
		t.Fatalf("source ranges read back: %v", got)
	}
	must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{ID: 6, SourceRanges: []netip.Prefix{
		netip.MustParsePrefix("198.18.0.12/32")}}))
	g.expect(t, far.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropSrcRange: 1}})
	must(t, g.dp.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{ID: 6}))
	// The same SYN again: a retransmission, sent where the first went (the handshake table).
	g.expect(t, far.bytes(t), g.ext, want{xdpRedirect, farOut.bytes(t), fwdHS(ReasonFwdRedirect)})
}

// TestGoldenHashMatchesGo: for many random flows, the backend the program picks is the one the Go
// implementation of the hash picks from the same table, with and without ClientIP affinity.
func TestGoldenHashMatchesGo(t *testing.T) {
	const seed = 0x5eed1234
	g := newGW(t, Options{Settings: datapath.Settings{Seed: seed}})
	d := g.dp
	bes := []netip.Addr{be1v4, be2v4, be3v4}
	macs := []string{macBE1, macBE2, macBE3}
	rng := rand.New(rand.NewPCG(1, 2))
	const m = 251
	tbl := make([]datapath.BackendID, m)
	for i := range tbl {
		tbl[i] = datapath.BackendID(1 + rng.IntN(3))
	}
	for i, a := range bes {
		must(t, d.UpsertBackend(datapath.BackendID(i+1), datapath.Backend{Addr: a, Port: 8080}))
	}
	must(t, d.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 2, Affinity: datapath.AffinityClientIP}))
	must(t, d.SetMaglevTable(1, tbl))
	must(t, d.SetMaglevTable(2, tbl))
	seen := map[datapath.BackendID]int{}
	for i := range 300 {
		src := netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + rng.IntN(250))})
		must(t, g.ns.IP("neigh replace "+src.String()+" lladdr "+macClient+" dev ext0 nud permanent"))
		sport := uint16(1024 + rng.IntN(60000))
		vport := uint16(80 + i%2)
		h := datapath.FlowHash(seed, src, sport, vport, datapath.TCP, vport == 81)
		be := tbl[h%m]
		seen[be]++
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, sport), Dst: ap(vip4, vport), Proto: layers.IPProtocolTCP, Flags: "S"}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macs[be-1], ap(bes[be-1], 8080), 63
		res := g.run(t, in.bytes(t), g.ext)
		if string(res.Data) != string(out.bytes(t)) {
			t.Fatalf("flow %s -> %d: program chose another backend than Go (%s)\n%s", ap(src, sport), vport, bes[be-1], dump("got", res.Data))
		}
	}
	if len(seen) != 3 {
		t.Fatalf("random flows reached only %v", seen)
	}

	// IPv6: four address words in the hash.
	bes6 := []netip.Addr{be1v6, be2v6}
	macs6 := []string{macBE1, macBE2}
	tbl6 := make([]datapath.BackendID, m)
	for i := range tbl6 {
		tbl6[i] = datapath.BackendID(31 + rng.IntN(2))
	}
	for i, a := range bes6 {
		must(t, d.UpsertBackend(datapath.BackendID(31+i), datapath.Backend{Addr: a, Port: 8080}))
	}
	must(t, d.UpsertVIP(datapath.Frontend{Addr: vip6, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 3}))
	must(t, d.SetMaglevTable(3, tbl6))
	seen6 := map[datapath.BackendID]int{}
	for range 100 {
		src := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(rng.IntN(256)), 15: byte(1 + rng.IntN(250))})
		must(t, g.ns.IP("neigh replace "+src.String()+" lladdr "+macClient+" dev ext0 nud permanent"))
		sport := uint16(1024 + rng.IntN(60000))
		be := tbl6[datapath.FlowHash(seed, src, sport, 80, datapath.TCP, false)%m]
		seen6[be]++
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, sport), Dst: ap(vip6, 80), Proto: layers.IPProtocolTCP, Flags: "S"}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macs6[be-31], ap(bes6[be-31], 8080), 63
		if res := g.run(t, in.bytes(t), g.ext); string(res.Data) != string(out.bytes(t)) {
			t.Fatalf("flow %s: program chose another backend than Go (%s)\n%s", ap(src, sport), bes6[be-31], dump("got", res.Data))
		}
	}
	if len(seen6) != 2 {
		t.Fatalf("random IPv6 flows reached only %v", seen6)
	}
}

// TestGoldenStateChanges: what the control plane changes takes effect on the next packet, even
// for flows the per-CPU caches hold: a flush re-balances, a deleted VIP stops forwarding.
func TestGoldenStateChanges(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	d := g.dp
	must(t, d.UpsertBackend(11, datapath.Backend{Addr: be2v4, Port: 8080}))
	ack, toBE1 := clientTCP(44000, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	_, toBE2 := clientTCP(44000, ap(vip4, 80), "A", ap(be2v4, 8080), macBE2)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)}) // cached

	must(t, d.SetMaglevTable(1, table(13, 11)))
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	n, err := d.FlushFlows(func(f datapath.Flow) bool { return f.VIP == 1 })
	must(t, err)
	if n != 1 {
		t.Fatalf("flushed %d flows, want 1", n)
	}
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE2.bytes(t), fwd(ReasonFwdRedirect)})

	// vip4 keeps other frontends: its port 80 is now unserved.
	must(t, d.DeleteVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}))
	g.expect(t, ack.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropVIPUnserved: 1}})
}

// TestGoldenRateGuard: above the per-CPU new-flow rate, flows are still balanced but not recorded.
func TestGoldenRateGuard(t *testing.T) {
	g := newGW(t, Options{Settings: datapath.Settings{NewFlowRate: 2}})
	services(t, g)
	for i := range 3 {
		in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, uint16(7000+i)), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP}
		out := in
		out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE2, ap(be2v4, 5353), 63
		// The first datagram is recorded in its handshake slot, the second makes the
		// conntrack entry, from the new-flow budget.
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwd(ReasonFwdRedirect)})
		r := fwd(ReasonFwdRedirect)
		if i == 2 {
			r[ReasonCTRateLimited] = 1
		}
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), r})
	}
	flows, err := g.dp.Flows()
	must(t, err)
	if len(flows) != 2 {
		t.Fatalf("%d flows recorded, want 2 (the rate guard allows 2 per second)", len(flows))
	}
}

// TestGoldenClockFallback: when the loader stops refreshing the clock map, the datapath notices
// and reads the kernel clock itself, so conntrack timestamps stay right.
func TestGoldenClockFallback(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	d := g.dp
	d.stopClock()
	<-d.clockDone
	d.stopClock = nil
	// A clock that stopped a second ago: a real reading (never "now minus an hour", which is
	// before the clock's zero on a host booted less than an hour ago), then left to go stale
	// (CLOCK_STALE_NS is 200 ms).
	stale := monotonicNow()
	must(t, d.objs.Clock.Put(uint32(0), &xlbClockValue{Ns: stale, Gen: d.gen}))
	time.Sleep(time.Second)
	in := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 8000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP}
	// More than CLOCK_CHECK_EVERY packets on one CPU or another: every CPU has checked by then.
	for range 600 {
		g.run(t, in.bytes(t), g.ext)
	}
	must(t, d.invalidateCaches()) // tick() writes a fresh clock: put the stale one back
	must(t, d.objs.Clock.Put(uint32(0), &xlbClockValue{Ns: stale, Gen: d.gen}))
	sent := monotonicNow()
	g.run(t, in.bytes(t), g.ext)
	flows, err := d.Flows()
	must(t, err)
	// Stamped by the stale clock, the flow would be idle since stale, longer than the second
	// between stale and sent; stamped by the kernel's clock, since about sent.
	if lag := time.Duration(sent - stale); len(flows) != 1 || flows[0].Idle >= lag {
		t.Fatalf("flow timestamp follows the stale clock (%v behind): %+v", lag, flows)
	}
}

// TestGoldenTupleReuse: a client reusing a 5-tuple after a FIN starts a new connection: the
// SYN is balanced afresh and the handshake's ACK follows the SYN, not the old entry.
func TestGoldenTupleReuse(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	d := g.dp
	must(t, d.UpsertBackend(11, datapath.Backend{Addr: be2v4, Port: 8080}))
	for _, flags := range []string{"S", "A", "FA"} {
		in, out := clientTCP(45000, ap(vip4, 80), flags, ap(be1v4, 8080), macBE1)
		r := fwd(ReasonFwdRedirect)
		if flags == "A" {
			r = fwdHS(ReasonFwdRedirect) // the SYN's handshake entry, which this ACK makes a connection
		}
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), r})
	}
	must(t, d.SetMaglevTable(1, table(13, 11)))
	for _, flags := range []string{"S", "A"} {
		in, out := clientTCP(45000, ap(vip4, 80), flags, ap(be2v4, 8080), macBE2)
		r := fwd(ReasonFwdRedirect)
		if flags == "A" {
			// The closing connection held the tuple's slot: the new SYN's handshake replaced it.
			r = fwdHS(ReasonFwdRedirect)
		}
		g.expect(t, in.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), r})
	}
	flows, err := d.Flows()
	must(t, err)
	if len(flows) != 1 || flows[0].Backend != 11 || flows[0].Closing {
		t.Fatalf("flows after the new handshake: %+v", flows)
	}
}

// TestRestartOldProgramSeesChanges: while a new loader adopts the pins, the old program (still
// attached until Attach replaces it) must follow the new loader's changes, not its own caches.
func TestRestartOldProgramSeesChanges(t *testing.T) {
	g := newGW(t, Options{}) // the netns for fib lookups; its own datapath is not used
	dir := "/sys/fs/bpf/" + netlab.Prefix()
	opts := Options{PinPath: dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(dir)
	})
	old, err := Load(opts)
	must(t, err)
	defer old.Close()
	must(t, old.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, old.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, old.UpsertBackend(2, datapath.Backend{Addr: be2v4, Port: 8080}))
	must(t, old.SetMaglevTable(1, table(13, 1)))
	must(t, g.ns.Do(func() error { return old.objs.TxPorts.Put(uint32(g.int), uint32(g.int)) }))
	must(t, old.objs.IfRoles.Put(uint32(g.ext), uint8(datapath.RoleClient)))
	// Two connections: a retransmission of the first SYN would follow its handshake entry.
	in, toBE1 := clientTCP(46000, ap(vip4, 80), "S", ap(be1v4, 8080), macBE1)
	in2, toBE2 := clientTCP(46001, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
	runOld := func(in pk) []byte {
		var res progrun.Result
		must(t, g.ns.Do(func() error {
			var err error
			res, err = progrun.XDP(old.Program(), in.bytes(t), g.ext, 1)
			return err
		}))
		return res.Data
	}
	if got := runOld(in); string(got) != string(toBE1.bytes(t)) {
		t.Fatalf("before the restart\n%s", dump("got", got))
	}
	old.stopClock() // the old process dies; its program stays
	<-old.clockDone
	old.stopClock = nil
	must(t, old.lockf.Close()) // and with it the lock of the pin path
	old.lockf = nil

	neu, err := Load(opts)
	must(t, err)
	defer neu.Close()
	must(t, neu.SetMaglevTable(1, table(13, 2)))
	if got := runOld(in2); string(got) != string(toBE2.bytes(t)) {
		t.Fatalf("the old program did not follow the new loader's table\n%s", dump("got", got))
	}
}
