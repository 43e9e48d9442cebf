// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The A/B benchmark measures the committed object against a base build (testdata/ab: the object
// as it was before the datapath was cut into stages, one program per stage) in one process: the same gateway set-up
// loaded twice, one with each object, the cases run in rounds, base and new alternating within
// each round, each packet net of a trivial program run next to it (as benchPackets). It reports
// the median and the min-max of the rounds' ns per packet (or per connection) for both, and the
// ratio of the medians. It takes minutes and ignores b.N, so `go test -bench .` (make bench)
// skips it unless XLB_BENCH_LONG is set:
//
//	XLB_BENCH_LONG=1 go test -run '^$' -bench BenchmarkAB -benchtime 1x ./xdp/gateway/
//
// Refresh testdata/ab/xlb_base_bpfel.o (git show <commit>:xdp/gateway/xlb_bpfel.o) to compare against
// another base. The base's programs run over the gateway's own maps (baseProgram): its maps must
// have today's layout, and its tail-call table is filled in the layout baseStages names.

//go:embed testdata/ab/xlb_base_bpfel.o
var baseObject []byte

// baseStages is the base object's tail-call table: its programs by index (a table the object
// does not fill itself).
var baseStages = []string{"xlb_icmp", "xlb_full", "xlb_dsr", "xlb_too_big_client", "xlb_too_big_backend"}

// baseProgram loads the base object's programs over g's maps (each map both objects declare,
// sized as g's), with a tail-call table of its own, and returns its attached program.
func baseProgram(b *testing.B, g *gw) *ebpf.Program {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(baseObject))
	if err != nil {
		b.Fatalf("load base object: %v", err)
	}
	cur := map[string]*ebpf.Map{}
	v := reflect.ValueOf(&g.dp.objs.xlbMaps).Elem()
	for i := range v.NumField() {
		cur[v.Type().Field(i).Tag.Get("ebpf")] = v.Field(i).Interface().(*ebpf.Map)
	}
	repl := map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
		if m := cur[name]; m != nil && ms.Type != ebpf.ProgramArray {
			ms.MaxEntries = m.MaxEntries()
			repl[name] = m
		}
	}
	for name, val := range loadVariables(g.dp.opts) {
		if vs := spec.Variables[name]; vs != nil {
			if err := vs.Set(val); err != nil {
				b.Fatalf("base object: set %s: %v", name, err)
			}
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		b.Fatalf("load base object over the gateway's maps: %+v", err)
	}
	b.Cleanup(coll.Close)
	for i, name := range baseStages {
		if p := coll.Programs[name]; p != nil {
			must(b, coll.Maps["progs"].Put(uint32(i), p))
		}
	}
	return coll.Programs["xlb_xdp"]
}

// abGW loads a benchmark gateway (benchGW), running the base object's program when base is set.
func abGW(b *testing.B, base bool) *gw {
	g := benchGW(b)
	if base {
		g.prog = baseProgram(b, g)
	}
	return g
}

// abCase is one A/B case: setup prepares a gateway (once per object), next returns the packets of
// the i-th unit measured (one packet, or a connection's SYN and ACK) and the verdict each must get.
type abCase struct {
	name  string
	unit  string
	setup func(b *testing.B, g *gw)
	next  func(b *testing.B, i int) [][]byte
	want  uint32
}

// connSrc returns the client endpoint of the i-th fresh connection: sources in 198.19.0.0/16,
// 16,384 ports each, so no two units of a run share a tuple.
func connSrc(i int) netip.AddrPort {
	a := netip.AddrFrom4([4]byte{198, 19, byte(i >> 22), byte(i >> 14)})
	return netip.AddrPortFrom(a, uint16(1024+i%(1<<14)))
}

func connPacket(b *testing.B, src netip.AddrPort, dport uint16, proto layers.IPProtocol, flags string, seq uint32) []byte {
	return pk{SrcMAC: macClient, DstMAC: macExt, Src: src, Dst: ap(vip4, dport), Proto: proto, Flags: flags,
		Seq: seq, Payload: make([]byte, 10)}.bytes(b)
}

