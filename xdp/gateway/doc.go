// SPDX-License-Identifier: Apache-2.0

// Package gateway loads and drives the gateway's XDP datapath: the BPF program in bpf/ that balances
// client -> VIP traffic over backends with per-VIP Maglev tables and conntrack, DNATs straight to
// Pod IPs, and restores the VIP as the source of the backends' replies.
//
// A [Datapath] owns the loaded program and its maps. Maps and links are pinned under a bpffs
// directory (default [DefaultPinPath]) so that a new process adopts them with [Load] and
// forwarding never stops while the daemon restarts. The typed API (VIPs, backends, Maglev
// tables, reverse-NAT entries, source ranges, conntrack, counters) is shaped for a reconciler:
// every call is idempotent and says which VIP or backend it failed on.
//
// The flow hash that picks a Maglev slot is implemented here too ([FlowHash]), bit for bit as
// in the BPF program, so tools and tests can compute a flow's backend without the kernel.
package gateway
