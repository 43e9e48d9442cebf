// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The datapath benchmarks measure the way Katran's numbers were taken on this machine: many
// BPF_PROG_TEST_RUN calls with repeat=1 (a rewritten packet cannot be run again), the kernel's
// own duration for each, minus a trivial XDP_PASS program measured the same way, interleaved in
// the same run. The result is reported as ns/pkt (net); raw-ns/pkt and base-ns/pkt are the two
// means it is made of.

func passProgram(b *testing.B) *ebpf.Program {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// benchPackets runs every packet of pkts in turn, b.N times in all, and reports the net cost.
func benchPackets(b *testing.B, g *gw, ifindex int, pkts [][]byte, wantVerdict uint32) {
	base := passProgram(b)
	prog := g.dp.Program()
	var raw, triv time.Duration
	b.ResetTimer()
	err := g.do(func() error {
		for i := 0; i < b.N; i++ {
			pkt := pkts[i%len(pkts)]
			r, err := progrun.XDP(base, pkt, ifindex, 1)
			if err != nil {
				return err
			}
			triv += r.Duration
			r, err = progrun.XDP(prog, pkt, ifindex, 1)
			if err != nil {
				return err
			}
			if r.Verdict != wantVerdict {
				b.Fatalf("verdict %s, want %s", verdictNames[r.Verdict], verdictNames[wantVerdict])
			}
			raw += r.Duration
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw)/n, "raw-ns/pkt")
	b.ReportMetric(float64(triv)/n, "base-ns/pkt")
	b.ReportMetric((float64(raw)-float64(triv))/n, "ns/pkt")
}

// flowPackets builds n client -> VIP:80 TCP packets with distinct source ports.
func flowPackets(b *testing.B, n int, flags string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, uint16(10000+i)), Dst: ap(vip4, 80),
			Proto: layers.IPProtocolTCP, Flags: flags, Payload: make([]byte, 10)}.bytes(b)
	}
	return out
}

func benchGW(b *testing.B) *gw {
	g := newGW(b, Options{Settings: datapath.Settings{ConntrackSize: 1 << 20}})
	services(b, g)
	// A realistic table: M = 65537 over 3 backends.
	must(b, g.dp.UpsertBackend(21, datapath.Backend{Addr: be2v4, Port: 8080}))
	must(b, g.dp.UpsertBackend(22, datapath.Backend{Addr: be3v4, Port: 8080}))
	must(b, g.dp.SetMaglevTable(1, table(65537, 1, 21, 22)))
	return g
}

// BenchmarkNewTCPFlow: a SYN to a VIP (VIP lookup, Maglev, DNAT, fib, redirect; no conntrack).
func BenchmarkNewTCPFlow(b *testing.B) {
	g := benchGW(b)
	benchPackets(b, g, g.ext, flowPackets(b, 4096, "S"), xdpRedirect)
}

// BenchmarkNewUDPFlow: the first datagram of a UDP flow, which also inserts a conntrack entry.
func BenchmarkNewUDPFlow(b *testing.B) {
	g := benchGW(b)
	pkts := make([][]byte, 0, 1<<16)
	for i := range cap(pkts) {
		src := client4
		if i >= 1<<15 {
			src = router4
		}
		pkts = append(pkts, pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, uint16(i)), Dst: ap(vip4, 53),
			Proto: layers.IPProtocolUDP, Payload: make([]byte, 18)}.bytes(b))
	}
	if b.N > len(pkts) {
		//lint:ignore SA3001 the run is capped at the packets built for it (ns/op stays per packet)
		b.N = len(pkts) // each packet must be a new flow
	}
	benchPackets(b, g, g.ext, pkts, xdpRedirect)
}

// benchEstablished measures ACKs of n flows that were established first.
func benchEstablished(b *testing.B, n int) {
	g := benchGW(b)
	pkts := flowPackets(b, n, "A")
	for _, p := range pkts {
		g.run(b, p, g.ext)
	}
	benchPackets(b, g, g.ext, pkts, xdpRedirect)
}

// BenchmarkEstablishedFlow: an ACK of one of 4096 flows conntrack holds.
func BenchmarkEstablishedFlow(b *testing.B) { benchEstablished(b, 4096) }

// BenchmarkEstablishedHotFlow: an ACK of one of 16 flows conntrack holds (the cache-resident
// case, as in Katran's own fixtures).
func BenchmarkEstablishedHotFlow(b *testing.B) { benchEstablished(b, 16) }

// BenchmarkEstablishedHotFlowTX: as EstablishedHotFlow on a one-armed gateway (the backend is
// reached through the ingress interface: XDP_TX, no redirect).
func BenchmarkEstablishedHotFlowTX(b *testing.B) {
	g := benchGW(b)
	pkts := make([][]byte, 16)
	for i := range pkts {
		pkts[i] = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, uint16(10000+i)), Dst: ap(vip4, 8000),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
		g.run(b, pkts[i], g.ext)
	}
	benchPackets(b, g, g.ext, pkts, xdpTX)
}

// BenchmarkNewTCPFlowHot: SYNs of 16 flows (cache-resident).
func BenchmarkNewTCPFlowHot(b *testing.B) {
	g := benchGW(b)
	benchPackets(b, g, g.ext, flowPackets(b, 16, "S"), xdpRedirect)
}

