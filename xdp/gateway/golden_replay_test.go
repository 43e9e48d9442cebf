// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The flow cache's records (flow_replay in bpf/xlb.c): an established flow's third packet is
// replayed from what the full path did to its second one. These tests check that a replayed
// packet is byte for byte, and counter for counter, what the full path makes of it, that
// everything a record does not cover goes back to the full path, and that replies (never
// recorded: their full path is keyed by endpoint, not by tuple, and stays in the CPU's caches)
// keep being translated.

// flowKeyOf is the flow_key of p's tuple.
func flowKeyOf(p pk) xlbFlowKey {
	k, _ := wireKey(p.Src, p.Dst, datapath.Protocol(p.Proto))
	return k
}

// record finds the flow_cache entry of p's tuple (on any CPU) and says whether it holds a record
// that flow_replay may use (made in the datapath's current generation).
func (g *gw) record(t *testing.T, p pk) (slot uint32, e xlbFlowCacheEntry, ok bool) {
	t.Helper()
	want := flowKeyOf(p)
	var i uint32
	it := g.dp.objs.FlowCache.Iterate()
	for it.Next(&i, &e) {
		if e.Key == want && e.Gen != 0 {
			must(t, it.Err())
			return i, e, e.Gen == g.dp.gen && e.FastUntil != 0
		}
	}
	must(t, it.Err())
	return 0, xlbFlowCacheEntry{}, false
}

// traffic reads the counters of VIP id and of the backend of the same id.
func (g *gw) traffic(t *testing.T, id datapath.VIPID) (vip, be datapath.Traffic) {
	t.Helper()
	if id == 0 {
		return
	}
	vip, err := g.dp.VIPTraffic(id)
	must(t, err)
	be, err = g.dp.BackendTraffic(datapath.BackendID(id))
	must(t, err)
	return vip, be
}

// replayCase is one tuple: its packets in, and what the gateway must make of them.
type replayCase struct {
	name    string
	in      func(ttl uint8, payload []byte) pk // the tuple's packet with this TTL and payload
	out     func(p pk) pk                      // the packet as it must leave
	ifindex func(g *gw) int
	reasons map[Reason]uint64
	reverse bool
	vip     datapath.VIPID // the VIP, and the backend of the same id (services); 0 for replies
}

// toRecord is how many of p's packets go the full way before its flow has a record: a TCP
// packet creates the conntrack entry, the next the record; a datagram's first packet is recorded
// in its handshake slot, the second creates the conntrack entry, the third the record. Replies
// have no record (0 means: take 2, as the tests do for them).
func toRecord(c replayCase, p pk) int {
	if !c.reverse && p.Proto == layers.IPProtocolUDP {
		return 3
	}
	return 2
}

