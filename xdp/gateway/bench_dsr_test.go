// SPDX-License-Identifier: Apache-2.0
package gateway

// The gateway's cost of direct server return: the same packets to a VIP whose
// backends are of DSR and to one whose backends are not, measured in one loop, alternately, so
// that the machine's noise falls on both alike. Run:
//
//	go test -run '^$' -bench 'DSR' -benchtime 30000x -count 8 ./xdp/
//
// Each sub-benchmark reports plain-ns/pkt and dsr-ns/pkt (each net of a trivial XDP program run
// beside it, as benchPackets does) and delta-ns/pkt, their difference within the run.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The VIPs of the DSR variant; the plain variant uses vip4 and vip6.
var (
	vip4d = netip.MustParseAddr("198.18.100.3")
	vip6d = netip.MustParseAddr("2001:db8:100::3")
)

// dsrBenchGW is a gateway with, for each family and for TCP :80 and UDP :53, a VIP whose
// backends are not of DSR (vip4, vip6) and one whose backends, the same addresses and ports,
// are (vip4d, vip6d). Every table has 65,537 slots over the backends, as in benchGW. The
// new-flow rate guard is off: new-flow packets must insert every time.
func dsrBenchGW(b *testing.B) *gw {
	g := newGW(b, Options{Settings: datapath.Settings{ConntrackSize: 1 << 20, NewFlowRate: -1}})
	bes4 := []netip.Addr{be1v4, be2v4, be3v4}
	bes6 := []netip.Addr{be1v6, be2v6}
	id := datapath.VIPID(0)
	for _, fam := range []struct {
		plain, dsr netip.Addr
		bes        []netip.Addr
	}{{vip4, vip4d, bes4}, {vip6, vip6d, bes6}} {
		for _, svc := range []struct {
			port, target uint16
			proto        datapath.Protocol
		}{{80, 8080, datapath.TCP}, {53, 5353, datapath.UDP}} {
			for _, dsr := range []bool{false, true} {
				id++
				vip := fam.plain
				if dsr {
					vip = fam.dsr
				}
				must(b, g.dp.UpsertVIP(datapath.Frontend{Addr: vip, Port: svc.port, Proto: svc.proto}, datapath.VIPConfig{ID: id}))
				var ids []datapath.BackendID
				for i, a := range fam.bes {
					bid := datapath.BackendID(100 + int(id)*10 + i)
					must(b, g.dp.UpsertBackend(bid, datapath.Backend{Addr: a, Port: svc.target, DSR: dsr}))
					ids = append(ids, bid)
				}
				must(b, g.dp.SetMaglevTable(id, table(65537, ids...)))
			}
		}
	}
	return g
}

// dsrCase is one kind of packet, to the plain VIP and to the DSR one.
type dsrCase struct {
	name  string
	six   bool
	proto layers.IPProtocol
	flags string
	// n is how many distinct tuples; est says their flows are established before the run
	// (by one packet each), so that the run measures the flows' later packets.
	n   int
	est bool
	// carried says the DSR variant's packets must hold the carrier (they open their flow).
	carried bool
}

var dsrCases = []dsrCase{
	{name: "EstTCP4", proto: layers.IPProtocolTCP, flags: "A", n: 4096, est: true},
	{name: "EstTCP6", six: true, proto: layers.IPProtocolTCP, flags: "A", n: 4096, est: true},
	{name: "SYN4", proto: layers.IPProtocolTCP, flags: "S", n: 1 << 16, carried: true},
	{name: "SYN6", six: true, proto: layers.IPProtocolTCP, flags: "S", n: 1 << 16, carried: true},
	{name: "NewUDP4", proto: layers.IPProtocolUDP, n: 1 << 16, carried: true},
	{name: "NewUDP6", six: true, proto: layers.IPProtocolUDP, n: 1 << 16, carried: true},
}

// packets builds c.n packets to vip, each of its own tuple (two client addresses x 32,768
// ports), 64-byte frames for IPv4 TCP as in the other benchmarks.
func (c dsrCase) packets(b *testing.B, vip netip.Addr) [][]byte {
	srcs := []netip.Addr{client4, router4}
	if c.six {
		srcs = []netip.Addr{client6, router6}
	}
	port, size := uint16(80), 10
	if c.proto == layers.IPProtocolUDP {
		port, size = 53, 18
	}
	out := make([][]byte, c.n)
	for i := range out {
		out[i] = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(srcs[i>>15], uint16(i%(1<<15)+1024)), Dst: ap(vip, port),
			Proto: c.proto, Flags: c.flags, Payload: make([]byte, size)}.bytes(b)
	}
	return out
}