// BenchmarkReverseNAT: a backend's reply, translated statelessly back to the VIP.
func BenchmarkReverseNAT(b *testing.B) {
	g := benchGW(b)
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = pk{SrcMAC: macBE1, DstMAC: macInt, Src: ap(be1v4, 8080), Dst: ap(client4, uint16(10000+i)),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	}
	benchPackets(b, g, g.int, pkts, xdpRedirect)
}

// BenchmarkReverseNATMaglev: the reply of an endpoint serving two VIPs, on a gateway without its
// conntrack entry: the VIP is re-derived from the two candidates' Maglev tables (a conntrack miss,
// then two hashes and table lookups), then translated as in ReverseNAT.
func BenchmarkReverseNATMaglev(b *testing.B) {
	g := benchGW(b)
	// VIP 9 (vip4:81) sends every tuple to be2v4:9000, VIP 10 (vip4:82) none.
	must(b, g.dp.SetMaglevTable(10, table(65537, 21)))
	must(b, g.dp.SetReverse(datapath.Endpoint{Addr: be2v4, Port: 9000, Proto: datapath.TCP},
		datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{9, 10}}))
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(be2v4, 9000), Dst: ap(client4, uint16(10000+i)),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	}
	benchPackets(b, g, g.int, pkts, xdpRedirect)
}

// BenchmarkNonVIPPass: TCP to an address that is no VIP, from one that is no backend.
func BenchmarkNonVIPPass(b *testing.B) {
	g := benchGW(b)
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, uint16(10000+i)), Dst: ap(other4, 80),
			Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	}
	benchPackets(b, g, g.ext, pkts, xdpPass)
}

// distinctTCP builds n client -> VIP:80 TCP packets with flags, each of its own tuple (two client
// addresses x 32,768 ports).
func distinctTCP(b *testing.B, n int, flags string) [][]byte {
	pkts := make([][]byte, n)
	for i := range pkts {
		src := client4
		if i >= 1<<15 {
			src = router4
		}
		pkts[i] = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(src, uint16(i%(1<<15)+1024)), Dst: ap(vip4, 80),
			Proto: layers.IPProtocolTCP, Flags: flags, Payload: make([]byte, 10)}.bytes(b)
	}
	return pkts
}

// BenchmarkNewTCPFlowFirstSYN: the first SYN of each of 65,536 new tuples (VIP, Maglev, the
// handshake-table insert, DNAT, redirect); NewTCPFlow's 4,096 tuples repeat, so most of its SYNs
// are retransmissions.
func BenchmarkNewTCPFlowFirstSYN(b *testing.B) {
	g := benchGW(b)
	pkts := distinctTCP(b, 1<<16, "S")
	if b.N > len(pkts) {
		//lint:ignore SA3001 the run is capped at the packets built for it (ns/op stays per packet)
		b.N = len(pkts) // each packet must be a first SYN
	}
	benchPackets(b, g, g.ext, pkts, xdpRedirect)
}

// BenchmarkNewTCPFlowFirstACK: the handshake's ACK of each of 65,536 flows whose SYN was seen:
// the backend (from the handshake table, else Maglev) and the conntrack insert.
func BenchmarkNewTCPFlowFirstACK(b *testing.B) {
	g := benchGW(b)
	for _, p := range distinctTCP(b, 1<<16, "S") {
		g.run(b, p, g.ext)
	}
	pkts := distinctTCP(b, 1<<16, "A")
	if b.N > len(pkts) {
		//lint:ignore SA3001 the run is capped at the packets built for it (ns/op stays per packet)
		b.N = len(pkts) // each packet must be a first ACK
	}
	benchPackets(b, g, g.ext, pkts, xdpRedirect)
}

// BenchmarkNewTCPConnection: a whole new connection as the gateway sees it, the SYN of a fresh
// tuple then its handshake ACK (the filter and handshake-table write, then the handshake hit and
// the conntrack insert), reported per connection: ns/conn is the two packets' net cost together.
func BenchmarkNewTCPConnection(b *testing.B) {
	g := benchGW(b)
	const isn = 1000
	if b.N > 1<<20 {
		//lint:ignore SA3001 the run is capped at the packets built for it (ns/op stays per packet)
		b.N = 1 << 20 // each connection must be a fresh tuple
	}
	conns := make([][2][]byte, b.N)
	for i := range conns {
		s := connSrc(i)
		conns[i] = [2][]byte{connPacket(b, s, 80, layers.IPProtocolTCP, "S", isn),
			connPacket(b, s, 80, layers.IPProtocolTCP, "A", isn+1)}
	}
	base := passProgram(b)
	prog := g.dp.Program()
	var raw, triv time.Duration
	b.ResetTimer()
	err := g.do(func() error {
		for i := range conns {
			for _, pkt := range conns[i] {
				r, err := progrun.XDP(base, pkt, g.ext, 1)
				if err != nil {
					return err
				}
				triv += r.Duration
				r, err = progrun.XDP(prog, pkt, g.ext, 1)
				if err != nil {
					return err
				}
				if r.Verdict != xdpRedirect {
					return fmt.Errorf("connection %d: verdict %s, want redirect", i, verdictNames[r.Verdict])
				}
				raw += r.Duration
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw)/n, "raw-ns/conn")
	b.ReportMetric(float64(triv)/n, "base-ns/conn")
	b.ReportMetric((float64(raw)-float64(triv))/n, "ns/conn")
}
