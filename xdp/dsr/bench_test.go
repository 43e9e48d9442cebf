// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
)

// The benchmarks measure as xdp's do: BPF_PROG_TEST_RUN with repeat 1 (the programs rewrite
// the packet: a repeat would run the rewritten one), the kernel's own duration for each run,
// minus a trivial TC program (TC_ACT_OK) run the same way in the same loop. ns/pkt is the net
// cost; raw-ns/pkt and base-ns/pkt the two means it is made of.

// okProgram loads a TC program that returns TC_ACT_OK.
func okProgram(b *testing.B) *ebpf.Program {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, actOK), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// benchRun runs packet next(i) through prog b.N times and reports the net cost.
func benchRun(b *testing.B, prog *ebpf.Program, next func(i int) []byte, verdict uint32) {
	base := okProgram(b)
	var raw, triv time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pkt := next(i)
		r, err := progrun.SKB(base, pkt, 1)
		if err != nil {
			b.Fatal(err)
		}
		triv += r.Duration
		r, err = progrun.SKB(prog, pkt, 1)
		if err != nil {
			b.Fatal(err)
		}
		if r.Verdict != verdict {
			b.Fatalf("verdict %d, want %d", r.Verdict, verdict)
		}
		raw += r.Duration
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw)/n, "raw-ns/pkt")
	b.ReportMetric(float64(triv)/n, "base-ns/pkt")
	b.ReportMetric((float64(raw)-float64(triv))/n, "ns/pkt")
}

// benchDP is a Datapath with the default flows size (1M, as on a node) and one allowed pair.
// The SYN budget is the most: BenchmarkCarriedNewFlow's SYNs, all from one /24, measure the
// path that records them.
func benchDP(b *testing.B) *Datapath {
	d := newDP(b, Options{Flows: DefaultFlows, SYNBudget: MaxBudget})
	allow(b, d, ap(vip4, 80), protoOf(layers.IPProtocolTCP), ap(pod4, 8080))
	return d
}

// withClient returns a copy of IPv4 frame f with client address and port varied by i (65,536
// ports per address; the checksums are left as they are: the programs do not check them).
func withClient(f []byte, i int, srcOff, portOff int) []byte {
	c := append([]byte(nil), f...)
	binary.BigEndian.PutUint16(c[portOff:], uint16(i))
	c[srcOff+3] = byte(i >> 16)
	return c
}

// BenchmarkCarriedNewFlow: the carried SYN of a new flow (a client port not seen before):
// the option walk, the services lookup, removing the carrier, inserting into half_open.
func BenchmarkCarriedNewFlow(b *testing.B) {
	d := benchDP(b)
	f := pk{Src: ap(client4, 1), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 80)}.bytes(b)
	benchRun(b, d.Program(Ingress), func(i int) []byte { return withClient(f, i, 14+12, 14+28) }, actOK)
}

// BenchmarkCarriedKnownFlow: a carried packet of a flow recorded already (a SYN
// retransmitted): as above, the half_open entry refreshed.
func BenchmarkCarriedKnownFlow(b *testing.B) {
	d := benchDP(b)
	f := pk{Src: ap(client4, 1), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 80)}.bytes(b)
	pkts := make([][]byte, 4096)
	for i := range pkts {
		pkts[i] = withClient(f, i, 14+12, 14+28)
		run(b, d, Ingress, pkts[i])
	}
	benchRun(b, d.Program(Ingress), func(i int) []byte { return pkts[i%len(pkts)] }, actOK)
}

// BenchmarkReply: the reply of one of 4096 recorded flows: the flows lookup, the source
// address and port and three checksums rewritten.
func BenchmarkReply(b *testing.B) {
	d := benchDP(b)
	f := pk{Src: ap(client4, 1), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 80)}.bytes(b)
	r := pk{Src: ap(pod4, 8080), Dst: ap(client4, 1), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	replies := make([][]byte, 4096)
	for i := range replies {
		run(b, d, Ingress, withClient(f, i, 14+12, 14+28))
		replies[i] = withClient(r, i, 14+16, 14+22)
	}
	benchRun(b, d.Program(Egress), func(i int) []byte { return replies[i%len(replies)] }, actOK)
}

// BenchmarkIngressNoCarrier: a packet without carrier on ingress (the common case: every
// packet the node receives).
func BenchmarkIngressNoCarrier(b *testing.B) {
	d := benchDP(b)
	f := pk{Src: ap(client4, 1), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	benchRun(b, d.Program(Ingress), func(int) []byte { return f }, actOK)
}

// BenchmarkEgressNoFlow: a TCP packet of no recorded flow on egress (every other packet the
// node sends): a flows lookup that misses, with 4096 flows recorded.
func BenchmarkEgressNoFlow(b *testing.B) {
	d := benchDP(b)
	f := pk{Src: ap(client4, 1), Dst: ap(pod4, 8080), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 80)}.bytes(b)
	for i := range 4096 {
		run(b, d, Ingress, withClient(f, i, 14+12, 14+28))
	}
	other := pk{Src: ap(node4, 22), Dst: ap(client4, 5000), Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)
	benchRun(b, d.Program(Egress), func(int) []byte { return other }, actOK)
}