// checkDSROut checks what the program made of in: DNATed to one of the backends' target port,
// with the carrier naming vip:port when carried, and without it otherwise.
func checkDSROut(in, out []byte, six, carried bool) error {
	if len(out) < 14+40 {
		return fmt.Errorf("output of %d bytes", len(out))
	}
	grow := 0
	if carried {
		grow = datapath.CarrierOpt4Len
		if six {
			grow = datapath.CarrierOpt6HdrLen
		}
	}
	if len(out) != len(in)+grow {
		return fmt.Errorf("output of %d bytes from %d, want %d more (carried %v)", len(out), len(in), grow, carried)
	}
	var vip, dst []byte
	var vport, l4 []byte
	if !six {
		ihl := int(out[14]&0x0f) * 4
		if want := 20 + grow; ihl != want {
			return fmt.Errorf("IHL %d bytes, want %d", ihl, want)
		}
		vip, dst, vport, l4 = in[30:34], out[30:34], in[36:38], out[14+ihl:]
		if carried {
			o := out[34:42]
			if o[0] != datapath.CarrierOpt4Type || o[1] != datapath.CarrierOpt4Len || !bytes.Equal(o[2:4], vport) || !bytes.Equal(o[4:8], vip) {
				return fmt.Errorf("carrier % x, want VIP %x port %x", o, vip, vport)
			}
		}
	} else {
		vip, dst, vport, l4 = in[38:54], out[38:54], in[56:58], out[54+grow:]
		next := out[20]
		if carried {
			o := out[54:78]
			if next != 60 || o[0] != in[20] || o[2] != datapath.CarrierOpt6Type || o[3] != datapath.CarrierOpt6Data ||
				!bytes.Equal(o[4:6], vport) || !bytes.Equal(o[6:22], vip) {
				return fmt.Errorf("next header %d, carrier % x, want VIP %x port %x", next, o, vip, vport)
			}
		} else if next != in[20] {
			return fmt.Errorf("next header %d, want %d", next, in[20])
		}
	}
	if bytes.Equal(dst, vip) {
		return fmt.Errorf("destination still the VIP %x", vip)
	}
	target := binary.BigEndian.Uint16(l4[2:])
	if want := map[uint16]uint16{80: 8080, 53: 5353}[binary.BigEndian.Uint16(vport)]; target != want {
		return fmt.Errorf("destination port %d, want %d", target, want)
	}
	return nil
}

// BenchmarkDSR: each case's packets to the plain VIP and to the DSR VIP, alternately, in one
// loop (the order swapped every iteration); every output is checked (verdict, DNAT, carrier or
// none) outside the kernel's measured time.
func BenchmarkDSR(b *testing.B) {
	for _, c := range dsrCases {
		b.Run(c.name, func(b *testing.B) {
			g := dsrBenchGW(b)
			vips := [2]netip.Addr{vip4, vip4d}
			if c.six {
				vips = [2]netip.Addr{vip6, vip6d}
			}
			pkts := [2][][]byte{c.packets(b, vips[0]), c.packets(b, vips[1])}
			if c.est {
				// Each flow's first packet opens it (and, to the DSR VIP, carries: checked
				// here); the run then measures the established flows.
				for v := range pkts {
					for _, p := range pkts[v] {
						r := g.run(b, p, g.ext)
						if r.Verdict != xdpRedirect {
							b.Fatalf("opening packet: verdict %s", verdictNames[r.Verdict])
						}
						if err := checkDSROut(p, r.Data, c.six, v == 1); err != nil {
							b.Fatalf("opening packet (dsr %v): %v", v == 1, err)
						}
					}
				}
			}
			if b.N > c.n && !c.est {
				//lint:ignore SA3001 the run is capped at the packets built for it (ns/op stays per packet)
				b.N = c.n // each packet must open its flow
			}
			base := passProgram(b)
			prog := g.dp.Program()
			var raw, triv [2]time.Duration
			b.ResetTimer()
			err := g.do(func() error {
				for i := 0; i < b.N; i++ {
					for k := range 2 {
						v := k ^ (i & 1)
						pkt := pkts[v][i%len(pkts[v])]
						r, err := progrun.XDP(base, pkt, g.ext, 1)
						if err != nil {
							return err
						}
						triv[v] += r.Duration
						r, err = progrun.XDP(prog, pkt, g.ext, 1)
						if err != nil {
							return err
						}
						raw[v] += r.Duration
						if r.Verdict != xdpRedirect {
							return fmt.Errorf("dsr %v, packet %d: verdict %s", v == 1, i, verdictNames[r.Verdict])
						}
						if err := checkDSROut(pkt, r.Data, c.six, v == 1 && c.carried); err != nil {
							return fmt.Errorf("dsr %v, packet %d: %w", v == 1, i, err)
						}
					}
				}
				return nil
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			n := float64(b.N)
			net := func(v int) float64 { return (float64(raw[v]) - float64(triv[v])) / n }
			b.ReportMetric(net(0), "plain-ns/pkt")
			b.ReportMetric(net(1), "dsr-ns/pkt")
			b.ReportMetric(net(1)-net(0), "delta-ns/pkt")
			b.ReportMetric(float64(triv[0]+triv[1])/2/n, "base-ns/pkt")
		})
	}
}
