// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// fakeHops sends everything out of interface 2 with fixed MACs.
type fakeHops struct{}

func (fakeHops) Lookup(netip.Addr) (Hop, HopKind) {
	return Hop{Ifindex: 2, Src: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Dst: net.HardwareAddr{2, 0, 0, 0, 0, 2}, MTU: 1500}, HopSend
}

func (fakeHops) Source(netip.Addr) (netip.Addr, bool) { return netip.Addr{}, false }

func testEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := NewEngine(datapath.Settings{Seed: 1}, fakeHops{})
	if err != nil {
		t.Fatal(err)
	}
	e.setPort(2, datapath.RoleCluster)
	e.roles[1] = datapath.RoleClient // frames arrive on 1, from the clients
	fe := datapath.Frontend{Addr: pVIP, Port: 80, Proto: datapath.TCP}
	for _, err := range []error{
		e.UpsertVIP(fe, datapath.VIPConfig{ID: 1}),
		e.UpsertBackend(1, datapath.Backend{Addr: pBE[0], Port: 8080}),
		e.SetMaglevTable(1, []datapath.BackendID{1, 1, 1}),
		e.SetReverse(datapath.Endpoint{Addr: pBE[0], Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}),
		// The site, as the reconciler writes it: every backend address.
		e.SetSiteSource(netip.PrefixFrom(pBE[0], 32), datapath.SiteCluster),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Hostile frames: every truncation of a valid frame, and random bytes behind a valid Ethernet
// and IP version, are dropped without a panic; only whole frames are sent.
func TestEngineHostileFrames(t *testing.T) {
	e := testEngine(t)
	good := frameSpec{src: netip.MustParseAddrPort("198.18.128.1:1234"), dst: netip.AddrPortFrom(pVIP, 80),
		proto: protoTCP, flags: tcpSYN, payload: []byte("hello")}.bytes()
	for n := range len(good) {
		f := append([]byte(nil), good[:n]...)
		if v := e.Process(f, 1, time.Second); v.Send {
			t.Errorf("a frame truncated to %d of %d bytes was sent", n, len(good))
		}
	}
	if v := e.Process(append([]byte(nil), good...), 1, time.Second); !v.Send {
		t.Fatalf("the whole frame was not sent: %v", e.ReasonCounts())
	}
	// Lengths that lie: a TCP data offset below 5 words or past the datagram, a UDP length
	// past it (parse_ports drops these too).
	for _, c := range []struct {
		name string
		off  int
		val  byte
	}{{"TCP data offset 4", 14 + 20 + 12, 4 << 4}, {"TCP data offset 15", 14 + 20 + 12, 15 << 4}} {
		f := append([]byte(nil), good...)
		f[c.off] = c.val
		if v := e.Process(f, 1, time.Second); v.Send {
			t.Errorf("%s: sent", c.name)
		}
	}
	udp := frameSpec{src: netip.MustParseAddrPort("198.18.128.1:1234"), dst: netip.AddrPortFrom(pVIP, 53),
		proto: protoUDP, payload: []byte("hi")}.bytes()
	udp[14+20+4], udp[14+20+5] = 0, 200 // length 200 of a 10-byte datagram
	before := e.ReasonCounts()[forward.ReasonDropMalformed]
	if v := e.Process(udp, 1, time.Second); v.Send || e.ReasonCounts()[forward.ReasonDropMalformed] != before+1 {
		t.Errorf("a UDP length past the datagram: sent %v, reasons %v", v.Send, e.ReasonCounts())
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		f := append([]byte(nil), good...)
		// Corrupt a few header bytes (lengths, IHL, version, protocol, ports).
		for range 1 + r.IntN(4) {
			f[14+r.IntN(40)] = byte(r.Uint32())
		}
		f = f[:r.IntN(len(f)+1)]
		e.Process(f, 1, time.Second)
	}
	if e.ReasonCounts()[forward.ReasonDropMalformed] == 0 {
		t.Errorf("no frame counted malformed: %v", e.ReasonCounts())
	}
}

// A bad configuration is refused with an error naming it, and what is configured keeps working.
func TestEngineRefusesBadConfig(t *testing.T) {
	e := testEngine(t)
	for name, err := range map[string]error{
		"VIP id 0":        e.UpsertVIP(datapath.Frontend{Addr: pVIPAll, Port: 1, Proto: datapath.TCP}, datapath.VIPConfig{}),
		"SCTP":            e.UpsertVIP(datapath.Frontend{Addr: pVIPAll, Port: 1, Proto: 132}, datapath.VIPConfig{ID: 2}),
		"id in use":       e.UpsertVIP(datapath.Frontend{Addr: pVIPAll, Port: 1, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}),
		"IPv6 range":      e.UpsertVIP(datapath.Frontend{Addr: pVIPAll, Port: 1, Proto: datapath.TCP}, datapath.VIPConfig{ID: 3, SourceRanges: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}}),
		"empty table":     e.SetMaglevTable(1, nil),
		"table of no VIP": e.SetMaglevTable(9, []datapath.BackendID{1}),
		"backend id 0":    e.UpsertBackend(0, datapath.Backend{Addr: pBE[0]}),
		"reverse to none": e.SetReverse(datapath.Endpoint{Addr: pBE[1], Port: 1, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 9}),
		"candidate gap":   e.SetReverse(datapath.Endpoint{Addr: pBE[1], Port: 1, Proto: datapath.TCP}, datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{0, 1}}),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	f := frameSpec{src: netip.MustParseAddrPort("198.18.128.1:1234"), dst: netip.AddrPortFrom(pVIP, 80),
		proto: protoTCP, flags: tcpSYN}.bytes()
	if v := e.Process(f, 1, time.Second); !v.Send {
		t.Errorf("the configured VIP stopped forwarding after refused changes: %v", e.ReasonCounts())
	}
}

