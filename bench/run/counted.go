// SPDX-License-Identifier: Apache-2.0
package run

import "strings"

// countedDrop says whether a drop counter (as named by linkDrops and the datapaths' Drops) is
// part of the loss accounting. The kernel counts some drops twice (a full veth ring is both the
// sender's tx_queue_N_xdp_xmit_errors and the receiver's rx_dropped; an XDP_DROP verdict of xlb
// is both its drop_* reason and the veth's rx_queue_N_xdp_drops), so exactly one counter of each
// pair is summed; the others stay in the JSON for diagnosis.
func countedDrop(name string) bool {
	role, stat, _ := strings.Cut(name, ".")
	switch {
	case strings.HasSuffix(stat, "_xdp_xmit_errors"), strings.HasSuffix(stat, "_xdp_tx_errors"):
		return true // a full ring (or a peer without XDP), counted at the sender
	case strings.HasSuffix(stat, "_xdp_drops"):
		return role != "sink" // the sink drops everything it counts, on purpose
	case strings.HasPrefix(stat, "rx_queue_") && strings.HasSuffix(stat, "_drops"):
		return true // an skb the veth could not queue
	case role == "xlb":
		return strings.HasPrefix(stat, "pass_") // drop_* verdicts are the veth's xdp_drops
	case role == "afxdp":
		// The engine's drop_* verdicts are its own (the frame left the kernel's path); the
		// sockets' xsk_* counters repeat the veth's rx_queue drops.
		return strings.HasPrefix(stat, "drop_")
	case role == "conntrack":
		return stat == "drop" || stat == "early_drop" || stat == "insert_failed"
	case role == "ip":
		return true // the IPv4 stack discarded it (nftables path)
	}
	return false // rx_dropped, tx_dropped: sums of the above
}

// sumCounted is the total of the counted drop counters in the difference after - before.
func sumCounted(before, after map[string]uint64) uint64 {
	var n uint64
	for k, v := range after {
		if countedDrop(k) && v >= before[k] {
			n += v - before[k]
		}
	}
	return n
}

// diff is after - before, for every counter that moved.
func diff(before, after map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			out[k] = v - before[k]
		}
	}
	return out
}