func abCases() []abCase {
	const isn = 1000
	return []abCase{
		{name: "Connection", unit: "conn", want: xdpRedirect,
			next: func(b *testing.B, i int) [][]byte {
				s := connSrc(i)
				return [][]byte{connPacket(b, s, 80, layers.IPProtocolTCP, "S", isn),
					connPacket(b, s, 80, layers.IPProtocolTCP, "A", isn+1)}
			}},
		// A connection among others in flight: the SYN of a fresh tuple and the ACK of the
		// handshake abInFlight units earlier, as a gateway sees them at ~200,000 new
		// connections/s and a 20 ms round trip (Connection is the best case for the caches,
		// FirstSYN + FirstACK, 30,000 handshakes apart, the worst).
		{name: "ConnectionInFlight", unit: "conn", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for i := range abInFlight {
					g.run(b, connPacket(b, connSrc(i), 80, layers.IPProtocolTCP, "S", isn), g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{connPacket(b, connSrc(i+abInFlight), 80, layers.IPProtocolTCP, "S", isn),
					connPacket(b, connSrc(i), 80, layers.IPProtocolTCP, "A", isn+1)}
			}},
		// Connection into a handshake table whose slots nearly all hold live connections
		// (abSlotsFull connections opened first, never closed: long-lived ones): each SYN
		// then moves its slot's connection into conntrack, the insert a connection's ACK made
		// before the connections moved into the slots. The worst case for the new object, as
		// Connection (an emptier table) is the best; short connections, which close before
		// their slot is needed, never insert at all.
		{name: "ConnectionSlotsFull", unit: "conn", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for i := range abSlotsFull {
					s := connSrc(abUnits + i)
					g.run(b, connPacket(b, s, 80, layers.IPProtocolTCP, "S", isn), g.ext)
					g.run(b, connPacket(b, s, 80, layers.IPProtocolTCP, "A", isn+1), g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte {
				s := connSrc(i)
				return [][]byte{connPacket(b, s, 80, layers.IPProtocolTCP, "S", isn),
					connPacket(b, s, 80, layers.IPProtocolTCP, "A", isn+1)}
			}},
		{name: "FirstSYN", unit: "pkt", want: xdpRedirect,
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{connPacket(b, connSrc(i), 80, layers.IPProtocolTCP, "S", isn)}
			}},
		{name: "FirstACK", unit: "pkt", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for i := range abUnits {
					g.run(b, connPacket(b, connSrc(i), 80, layers.IPProtocolTCP, "S", isn), g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{connPacket(b, connSrc(i), 80, layers.IPProtocolTCP, "A", isn+1)}
			}},
		{name: "FirstUDP", unit: "pkt", want: xdpRedirect,
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{connPacket(b, connSrc(i), 53, layers.IPProtocolUDP, "", 0)}
			}},
		// A datagram flow's first two datagrams, one number per flow: since the first datagram
		// is recorded in its handshake slot, the second is the one that inserts into conntrack.
		{name: "UDPFlow", unit: "flow", want: xdpRedirect,
			next: func(b *testing.B, i int) [][]byte {
				p := connPacket(b, connSrc(i), 53, layers.IPProtocolUDP, "", 0)
				return [][]byte{p, p}
			}},
		{name: "EstablishedHot", unit: "pkt", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for _, p := range flowPackets(b, 16, "A") {
					g.run(b, p, g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte { return [][]byte{abFlows(b)[i%16]} }},
		{name: "Established4096", unit: "pkt", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for _, p := range flowPackets(b, 4096, "A") {
					g.run(b, p, g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte { return [][]byte{abFlows(b)[i%4096]} }},
		// Established datagram flows, more than the flow cache holds (abUDPFlows, each made
		// established by two datagrams first): most packets miss the per-CPU cache and take
		// conntrack's path, which a datagram enters through the live-flow filter's bit.
		{name: "EstablishedUDPMany", unit: "pkt", want: xdpRedirect,
			setup: func(b *testing.B, g *gw) {
				for i := range abUDPFlows {
					p := connPacket(b, connSrc(i), 53, layers.IPProtocolUDP, "", 0)
					g.run(b, p, g.ext)
					g.run(b, p, g.ext)
				}
			},
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{connPacket(b, connSrc((i*7919)%abUDPFlows), 53, layers.IPProtocolUDP, "", 0)}
			}},
		{name: "NonVIP", unit: "pkt", want: xdpPass,
			next: func(b *testing.B, i int) [][]byte {
				return [][]byte{pk{SrcMAC: macClient, DstMAC: macExt, Src: connSrc(i % 4096), Dst: ap(other4, 80),
					Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)}
			}},
	}
}

// skipUnlessLong skips a benchmark that runs its own rounds (minutes, whatever b.N) unless
// XLB_BENCH_LONG is set.
func skipUnlessLong(b *testing.B) {
	if os.Getenv("XLB_BENCH_LONG") == "" {
		b.Skip("runs its own rounds for minutes: set XLB_BENCH_LONG=1")
	}
}

var abFlowPkts [][]byte

// abFlows is flowPackets(4096, "A"), built once.
func abFlows(b *testing.B) [][]byte {
	if abFlowPkts == nil {
		abFlowPkts = flowPackets(b, 4096, "A")
	}
	return abFlowPkts
}

// abRounds rounds of abChunk units per object; abUnits units in all per object and case;
// abInFlight handshakes between a SYN and its ACK in ConnectionInFlight.
const (
	abInFlight = 4096
	// abSlotsFull is three times the default handshake table: e^-3, 5% of the slots, stay
	// without a connection.
	abSlotsFull = 3 * datapath.DefaultHandshakeSize
	abUDPFlows  = 65536
	abRounds    = 15
	abChunk     = 2000
	abUnits     = abRounds * abChunk
)

// abMeasure runs units [from, from+n) of c on g and returns the mean net ns per unit.
func abMeasure(b *testing.B, g *gw, c abCase, units [][][]byte, from, n int) float64 {
	base := passProgram(b)
	prog := g.program()
	var net time.Duration
	err := g.do(func() error {
		for i := from; i < from+n; i++ {
			for _, pkt := range units[i] {
				t, err := progrun.XDP(base, pkt, g.ext, 1)
				if err != nil {
					return err
				}
				r, err := progrun.XDP(prog, pkt, g.ext, 1)
				if err != nil {
					return err
				}
				if r.Verdict != c.want {
					return fmt.Errorf("%s unit %d: verdict %s, want %s", c.name, i, verdictNames[r.Verdict], verdictNames[c.want])
				}
				net += r.Duration - t.Duration
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(net) / float64(n)
}

// BenchmarkAB compares the base object with the committed one, case by case (see above). b.N is
// ignored: every case runs abRounds rounds of abChunk units on each object.
func BenchmarkAB(b *testing.B) {
	skipUnlessLong(b)
	for _, c := range abCases() {
		b.Run(c.name, func(b *testing.B) {
			gs := [2]*gw{abGW(b, true), abGW(b, false)}
			units := make([][][]byte, abUnits)
			for i := range units {
				units[i] = c.next(b, i)
			}
			if c.setup != nil {
				for _, g := range gs {
					c.setup(b, g)
				}
			}
			var res [2][]float64
			for r := range abRounds {
				for k := range 2 {
					o := k
					if r%2 == 1 {
						o = 1 - k // alternate which object goes first
					}
					res[o] = append(res[o], abMeasure(b, gs[o], c, units, r*abChunk, abChunk))
				}
			}
			med := [2]float64{}
			var line strings.Builder
			for o, name := range []string{"base", "new"} {
				s := slices.Clone(res[o])
				slices.Sort(s)
				med[o] = s[len(s)/2]
				fmt.Fprintf(&line, " %s %.0f ns/%s [%.0f-%.0f]", name, med[o], c.unit, s[0], s[len(s)-1])
				b.ReportMetric(med[o], name+"-ns/"+c.unit)
			}
			b.ReportMetric(med[1]/med[0], "new/base")
			b.Logf("%s:%s, new/base %.2f (%d rounds of %d)", c.name, line.String(), med[1]/med[0], abRounds, abChunk)
		})
	}
}