func replayCases() []replayCase {
	fwdOut := func(be netip.AddrPort, mac string) func(p pk) pk {
		return func(p pk) pk {
			p.SrcMAC, p.DstMAC, p.Dst, p.TTL = macInt, mac, be, p.ttl()-1
			return p
		}
	}
	revOut := func(vip netip.AddrPort) func(p pk) pk {
		return func(p pk) pk {
			p.SrcMAC, p.DstMAC, p.Src, p.TTL = macExt, macClient, vip, p.ttl()-1
			return p
		}
	}
	client := func(src, dst netip.AddrPort, proto layers.IPProtocol) func(uint8, []byte) pk {
		return func(ttl uint8, payload []byte) pk {
			return pk{SrcMAC: macClient, DstMAC: macExt, Src: src, Dst: dst, Proto: proto, Flags: "A", TTL: ttl, Payload: payload}
		}
	}
	backend := func(src, dst netip.AddrPort, mac string, proto layers.IPProtocol) func(uint8, []byte) pk {
		return func(ttl uint8, payload []byte) pk {
			return pk{SrcMAC: mac, DstMAC: macInt, Src: src, Dst: dst, Proto: proto, Flags: "A", TTL: ttl, Payload: payload}
		}
	}
	ext := func(g *gw) int { return g.ext }
	in := func(g *gw) int { return g.int }
	fw := fwd(ReasonFwdRedirect)
	rev := map[Reason]uint64{ReasonNATReverse: 1, ReasonFwdRedirect: 1}
	return []replayCase{
		{"tcp4 to VIP", client(ap(client4, 40100), ap(vip4, 80), layers.IPProtocolTCP), fwdOut(ap(be1v4, 8080), macBE1), ext, fw, false, 1},
		{"udp4 to VIP", client(ap(client4, 40101), ap(vip4, 53), layers.IPProtocolUDP), fwdOut(ap(be2v4, 5353), macBE2), ext, fw, false, 2},
		{"tcp6 to VIP", client(ap(client6, 40102), ap(vip6, 80), layers.IPProtocolTCP), fwdOut(ap(be1v6, 8080), macBE1), ext, fw, false, 4},
		{"udp6 to VIP", client(ap(client6, 40103), ap(vip6, 53), layers.IPProtocolUDP), fwdOut(ap(be2v6, 5353), macBE2), ext, fw, false, 5},
		{"all-ports VIP", client(ap(client4, 40104), ap(vip4b, 4444), layers.IPProtocolTCP), fwdOut(ap(be3v4, 4444), macBE3), ext, fw, false, 3},
		{"tcp4 reply", backend(ap(be1v4, 8080), ap(client4, 40105), macBE1, layers.IPProtocolTCP), revOut(ap(vip4, 80)), in, rev, true, 0},
		{"udp4 reply", backend(ap(be2v4, 5353), ap(client4, 40106), macBE2, layers.IPProtocolUDP), revOut(ap(vip4, 53)), in, rev, true, 0},
		{"tcp6 reply", backend(ap(be1v6, 8080), ap(client6, 40107), macBE1, layers.IPProtocolTCP), revOut(ap(vip6, 80)), in, rev, true, 0},
		{"udp6 reply", backend(ap(be2v6, 5353), ap(client6, 40108), macBE2, layers.IPProtocolUDP), revOut(ap(vip6, 53)), in, rev, true, 0},
	}
}

// TestGoldenReplayMatchesFullPath: for each kind of flow, the first packets go the full way and
// leave a record (not replies); then many packets with other TTLs and payloads (so other
// checksums) are replayed, and each leaves exactly as the full path would have sent it, with the
// same counters.
func TestGoldenReplayMatchesFullPath(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, c := range replayCases() {
		t.Run(c.name, func(t *testing.T) {
			first := c.in(64, []byte("first"))
			for range toRecord(c, first) { // the full way until the flow is recorded
				g.expect(t, first.bytes(t), c.ifindex(g), want{xdpRedirect, c.out(first).bytes(t), c.reasons})
			}
			if _, e, ok := g.record(t, first); ok == c.reverse {
				t.Fatalf("after %d packets: record %v, want %v: %+v", toRecord(c, first), ok, !c.reverse, e)
			}
			vipBefore, beBefore := g.traffic(t, c.vip)
			var bytes uint64
			for range 200 {
				payload := make([]byte, rng.IntN(64))
				for i := range payload {
					payload[i] = byte(rng.Uint32())
				}
				p := c.in(uint8(2+rng.IntN(254)), payload)
				in := p.bytes(t)
				bytes += uint64(len(in))
				g.expect(t, in, c.ifindex(g), want{xdpRedirect, c.out(p).bytes(t), c.reasons})
			}
			if c.vip == 0 {
				return // replies count no VIP or backend traffic
			}
			vipAfter, beAfter := g.traffic(t, c.vip)
			wantDelta := datapath.Traffic{Packets: 200, Bytes: bytes}
			for what, d := range map[string]datapath.Traffic{
				"VIP":     {Packets: vipAfter.Packets - vipBefore.Packets, Bytes: vipAfter.Bytes - vipBefore.Bytes, NewFlows: vipAfter.NewFlows - vipBefore.NewFlows},
				"backend": {Packets: beAfter.Packets - beBefore.Packets, Bytes: beAfter.Bytes - beBefore.Bytes, NewFlows: beAfter.NewFlows - beBefore.NewFlows},
			} {
				if d != wantDelta {
					t.Errorf("%s traffic moved by %+v, want %+v", what, d, wantDelta)
				}
			}
		})
	}
}

