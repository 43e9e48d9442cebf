// SPDX-License-Identifier: Apache-2.0
package run

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/bench/gen"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestSmoke runs every datapath briefly at a low, paced rate through a real topology and checks
// that frames flowed and that the counts add up: every frame sent was received by the sink or
// shows in a counted drop counter. It asserts nothing about speed.
func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the benchmark smoke test needs root (BPF, netns); run it with `make test` as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := smokeRunner(t, Options{Duration: 200 * time.Millisecond, Rate: 100_000})
	for _, sc := range []Scenario{
		{Datapath: &Ceiling{}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixNew, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixUDP, Flows: 100, Size: 128},
		{Datapath: &XLB{ConntrackSize: 1 << 16, DSR: true}, Mix: MixNew, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16, DSR: true}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16, DSR: true}, Mix: MixUDP, Flows: 100, Size: 128},
		{Datapath: &NFTables{}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &AFXDP{CPU: 1}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &AFXDP{CPU: 1}, Mix: MixUDP, Flows: 100, Size: 128},
	} {
		res, err := r.Measure(ctx, sc)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name(), err)
		}
		for i, s := range res.Samples {
			if s.Sent == 0 || s.Received == 0 {
				t.Errorf("%s run %d: sent %d, received %d: nothing flowed", res.Name, i+1, s.Sent, s.Received)
			}
			if s.Sent != s.Received+s.CountedDrops {
				t.Errorf("%s run %d: sent %d != received %d + counted drops %d (drop counters: %v)",
					res.Name, i+1, s.Sent, s.Received, s.CountedDrops, s.Drops)
			}
		}
		// Costs: the gateway's threads did work for every sample; bpf_stats counted the
		// program of an XDP datapath once per frame it forwarded (at least), and nothing for
		// the others; the cost spreads are there for Validate.
		_, programmed := sc.Datapath.(programmed)
		for i, s := range res.Samples {
			// (Not GwBusyPct: /proc/stat's 4 ms ticks may all land on other work in a short
			// sample; the schedstat figure is exact.)
			if s.Cost.CPUNsPerUnit <= 0 {
				t.Errorf("%s run %d: no gateway CPU time per frame (%+v)", res.Name, i+1, s.Cost)
			}
			if programmed && (s.Cost.BPFRuns < s.Received || s.Cost.BPFNsPerPkt <= 0) {
				t.Errorf("%s run %d: bpf_stats %d runs, %.1f ns each, for %d frames received", res.Name, i+1, s.Cost.BPFRuns, s.Cost.BPFNsPerPkt, s.Received)
			}
			if !programmed && s.Cost.BPFRuns != 0 {
				t.Errorf("%s run %d: bpf_stats of %d runs for a datapath that is not an XDP program", res.Name, i+1, s.Cost.BPFRuns)
			}
		}
		// The gateway's threads: its NAPI thread and the CPU's ksoftirqd, and for AF_XDP the
		// workers pinned to the gateway's CPU.
		_, worker := sc.Datapath.(userspaceWorker)
		for i, s := range res.Samples {
			if !worker && s.Cost.GwThreads != 2 || worker && s.Cost.GwThreads < 3 {
				t.Errorf("%s run %d: %d gateway threads counted", res.Name, i+1, s.Cost.GwThreads)
			}
		}
		if programmed && res.BPFNs.Median <= 0 || res.CPUNs.Median <= 0 {
			t.Errorf("%s: cost summaries bpf %+v, cpu %+v", res.Name, res.BPFNs, res.CPUNs)
		}
		// DSR: every SYN opens its flow at the gateway and carries the frontend; the
		// established flows' frames (their first ones, in the populating pass, carried) do not.
		x, isXLB := sc.Datapath.(*XLB)
		for i, s := range res.Samples {
			want := uint64(0)
			if isXLB && x.DSR && sc.Mix == MixNew {
				want = s.Received
			}
			if s.Carried != want {
				t.Errorf("%s run %d: %d of %d frames received carried the DSR carrier, want %d", res.Name, i+1, s.Carried, s.Received, want)
			}
		}
		_, isAFXDP := sc.Datapath.(*AFXDP)
		if (isXLB || isAFXDP) && sc.Mix.populates() && res.ConntrackFlows != sc.Flows {
			t.Errorf("%s: %d conntrack entries after populating, want %d", res.Name, res.ConntrackFlows, sc.Flows)
		}
	}
}