// Conntrack holds at most ConntrackSize flows, and idle ones are swept.
func TestEngineConntrackBounds(t *testing.T) {
	e, err := NewEngine(datapath.Settings{Seed: 1, ConntrackSize: 100, NewFlowRate: -1, UDPTimeout: time.Second}, fakeHops{})
	if err != nil {
		t.Fatal(err)
	}
	e.setPort(2, datapath.RoleCluster)
	e.roles[1] = datapath.RoleClient
	fe := datapath.Frontend{Addr: pVIP, Port: 53, Proto: datapath.UDP}
	if err := e.UpsertVIP(fe, datapath.VIPConfig{ID: 1}); err != nil {
		t.Fatal(err)
	}
	_ = e.UpsertBackend(1, datapath.Backend{Addr: pBE[0], Port: 5353})
	_ = e.SetMaglevTable(1, []datapath.BackendID{1})
	for i := range 1000 {
		for range 2 { // the second datagram makes the conntrack entry
			f := frameSpec{src: netip.AddrPortFrom(pClients.Addr(), uint16(1000+i)), dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP}.bytes()
			if v := e.Process(f, 1, time.Second); !v.Send {
				t.Fatalf("flow %d not forwarded: %v", i, e.ReasonCounts())
			}
		}
	}
	if n, _ := e.FlowCount(); n != 100 {
		t.Errorf("%d flows after 1000 new ones, want the cap 100", n)
	}
	if n := e.Sweep(3*time.Second, 1000); n != 100 {
		t.Errorf("sweep 2 s later removed %d; want all 100 idle flows gone", n)
	}
	if left, _ := e.FlowCount(); left != 0 {
		t.Errorf("sweep 2 s later left %d flows; want all 100 idle flows gone", left)
	}
}

// FuzzProcess: no frame makes the engine panic, and every frame it sends is either addressed
// to the backend (DNAT) or comes from the VIP's address and port (reverse NAT): nothing else
// leaves. `go test` runs the seeds; `go test -fuzz FuzzProcess` explores.
func FuzzProcess(f *testing.F) {
	c := netip.MustParseAddrPort("198.18.128.1:1234")
	f.Add(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoTCP, flags: tcpSYN}.bytes())
	f.Add(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoTCP, flags: tcpACK, payload: []byte("x")}.bytes())
	f.Add(frameSpec{src: netip.AddrPortFrom(pBE[0], 8080), dst: c, proto: protoTCP, flags: tcpACK}.bytes())
	f.Add(frameSpec{src: netip.MustParseAddrPort("[2001:db8::1]:5"), dst: netip.MustParseAddrPort("[2001:db8:100::1]:80"), proto: protoUDP}.bytes())
	f.Add([]byte{})
	// A hostile ICMP error: "fragmentation needed" to the VIP about a flow that does not exist.
	f.Add(icmpErrorFrame(netip.MustParseAddr("198.18.0.2"), pVIP, 3, 4, 68,
		frameSpec{src: netip.AddrPortFrom(pVIP, 80), dst: c, proto: protoTCP, flags: tcpACK}.bytes()[ethLen:]))
	e := testEngine(f)
	be := netip.AddrPortFrom(pBE[0], 8080)
	fe := netip.AddrPortFrom(pVIP, 80)
	f.Fuzz(func(t *testing.T, frame []byte) {
		// Every frame arrives from the client side (ifindex 1). Invariants of the spec, not
		// of the engine: from there, a frame is sent only to the backend, from an allowed
		// client outside the site (never from a VIP or a backend's address), and never with
		// a VIP as its source (no reverse NAT from the client side: a reflector).
		var in packet
		inOK := parse(append([]byte(nil), frame...), &in) == parsedOK
		v := e.Process(frame, 1, time.Second)
		if !v.Send {
			return
		}
		// An ICMP error reaches a backend only about a flow that exists.
		if dst, _, client, front, ok := quotedFlow(v.Frame); ok {
			if dst == be.Addr() {
				found := false
				for _, fl := range e.Flows(time.Second) {
					found = found || (!fl.Reverse && fl.Src == client && fl.Dst == front)
				}
				if !found {
					t.Errorf("sent an ICMP error to backend %s about %s -> %s, a flow that does not exist", dst, client, front)
				}
			}
			return
		}
		var p packet
		if parse(frame, &p) != parsedOK || !inOK {
			t.Fatalf("sent a frame that does not parse: %x", frame)
		}
		src := netip.AddrPortFrom(p.srcAddr(), p.sport)
		dst := netip.AddrPortFrom(p.dstAddr(), p.dport)
		if dst != be {
			t.Errorf("sent %s -> %s from the client side: not to the backend %s", src, dst, be)
		}
		if src.Addr() == fe.Addr() || in.srcAddr() == fe.Addr() || in.srcAddr() == be.Addr() {
			t.Errorf("sent %s -> %s (arrived from %s): a VIP or the backend as source", src, dst, in.srcAddr())
		}
		if in.dstAddr() != fe.Addr() {
			t.Errorf("sent %s -> %s: arrived to %s, not to the VIP", src, dst, in.dstAddr())
		}
	})
}