// TestGoldenReplayIsUsed proves that the packets after the second are replayed (not recomputed),
// for every kind of flow: a record changed behind the datapath's back shows in the output. Then a
// generation bump, as every change Go makes causes, makes the datapath ignore the record again.
func TestGoldenReplayIsUsed(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	for _, c := range replayCases() {
		if c.reverse {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			p := c.in(64, nil)
			for range toRecord(c, p) {
				g.expect(t, p.bytes(t), c.ifindex(g), want{xdpRedirect, c.out(p).bytes(t), c.reasons})
			}
			slot, e, ok := g.record(t, p)
			if !ok {
				t.Fatalf("no record: %+v", e)
			}
			// Point the record at another next hop (backend 2's MAC).
			e.Dmac = [6]uint8{0x02, 0, 0, 0, 0x0b, 0x02}
			must(t, g.dp.objs.FlowCache.Put(slot, &e))
			poisoned := c.out(p)
			poisoned.DstMAC = macBE2
			g.expect(t, p.bytes(t), c.ifindex(g), want{xdpRedirect, poisoned.bytes(t), c.reasons})

			must(t, g.dp.invalidateCaches())
			g.expect(t, p.bytes(t), c.ifindex(g), want{xdpRedirect, c.out(p).bytes(t), c.reasons})
		})
	}
}

