// SPDX-License-Identifier: Apache-2.0

// Package forward is xlb's forwarding decision in Go: a gateway datapath's tables (VIP
// frontends, backends, Maglev tables, reverse NAT entries) and flow state (conntrack, the
// handshake table, the new-flow rate guard) held in memory, and the function that decides, from
// a packet's headers, where it goes and why — the rules of lb_forward and lb_reverse in
// xdp/gateway/bpf/xlb.c, once more in Go.
//
// Three things run it: the AF_XDP engine (xdp/afxdp) on every frame it balances; `xlb show
// flow` (xdp/inspect) over a snapshot of the XDP datapath's pinned maps, to say where one flow's
// packets go; and the reconciler's tests (lb/reconcile), which need a datapath but not a kernel.
// The parity tests (xdp/afxdp) hold it to the BPF program byte for byte, so the C and this are
// the only two copies of the decision.
//
// A [Balancer] implements datapath.Services and is safe for concurrent use.
package forward
