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
	r, err := NewRunner(Options{
		Prefix: netlab.TaggedPrefix("xs"), Duration: 200 * time.Millisecond, Repeats: 1, Rate: 100_000,
		PopulateRate: 200_000, GenCPU: 0, GatewayCPU: 1,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, sc := range []Scenario{
		{Datapath: &Ceiling{}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixNew, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixEstablished, Flows: 1000, Size: 64},
		{Datapath: &XLB{ConntrackSize: 1 << 16}, Mix: MixUDP, Flows: 100, Size: 128},
		{Datapath: &NFTables{}, Mix: MixEstablished, Flows: 1000, Size: 64},
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
		if _, ok := sc.Datapath.(*XLB); ok && sc.Mix.populates() && res.ConntrackFlows != sc.Flows {
			t.Errorf("%s: %d conntrack entries after populating, want %d", res.Name, res.ConntrackFlows, sc.Flows)
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
	r, err := NewRunner(Options{
		Prefix: netlab.TaggedPrefix("xs"), Duration: 300 * time.Millisecond, Repeats: 1,
		Window: gen.DefaultWindow, PopulateRate: 200_000, GenCPU: 0, GatewayCPU: 1,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
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

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