// TestSmokeConnect runs the connections-per-second mix through xlb and nftables at a low,
// paced rate: every SYN sent must come back as a handshake the sink counted (or a counted drop),
// the sink must have answered every SYN that reached it, and each handshake must have cost
// xlb's program exactly three runs (SYN, SYN-ACK, ACK) and the gateway's CPU some time.
func TestSmokeConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the benchmark smoke test needs root (BPF, netns); run it with `make test` as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The closed loop: a paced chunk is sent in one burst, which would overrun the gateway's
	// ring, as handshakes take three passes through it.
	r := smokeRunner(t, Options{Duration: 200 * time.Millisecond, Rate: 50_000, Window: gen.DefaultWindow})
	r.opts.Repeats = 2 // the second sample must use tuples of its own
	const flows = 2000
	for _, sc := range []Scenario{
		{Datapath: &XLB{ConntrackSize: 1 << 16, Forward: true}, Mix: MixConnect, Flows: flows, Size: 64},
		{Datapath: &NFTables{Forward: true}, Mix: MixConnect, Flows: flows, Size: 64},
	} {
		res, err := r.Measure(ctx, sc)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name(), err)
		}
		if len(res.Samples) != 2 {
			t.Fatalf("%s: %d samples, want 2", res.Name, len(res.Samples))
		}
		_, isXLB := sc.Datapath.(*XLB)
		for i, s := range res.Samples {
			if s.Sent != flows {
				t.Errorf("%s run %d: sent %d SYNs, want %d (one per tuple, bounded by the flow count)", res.Name, i+1, s.Sent, flows)
			}
			if s.Received == 0 || s.Sent != s.Received+s.CountedDrops {
				t.Errorf("%s run %d: sent %d != handshakes %d + counted drops %d (drop counters: %v)",
					res.Name, i+1, s.Sent, s.Received, s.CountedDrops, s.Drops)
			}
			if s.Answered < s.Received || s.Answered > s.Sent {
				t.Errorf("%s run %d: the sink answered %d SYNs for %d handshakes of %d sent", res.Name, i+1, s.Answered, s.Received, s.Sent)
			}
			if s.Cost.CPUNsPerUnit <= 0 {
				t.Errorf("%s run %d: no gateway CPU time per handshake (%+v)", res.Name, i+1, s.Cost)
			}
			if isXLB && (s.CountedDrops == 0 && s.Cost.BPFRuns != 3*s.Received || s.Cost.BPFRuns < 3*s.Received) {
				t.Errorf("%s run %d: xlb's program ran %d times for %d handshakes, want 3 each (%v)", res.Name, i+1, s.Cost.BPFRuns, s.Received, s.Drops)
			}
			if isXLB && (s.Cost.BPFNsPerPkt <= 0 || s.Cost.BPFNsPerUnit < 3*s.Cost.BPFNsPerPkt*0.99) {
				t.Errorf("%s run %d: bpf ns per packet %.1f, per handshake %.1f: want > 0 and 3x", res.Name, i+1, s.Cost.BPFNsPerPkt, s.Cost.BPFNsPerUnit)
			}
			if !isXLB && s.Cost.BPFRuns != 0 {
				t.Errorf("%s run %d: bpf_stats of %d runs for a datapath that is not an XDP program", res.Name, i+1, s.Cost.BPFRuns)
			}
		}
	}
}

// TestSmokeClosedLoop runs xlb at full speed with the generator's closed loop: the generator
// must have waited for the sink (it outruns any datapath), and the counts must still add up.
func TestSmokeClosedLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the benchmark smoke test needs root (BPF, netns); run it with `make test` as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := smokeRunner(t, Options{Duration: 300 * time.Millisecond, Window: gen.DefaultWindow})
	sc := Scenario{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixEstablished, Flows: 1000, Size: 64}
	res, err := r.Measure(ctx, sc)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name(), err)
	}
	for i, s := range res.Samples {
		if s.Sent == 0 || s.Received == 0 {
			t.Errorf("run %d: sent %d, received %d: nothing flowed", i+1, s.Sent, s.Received)
		}
		if s.Throttled == 0 {
			t.Errorf("run %d: the generator never waited for the sink at full speed (window %d)", i+1, gen.DefaultWindow)
		}
		if s.Sent != s.Received+s.CountedDrops {
			t.Errorf("run %d: sent %d != received %d + counted drops %d (drop counters: %v)",
				i+1, s.Sent, s.Received, s.CountedDrops, s.Drops)
		}
	}
}

// smokeRunner is a Runner for the smoke tests: opts' duration, rate and window, one repeat, the
// generator on CPU 0 and the gateway on CPU 1. It is closed when the test ends.
func smokeRunner(t *testing.T, opts Options) *Runner {
	t.Helper()
	opts.Prefix, opts.Repeats, opts.PopulateRate = netlab.TaggedPrefix("xs"), 1, 200_000
	opts.GenCPU, opts.GatewayCPU = 0, 1
	opts.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	r, err := NewRunner(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
