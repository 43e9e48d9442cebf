// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// counterNames name the programs' counters, in the order of enum dsr_stat (bpf/stats.h;
// TestCounterNames checks the count). Metrics use these names.
var counterNames = [...]string{
	"carrier_accepted",         // carried packet of an allowed pair: flow recorded, carrier removed
	"carrier_frag_stripped",    // carried non-first fragment: carrier removed, nothing recorded
	"drop_carrier_not_allowed", // carrier for a {frontend, endpoint} pair not allowed
	"drop_carrier_malformed",   // carrier of the wrong length or layout
	"drop_carrier_options",     // IPv4 carrier beside other options
	"drop_carrier_truncated",   // carried packet shorter than its headers say
	"drop_carrier_not_l4",      // carrier on a packet other than TCP or UDP
	"drop_strip_failed",        // the kernel refused to remove the carrier
	"record_failed",            // the flow could not be recorded: passed, replies not rewritten
	"reply_rewritten",          // reply of a recorded flow given the VIP
	"reply_expired",            // reply of a flow idle past its timeout: left alone
	"reply_frag_rewritten",     // later fragment of a rewritten reply given the VIP
	"icmp_rewritten",           // ICMP error about a recorded flow given the VIP
	"drop_udp6_zero_csum",      // IPv6 UDP reply with checksum 0 (invalid)
	"drop_rewrite_failed",      // a rewrite failed half-way: dropped rather than sent half done
	"tcp_pickup_over_budget",   // carried non-SYN TCP packet of no known flow over Options.TCPPickupBudget: passed, not recorded
	"udp_new_over_budget",      // carried UDP datagram of a new flow over Options.UDPNewBudget: passed, not recorded
	"carrier_conflict",         // carried non-SYN naming another frontend than its tuple's live flow: passed, the flow kept
	"syn_over_budget",          // carried SYN of a new candidate over Options.SYNBudget: passed, not recorded
	"budget_frontend_spent",    // of the *_over_budget: the frontend's share of the budget was spent
	"budget_prefix_spent",      // of the *_over_budget: the client prefix's share of the budget was spent
	"flow_repointed",           // the Pod's SYN-ACK moved a tuple's flow to the frontend of its new connection
	"icmp_foreign",             // ICMP error about a recorded flow from neither the quoted Pod nor the node: left alone
}

// CounterNames returns the names Counters uses, in the programs' order.
func CounterNames() []string { return counterNames[:] }

// Counters returns the programs' counters by name (CounterNames), summed over CPUs, since the
// stats map was created (pinned: since the first agent's Load).
func (d *Datapath) Counters() (map[string]uint64, error) { return readCounters(d.objs.Stats) }

// readCounters sums stats over CPUs.
func readCounters(stats *ebpf.Map) (map[string]uint64, error) {
	out := make(map[string]uint64, len(counterNames))
	for i, name := range counterNames {
		var per []uint64
		if err := stats.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("dsr: read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}