// TestGoldenReplayFallsBack: what a record does not cover takes the full path, which answers
// as it always does; a change Go makes is never hidden by a record.
func TestGoldenReplayFallsBack(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	recorded := func(t *testing.T, c replayCase, p pk) {
		t.Helper()
		for range toRecord(c, p) {
			g.expect(t, p.bytes(t), c.ifindex(g), want{xdpRedirect, c.out(p).bytes(t), c.reasons})
		}
		if _, e, ok := g.record(t, p); !ok {
			t.Fatalf("no record: %+v", e)
		}
	}
	fwdCase, revCase := replayCases()[0], replayCases()[5]
	// recordedFlow is fwdCase's flow from client port cport, recorded.
	recordedFlow := func(t *testing.T, cport uint16) pk {
		t.Helper()
		p := fwdCase.in(64, nil)
		p.Src = ap(client4, cport)
		recorded(t, fwdCase, p)
		return p
	}

	t.Run("TTL about to expire", func(t *testing.T) {
		p := fwdCase.in(64, nil)
		recorded(t, fwdCase, p)
		p.TTL = 1
		g.expect(t, p.bytes(t), g.ext, want{xdpPass, nil, map[Reason]uint64{ReasonPassTTL: 1}})
		r := revCase.in(64, nil)
		g.expect(t, r.bytes(t), g.int, want{xdpRedirect, revCase.out(r).bytes(t), revCase.reasons})
		r.TTL = 1
		g.expect(t, r.bytes(t), g.int, want{xdpPass, nil, map[Reason]uint64{ReasonPassTTL: 1}})
	})

	t.Run("FIN marks conntrack closing", func(t *testing.T) {
		p := recordedFlow(t, 40200)
		fin := p
		fin.Flags = "FA"
		g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, fwdCase.out(fin).bytes(t), fwdCase.reasons})
		flows, err := g.dp.Flows()
		must(t, err)
		closing := false
		for _, f := range flows {
			if f.Src == p.Src && f.Closing {
				closing = true
			}
		}
		if !closing {
			t.Fatalf("the FIN of a recorded flow did not mark its conntrack entry closing: %+v", flows)
		}
	})

	t.Run("a SYN on a recorded tuple takes the full path", func(t *testing.T) {
		// The flow is live, so the SYN keeps its backend (a forged SYN must not re-point it),
		// counted as such, and the record goes: the full path decides the tuple again.
		p := recordedFlow(t, 40201)
		syn := p
		syn.Flags = "S"
		reasons := map[Reason]uint64{ReasonCTSYNKept: 1}
		for r, n := range fwdCase.reasons {
			reasons[r] = n
		}
		g.expect(t, syn.bytes(t), g.ext, want{xdpRedirect, fwdCase.out(syn).bytes(t), reasons})
		if _, e, ok := g.record(t, p); ok {
			t.Fatalf("the SYN left the record in place: %+v", e)
		}
	})

	t.Run("backend marked down", func(t *testing.T) {
		p := recordedFlow(t, 40202)
		must(t, g.dp.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080, Down: true}))
		t.Cleanup(func() { must(t, g.dp.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080})) })
		// The only backend of the VIP is down: the flow cannot stay and has nowhere to go.
		r := map[Reason]uint64{ReasonCTReselect: 1, ReasonDropNoBackend: 1}
		g.expect(t, p.bytes(t), g.ext, want{xdpDrop, nil, r})
	})

	t.Run("backend moved", func(t *testing.T) {
		p := recordedFlow(t, 40203)
		must(t, g.dp.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8088}))
		t.Cleanup(func() { must(t, g.dp.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080})) })
		out := fwdCase.out(p)
		out.Dst = ap(be1v4, 8088)
		g.expect(t, p.bytes(t), g.ext, want{xdpRedirect, out.bytes(t), fwdCase.reasons})
	})

	t.Run("reverse entry changed", func(t *testing.T) {
		r := revCase.in(64, nil)
		r.Dst = ap(client4, 40204)
		g.expect(t, r.bytes(t), g.int, want{xdpRedirect, revCase.out(r).bytes(t), revCase.reasons})
		ep := datapath.Endpoint{Addr: be1v4, Port: 8080, Proto: datapath.TCP}
		must(t, g.dp.SetReverse(ep, datapath.ReverseNAT{VIP: 6})) // now it answers for vip4:443
		t.Cleanup(func() { must(t, g.dp.SetReverse(ep, datapath.ReverseNAT{VIP: 1})) })
		out := revCase.out(r)
		out.Src = ap(vip4, 443)
		g.expect(t, r.bytes(t), g.int, want{xdpRedirect, out.bytes(t), revCase.reasons})
	})

	t.Run("IPv6 UDP without checksum", func(t *testing.T) {
		c := replayCases()[3]
		p := c.in(64, nil)
		p.Src = ap(client6, 40205)
		recorded(t, c, p)
		p.UDPZeroCsum = true
		g.expect(t, p.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropUDP6ZeroCsum: 1}})
	})

	t.Run("source ranges are checked on every packet", func(t *testing.T) {
		// VIP 6 (vip4:443) admits 198.18.0.8/29, which holds client4.
		c := replayCase{in: func(ttl uint8, payload []byte) pk {
			return pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 40206), Dst: ap(vip4, 443), Proto: layers.IPProtocolTCP, Flags: "A", TTL: ttl, Payload: payload}
		}, out: func(p pk) pk {
			p.SrcMAC, p.DstMAC, p.Dst, p.TTL = macInt, macBE1, ap(be1v4, 8443), p.ttl()-1
			return p
		}, ifindex: func(g *gw) int { return g.ext }, reasons: fwd(ReasonFwdRedirect)}
		p := c.in(64, nil)
		recorded(t, c, p)
		g.expect(t, p.bytes(t), g.ext, want{xdpRedirect, c.out(p).bytes(t), c.reasons}) // replayed
		// The range goes from the map alone, with no generation bump: the record stays valid,
		// and its replay must still ask src_ranges.
		k := rangeKey(6, netip.MustParsePrefix("198.18.0.8/29"))
		must(t, g.dp.objs.SrcRanges.Delete(&k))
		if _, e, ok := g.record(t, p); !ok {
			t.Fatalf("the record is gone, so the test would not exercise the replay: %+v", e)
		}
		g.expect(t, p.bytes(t), g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropSrcRange: 1}})
	})
}

