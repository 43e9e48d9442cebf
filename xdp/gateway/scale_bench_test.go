// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/progrun"
)

// BenchmarkScaling shows whether the datapath's hot paths share a written cache line between
// CPUs: each case runs on CPU 0 alone, then on CPUs 0 and 1 at once (one gateway, so every map is
// shared as on a real multi-queue NIC; each CPU its own tuples, as RSS would give it), rounds
// alternating, and reports the median ns per unit (net of a trivial program, BPF_PROG_TEST_RUN,
// repeat=1) alone and together. A line both CPUs write per packet would make the together figure
// grow with the other CPU's traffic; per-CPU throughput is the inverse of the figure. Like
// BenchmarkAB it runs its own rounds and needs XLB_BENCH_LONG:
//
//	XLB_BENCH_LONG=1 go test -run '^$' -bench BenchmarkScaling -benchtime 1x ./xdp/
func BenchmarkScaling(b *testing.B) {
	skipUnlessLong(b)
	const (
		rounds = 9
		chunk  = 2000
		isn    = 1000
	)
	// Each CPU's tuples: its own block of connSrc indexes.
	block := func(cpu, i int) int { return cpu<<20 | i }
	cases := []struct {
		name  string
		unit  func(b *testing.B, cpu, i int) [][]byte
		setup func(b *testing.B, g *gw, cpu int)
	}{
		{"EstablishedHot", func(b *testing.B, cpu, i int) [][]byte {
			return [][]byte{connPacket(b, connSrc(block(cpu, i%16)), 80, layers.IPProtocolTCP, "A", isn)}
		}, func(b *testing.B, g *gw, cpu int) {
			for i := range 16 {
				pkt := connPacket(b, connSrc(block(cpu, i)), 80, layers.IPProtocolTCP, "A", isn)
				must(b, g.doOn(cpu, func() error { _, err := progrun.XDP(g.dp.Program(), pkt, g.ext, 1); return err }))
			}
		}},
		{"Connection", func(b *testing.B, cpu, i int) [][]byte {
			s := connSrc(block(cpu, i))
			return [][]byte{connPacket(b, s, 80, layers.IPProtocolTCP, "S", isn),
				connPacket(b, s, 80, layers.IPProtocolTCP, "A", isn+1)}
		}, nil},
		{"FirstUDP", func(b *testing.B, cpu, i int) [][]byte {
			return [][]byte{connPacket(b, connSrc(block(cpu, i)), 53, layers.IPProtocolUDP, "", 0)}
		}, nil},
		{"NonVIP", func(b *testing.B, cpu, i int) [][]byte {
			return [][]byte{pk{SrcMAC: macClient, DstMAC: macExt, Src: connSrc(block(cpu, i%4096)), Dst: ap(other4, 80),
				Proto: layers.IPProtocolTCP, Flags: "A", Payload: make([]byte, 10)}.bytes(b)}
		}, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			g := benchGW(b)
			// Units: per CPU, 3 chunks per round (one alone, one together, and CPU 1's).
			units := [2][][][]byte{}
			for cpu := range 2 {
				for i := range 2 * rounds * chunk {
					units[cpu] = append(units[cpu], c.unit(b, cpu, i))
				}
				if c.setup != nil {
					c.setup(b, g, cpu)
				}
			}
			run := func(cpu, from int) (float64, error) {
				base := passProgram(b)
				var net time.Duration
				err := g.doOn(cpu, func() error {
					for i := from; i < from+chunk; i++ {
						for _, pkt := range units[cpu][i] {
							t, err := progrun.XDP(base, pkt, g.ext, 1)
							if err != nil {
								return err
							}
							r, err := progrun.XDP(g.dp.Program(), pkt, g.ext, 1)
							if err != nil {
								return err
							}
							if r.Verdict != xdpRedirect && r.Verdict != xdpPass {
								return fmt.Errorf("verdict %s", verdictNames[r.Verdict])
							}
							net += r.Duration - t.Duration
						}
					}
					return nil
				})
				return float64(net) / chunk, err
			}
			var alone, together []float64
			next := 0
			for r := range rounds {
				for k := range 2 {
					if (r+k)%2 == 0 {
						v, err := run(0, next)
						must(b, err)
						alone = append(alone, v)
						next += chunk
						continue
					}
					var wg sync.WaitGroup
					var res [2]float64
					var errs [2]error
					for cpu := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							res[cpu], errs[cpu] = run(cpu, next)
						}()
					}
					wg.Wait()
					must(b, errs[0])
					must(b, errs[1])
					together = append(together, (res[0]+res[1])/2)
					next += chunk
				}
			}
			slices.Sort(alone)
			slices.Sort(together)
			ma, mt := alone[len(alone)/2], together[len(together)/2]
			b.ReportMetric(ma, "alone-ns/unit")
			b.ReportMetric(mt, "together-ns/unit")
			b.ReportMetric(ma/mt, "per-cpu-throughput-ratio")
			b.Logf("%s: one CPU %.0f ns/unit [%.0f-%.0f], two CPUs at once %.0f ns/unit per CPU [%.0f-%.0f]: per-CPU throughput %.2fx the single CPU's (%d rounds of %d)",
				c.name, ma, alone[0], alone[len(alone)-1], mt, together[0], together[len(together)-1], ma/mt, rounds, chunk)
		})
	}
}
