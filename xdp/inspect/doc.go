// SPDX-License-Identifier: Apache-2.0

// Package inspect reads what a pinned datapath is doing, read-only, and says it as documents
// that `xlb show` prints as text tables or JSON: the XDP datapath's services with their Maglev
// shares and counters ([ReadServices]), its conntrack entries ([ReadFlows]), its verdict
// counters ([ReadReasons]), where one flow's packets go and why ([ExplainFlow]), and a node
// agent's socket load balancer ([ReadAgent]).
//
// It needs no daemon: it opens the pins (xdp.OpenPinned, socklb.ReadPinned) and writes nothing,
// so it answers also while none runs and the pinned programs forward on their own, which is when
// an operator most needs it. The maps are read one after the other: beside a daemon that is
// writing them, the view is not atomic.
//
// ExplainFlow holds no forwarding rule of its own: it loads the part of the pinned state a flow
// can touch into a forward.Balancer and reports the Decisions of forward.Balancer.Forward, the
// function the AF_XDP engine runs on every frame and the parity tests hold to the BPF program.
package inspect