// TestGoldenReplayFragmentedSYN: a client reusing its port after a FIN, with a SYN that arrives
// fragmented, starts a new connection like any SYN: when Maglev now picks another backend than
// the one the old flow was pinned to, conntrack takes the new one, and the record of the old flow
// must not send the handshake's ACK to the old backend (it would answer with a RST).
func TestGoldenReplayFragmentedSYN(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	must(t, g.dp.UpsertBackend(11, datapath.Backend{Addr: be2v4, Port: 8080}))
	ack, toBE1 := clientTCP(41500, ap(vip4, 80), "A", ap(be1v4, 8080), macBE1)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	// The table moves to backend 11; the flow stays pinned to backend 1 and is recorded so.
	must(t, g.dp.SetMaglevTable(1, table(13, 11)))
	for range 2 {
		g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, toBE1.bytes(t), fwd(ReasonFwdRedirect)})
	}
	if _, e, ok := g.record(t, ack); !ok {
		t.Fatalf("no record: %+v", e)
	}
	// The old connection closes (a SYN on a live one would keep its backend) ...
	fin, finOut := clientTCP(41500, ap(vip4, 80), "FA", ap(be1v4, 8080), macBE1)
	g.expect(t, fin.bytes(t), g.ext, want{xdpRedirect, finOut.bytes(t), fwd(ReasonFwdRedirect)})
	// ... and the same tuple's SYN, in two fragments, goes to backend 11 ...
	syn, synOut := clientTCP(41500, ap(vip4, 80), "S", ap(be2v4, 8080), macBE2)
	syn.Payload, synOut.Payload = make([]byte, 64), make([]byte, 64)
	syn.IPID, synOut.IPID = 0x5151, 0x5151
	a, b := syn.fragments4(t, 32)
	wa, wb := synOut.fragments4(t, 32)
	g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
	g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
	// ... and so does the handshake's ACK.
	_, ackToBE2 := clientTCP(41500, ap(vip4, 80), "A", ap(be2v4, 8080), macBE2)
	g.expect(t, ack.bytes(t), g.ext, want{xdpRedirect, ackToBE2.bytes(t), fwd(ReasonFwdRedirect)})
}

// fastVariant is a recorded flow's packet (or a reply) changed in one way, and which part of
// xlb_xdp's first step, fast_path (bpf/xlb.c), leaves it to the full path.
type fastVariant struct {
	name   string
	mod    func(p pk) pk
	raw    func(b []byte) []byte // applied to the bytes after mod; nil: none
	parse  bool                  // fast_path does not parse it: the full path's, whatever the flow
	replay bool                  // flow_replay does not take it: the full path's, to a VIP
	tcp    bool                  // it only changes TCP flags (a UDP datagram stays as recorded)
	v4     bool                  // it only changes IPv4 packets (an IPv6 one stays as recorded)
}

func fastVariants() []fastVariant {
	same := func(p pk) pk { return p }
	return []fastVariant{
		{name: "as recorded", mod: same},
		{name: "other TTL and payload", mod: func(p pk) pk { p.TTL, p.Payload = 9, []byte("other payload"); return p }},
		{name: "TTL 1", mod: func(p pk) pk { p.TTL = 1; return p }, replay: true},
		{name: "SYN", mod: func(p pk) pk { p.Flags = "S"; return p }, replay: true, tcp: true},
		{name: "FIN", mod: func(p pk) pk { p.Flags = "FA"; return p }, replay: true, tcp: true},
		{name: "RST", mod: func(p pk) pk { p.Flags = "R"; return p }, replay: true, tcp: true},
		{name: "VLAN tag", mod: func(p pk) pk { p.VLAN = 100; return p }, parse: true},
		{name: "IPv4 options or IPv6 extension header", mod: func(p pk) pk {
			if p.is4() {
				p.IPv4Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
			} else {
				p.Ext6, p.Ext6Types = ext6HopDst(), []layers.IPProtocol{0}
			}
			return p
		}, raw: func(b []byte) []byte {
			// The options hold the ports, so that a parser ignoring them would find the flow; for
			// TCP, the acknowledgement number's first byte is then a valid data offset.
			if b[12] == 0x08 {
				copy(b[14+20:14+24], b[14+24:14+28])
				if b[14+9] == byte(layers.IPProtocolTCP) {
					b[14+20+12] = 0x50
				}
			}
			return b
		}, parse: true},
		{name: "IPv6 UDP without checksum", mod: func(p pk) pk {
			p.UDPZeroCsum = !p.is4() && p.Proto == layers.IPProtocolUDP
			return p
		}},
		{name: "first fragment", mod: same, raw: func(b []byte) []byte {
			if b[12] == 0x08 { // IPv4: set MF (the checksum is not the datapath's to check)
				b[14+6] |= 0x20
			}
			return b
		}, parse: true, v4: true},
		{name: "later fragment", mod: same, raw: func(b []byte) []byte {
			if b[12] == 0x08 { // IPv4: offset 8 bytes
				b[14+7] = 1
			}
			return b
		}, parse: true, v4: true},
		{name: "IPv4 header length below 20", mod: same, raw: func(b []byte) []byte {
			if b[12] == 0x08 {
				b[14] = 0x44
			}
			return b
		}, parse: true, v4: true},
		{name: "Ethernet trailer", mod: same, raw: func(b []byte) []byte {
			return append(b, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee)
		}},
		{name: "IP length shorter than the L4 header", mod: same, raw: func(b []byte) []byte {
			if b[12] == 0x08 {
				binary.BigEndian.PutUint16(b[16:], 20+4)
			} else {
				binary.BigEndian.PutUint16(b[18:], 4)
			}
			return b
		}, replay: true},
		{name: "truncated", mod: same, raw: func(b []byte) []byte {
			n := 14 + int(binary.BigEndian.Uint16(b[16:])) // IPv4: the header's total length
			if b[12] == 0x86 {
				n = 14 + 40 + int(binary.BigEndian.Uint16(b[18:])) // IPv6: the payload length
			}
			return b[:n-2] // two bytes short of what the IP header says
		}, parse: true},
		{name: "L4 header longer than the datagram", mod: same, raw: func(b []byte) []byte {
			l4, proto := 14+20, b[14+9]
			if b[12] == 0x86 {
				l4, proto = 14+40, b[14+6]
			}
			if proto == byte(layers.IPProtocolTCP) {
				b[l4+12] = 0xf0 // data offset 60
			} else {
				b[l4+4] = 0xff // UDP length
			}
			return b
		}, replay: true},
	}
}

