// SPDX-License-Identifier: Apache-2.0
package run

import (
	"fmt"

	"github.com/xlb-dev/xlb/bench/gen"
)

// Mix is the kind of traffic a scenario sends.
type Mix string

// The mixes.
const (
	// MixNew: every frame is a TCP SYN (a new connection): for xlb the VIP lookup, the Maglev
	// slot and DNAT on every packet, no conntrack insert (xlb inserts on the first non-SYN).
	MixNew Mix = "new"
	// MixEstablished: TCP ACKs of flows conntrack already holds (one populating pass over all
	// flows runs first, unmeasured): for xlb the flow cache or conntrack lookup, then DNAT.
	MixEstablished Mix = "est"
	// MixUDP: UDP datagrams; after the populating pass, flows are known as for MixEstablished.
	MixUDP Mix = "udp"
	// MixConnect: whole TCP handshakes through the gateway, each on a fresh tuple. The
	// generator sends a SYN; the sink answers it with a SYN-ACK (stateless, bench/bpf/sink.c),
	// which crosses the gateway back; the generator's veth answers that with the ACK
	// (bench_client in bench/bpf/gen.c), which crosses the gateway again; the sink counts the
	// ACK as one handshake. A sample sends at most Flows SYNs, so no tuple repeats (a repeated
	// tuple would measure a SYN on a live connection, not a new one). Mpps is then millions of
	// handshakes per second and the costs are per handshake (three packets at the gateway).
	MixConnect Mix = "cps"
)

// Scenario is one row of the benchmark: a datapath, a traffic mix, a flow count, a frame size.
type Scenario struct {
	Datapath Datapath
	Mix      Mix
	Flows    int
	Size     int
	// Skip, if set, is why the scenario is not run (it is still printed).
	Skip string
}

// Name is "<datapath>/<mix>/<flows>/<size>B".
func (s Scenario) Name() string {
	return fmt.Sprintf("%s/%s/%s/%dB", s.Datapath.Name(), s.Mix, FlowsLabel(s.Flows), s.Size)
}

// FlowsLabel writes a flow count the short way (1, 1k, 100k, 1M).
func FlowsLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// populates says whether the mix needs a populating pass over all flows before measuring.
func (m Mix) populates() bool { return m != MixNew && m != MixConnect }

// Unit is what the mix's rate counts: "pkt" (a frame at the sink) or "conn" (a handshake).
func (m Mix) Unit() string {
	if m == MixConnect {
		return "conn"
	}
	return "pkt"
}

// proto and flags of the mix's frames.
func (m Mix) frames() (gen.Protocol, uint8) {
	switch m {
	case MixNew, MixConnect:
		return gen.TCP, gen.FlagSYN
	case MixUDP:
		return gen.UDP, 0
	}
	return gen.TCP, gen.FlagACK
}