// fullPathOnly reports whether fast_path must leave variant v of case c (the packet in) to the
// full path.
func fullPathOnly(c replayCase, v fastVariant, in pk) bool {
	switch {
	case v.v4 && !in.is4():
		return false // as recorded
	case v.parse:
		return true
	case c.reverse: // lb_reverse decides everything else
		return false
	case v.replay:
		return !v.tcp || in.Proto == layers.IPProtocolTCP
	}
	return in.UDPZeroCsum // flow_replay leaves it to the full path, which drops it
}

// fastRecordTrust is how long after it was written fast_path replays a flow_cache record
// (CT_REFRESH_NS, consts.h).
const fastRecordTrust = time.Second

// TestGoldenFastPath: xlb_xdp first tries fast_path, which handles the common packets of
// recorded flows, replies and traffic that is none of ours, and tail-calls the full path
// (xlb_full4, xlb_full6) for the rest. Two gateways with the same services see the same packets; then each
// variant of each kind of flow goes to xlb_xdp on one, with the full path out of the tail-call
// table for that packet, and to the full path of its family alone on the other. What fast_path must leave is passed untouched
// (pass_tail_call); what it takes gets exactly the full path's verdict, bytes and counters.
func TestGoldenFastPath(t *testing.T) {
	gx, gf := newGW(t, Options{}), newGW(t, Options{})
	services(t, gx)
	services(t, gf)
	runOn := func(t *testing.T, g *gw, prog *ebpf.Program, b []byte, ifindex int) (progrun.Result, map[Reason]uint64) {
		t.Helper()
		before := g.reasons(t)
		var res progrun.Result
		must(t, g.do(func() error {
			var err error
			res, err = progrun.XDP(prog, b, ifindex, 1)
			return err
		}))
		delta := map[Reason]uint64{}
		for r, n := range g.reasons(t) {
			if d := n - before[r]; d != 0 {
				delta[r] = d
			}
		}
		return res, delta
	}
	port := uint16(43000)
	cases := replayCases()
	// Traffic of no VIP or backend: it never needs the full path.
	notOurs := func(name string, src, dst netip.Addr, proto layers.IPProtocol) replayCase {
		return replayCase{name: name, in: func(ttl uint8, payload []byte) pk {
			return pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, 1), Dst: ap(dst, 80), Proto: proto, Flags: "A", TTL: ttl, Payload: payload}
		}, out: func(p pk) pk { return p }, ifindex: func(g *gw) int { return g.ext }, reverse: true}
	}
	cases = append(cases,
		notOurs("not ours tcp4", client4, other4, layers.IPProtocolTCP),
		notOurs("not ours udp4", client4, other4, layers.IPProtocolUDP),
		notOurs("not ours tcp6", client6, netipMust("2001:db8:200::1"), layers.IPProtocolTCP))
	for _, c := range cases {
		for _, v := range fastVariants() {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				port++
				p := c.in(64, nil)
				if c.reverse {
					p.Dst = netip.AddrPortFrom(p.Dst.Addr(), port)
				} else {
					p.Src = netip.AddrPortFrom(p.Src.Addr(), port)
				}
				in := v.mod(p)
				b := in.bytes(t)
				if v.raw != nil {
					b = v.raw(b)
				}
				var got progrun.Result
				var gotReasons map[Reason]uint64
				// A record is replayed for at most fastRecordTrust after it was written: on a
				// machine so loaded that more passed between recording and the fast path's run,
				// the fast path rightly leaves the packet to the full path (absent here, so it
				// passes it, uncounted). Then the case is recorded and run again, a bounded
				// number of times; a miss within the window is a failure.
				for attempt := 1; ; attempt++ {
					start := time.Now()
					if !strings.HasPrefix(c.name, "not ours") {
						for _, g := range []*gw{gx, gf} {
							for range toRecord(c, p) { // the conntrack entry, then the record
								g.expect(t, p.bytes(t), c.ifindex(g), want{xdpRedirect, c.out(p).bytes(t), c.reasons})
							}
						}
					}
					for _, i := range []uint32{progFull4, progFull6} {
						must(t, gx.dp.objs.Progs.Delete(i))
					}
					got, gotReasons = runOn(t, gx, gx.dp.Program(), bytes.Clone(b), c.ifindex(gx))
					must(t, gx.dp.objs.Progs.Put(uint32(progFull4), gx.dp.objs.XlbFull4))
					must(t, gx.dp.objs.Progs.Put(uint32(progFull6), gx.dp.objs.XlbFull6))
					missed := got.Verdict == xdpPass && maps.Equal(gotReasons, map[Reason]uint64{ReasonPassTailCall: 1})
					if !missed || fullPathOnly(c, v, in) || time.Since(start) < fastRecordTrust || attempt == 5 {
						break
					}
					t.Logf("attempt %d: %s between the record and the fast path's run (a record is trusted for %s): again",
						attempt, time.Since(start).Round(time.Millisecond), fastRecordTrust)
				}
				if fullPathOnly(c, v, in) {
					want := map[Reason]uint64{ReasonPassTailCall: 1}
					if got.Verdict != xdpPass || !bytes.Equal(got.Data, b) || !maps.Equal(gotReasons, want) {
						t.Errorf("fast_path took it (verdict %s, counters %v), want the full path\n%s",
							verdictNames[got.Verdict], gotReasons, dump("got", got.Data))
					}
					return
				}
				full, fullReasons := runOn(t, gf, gf.dp.fullPath(b), bytes.Clone(b), c.ifindex(gf))
				if got.Verdict != full.Verdict {
					t.Errorf("verdict %s, the full path's %s", verdictNames[got.Verdict], verdictNames[full.Verdict])
				}
				if !bytes.Equal(got.Data, full.Data) {
					t.Errorf("output differs from the full path's\n%s\n%s", dump("got", got.Data), dump("full path", full.Data))
				}
				if !maps.Equal(gotReasons, fullReasons) {
					t.Errorf("counters moved by %v, the full path's by %v", gotReasons, fullReasons)
				}
				gotVIP, gotBE := gx.traffic(t, c.vip)
				fullVIP, fullBE := gf.traffic(t, c.vip)
				if gotVIP != fullVIP || gotBE != fullBE {
					t.Errorf("VIP and backend traffic %+v, %+v; the full path's %+v, %+v", gotVIP, gotBE, fullVIP, fullBE)
				}
			})
		}
	}
}

// fullPath returns the full path program xlb_xdp tail-calls for frame b: xlb_full6 for IPv6
// (after a VLAN tag at most), else xlb_full4.
func (d *Datapath) fullPath(b []byte) *ebpf.Program {
	et := func(off int) uint16 {
		if len(b) < off+2 {
			return 0
		}
		return uint16(b[off])<<8 | uint16(b[off+1])
	}
	proto := et(12)
	if proto == 0x8100 || proto == 0x88a8 {
		proto = et(16)
	}
	if proto == 0x86dd {
		return d.objs.XlbFull6
	}
	return d.objs.XlbFull4
}
