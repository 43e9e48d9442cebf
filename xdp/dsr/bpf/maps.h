/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* maps.h: the keys, values, sizes and maps of the node side of direct server return (dsr.c).
 * Go (xdp/dsr) writes services; the ingress program writes flows; the egress program reads and
 * refreshes flows and writes frags; both count in stats (stats.h). See docs/dsr.md. */
#ifndef XLB_DSR_MAPS_H
#define XLB_DSR_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
/* FAMILY_*, PROTO_*, struct addr, struct svc_key and the carrier's format (DSR_OPT*): what
 * every xlb program shares. */
#include "datapath.h"

/* Sizes. MAX_DSR_SERVICES bounds the {frontend, local endpoint} pairs a node accepts carriers
 * for (xdp/dsr's MaxServices); DEFAULT_FLOWS is the flows LRU's size unless the loader says
 * otherwise (Options.Flows); MAX_FRAGS the fragmented replies being sent at once. */
#define MAX_DSR_SERVICES 65536
#define DEFAULT_FLOWS    1048576
#define MAX_FRAGS        16384
/* MAX_NODE_ADDRS bounds the node's own addresses the egress program knows (node_addrs). */
#define MAX_NODE_ADDRS   1024

/* half_open's size unless the loader says otherwise (Go: flows / 16, at least MinFlows). */
#define DEFAULT_HALF_OPEN 65536

/* The endpoint filter (filter.h): 2^EP_FILTER_LOG2 bits in EP_FILTER_WORDS words. */
#define EP_FILTER_LOG2  16
#define EP_FILTER_WORDS (1u << (EP_FILTER_LOG2 - 6))

/* Idle timeouts, set by the loader (Options.TCPTimeout, Options.UDPTimeout): a flows entry not
 * refreshed for this long no longer rewrites replies (its flow's next carried packet records it
 * again). The defaults are the gateway's conntrack ones (datapath.DefaultTCPEstablishedTimeout,
 * datapath.DefaultUDPTimeout), so that the node does not forget a flow the gateway still holds
 * (the gateway carries the VIP again only for a flow it holds no conntrack entry for). */
volatile const __u64 cfg_tcp_ns = 3600ull * 1000000000ull;
volatile const __u64 cfg_udp_ns = 60ull * 1000000000ull;

/* The flood budgets, set by the loader (Options.TCPPickupBudget, Options.UDPNewBudget): how
 * many flows per BUDGET_WINDOW_NS, over all CPUs, ingress may add to flows that no entry
 * vouches for. cfg_tcp_pickup: carried TCP packets other than a SYN whose flow neither flows
 * nor half_open holds (a node that lost its state, a flow a gateway picked up mid-way, or a
 * forged ACK); cfg_udp_new: carried UDP datagrams of a flow flows does not hold. Over budget,
 * the packet is still delivered (stripped), its flow not recorded (carrier.h). */
volatile const __u32 cfg_tcp_pickup = 8192;
volatile const __u32 cfg_udp_new = 65536;
/* cfg_syn: carried TCP SYNs a second that may add a candidate to half_open (Options.SYNBudget).
 * Over it the SYN is delivered (stripped) and records nothing: its SYN-ACK leaves unrewritten
 * and the client retransmits the SYN. */
volatile const __u32 cfg_syn = 65536;

/* cfg_budget_seed keys the hash that spreads frontends and client prefixes over the budgets'
 * shares (budget_shares), set by the loader to a random value: a sender cannot aim at the share
 * of a frontend or prefix it does not own. */
volatile const __u32 cfg_budget_seed = 0;

/* The budgets' window: one second. */
#define BUDGET_WINDOW_NS 1000000000ull

/* Keys of budgets. */
enum budget_kind {
	BUDGET_TCP_PICKUP = 0,
	BUDGET_UDP_NEW,
	BUDGET_SYN,
	BUDGET_MAX,
};

/* The shares of a budget: besides the window over everything (budgets), each kind has a window
 * per frontend and per client prefix (budget_shares), hashed into FRONTEND_SHARES and
 * PREFIX_SHARES buckets. One frontend may take at most 1 / FRONTEND_SHARE_DIV of a kind's
 * budget a window, one client prefix (IPv4 /24, IPv6 /48) at most 1 / PREFIX_SHARE_DIV: a flood
 * to one Service, or from one network, leaves the rest of the budget to the others. Two
 * frontends (prefixes) hashed to one bucket share it. */
#define FRONTEND_SHARES    1024
#define PREFIX_SHARES      4096
#define SHARES_PER_KIND    (FRONTEND_SHARES + PREFIX_SHARES)
#define FRONTEND_SHARE_DIV 2
#define PREFIX_SHARE_DIV   8

/* A frags entry lasts as long as the kernel waits for a datagram's fragments (ipfrag_time). */
#define FRAG_TIMEOUT_NS (30ull * 1000000000ull)

/* A flows entry's last-seen time is written at most this often (one write per second and flow,
 * not per packet: the entry's cache line stays shared between CPUs). */
#define REFRESH_NS 1000000000ull

/* Key of services: a VIP frontend as the carrier names it and the endpoint the gateway sent the
 * packet to. {VIP, 0, proto} with endpoint port 0 is an all-ports frontend: it accepts a
 * carrier whose VIP port equals the packet's destination port (the gateway keeps the port). */
struct dsr_svc_key {
	struct svc_key vip; /* VIP address, service port (network order), protocol, family */
	struct addr ep;     /* the Pod's address */
	__be16 ep_port;     /* the target port (network order) */
	__u16 pad;          /* zero */
};

/* Key of flows: a flow as the Pod's replies carry it (source = the Pod, destination = the
 * client). */
struct flow_key {
	struct addr pod;
	struct addr client;
	__be16 pod_port;    /* network order */
	__be16 client_port; /* network order */
	__u8 proto;         /* PROTO_TCP or PROTO_UDP */
	__u8 family;        /* FAMILY_V4 or FAMILY_V6 */
	__u16 pad;          /* zero */
};

/* Value of flows: what the replies' source becomes. */
struct flow_value {
	struct addr vip;
	__be16 vip_port;    /* network order */
	__u16 pad;
	__u32 pad2;
	__u64 seen_ns;      /* bpf_ktime_get_coarse_ns of the last carried packet or reply */
};

/* Value of budgets: one window of a flood budget. */
struct budget {
	__u64 start;        /* bpf_ktime_get_coarse_ns when the window began */
	__u64 count;        /* flows taken out of the budget in it */
};

/* Key of frags: one fragmented reply datagram, as its fragments carry it (source = the Pod). */
struct frag_key {
	struct addr src;
	struct addr dst;
	__u32 id;           /* IPv4: the 16-bit IP id; IPv6: the Fragment header's id (as loaded) */
	__u8 proto;
	__u8 family;
	__u16 pad;
};

/* Value of frags. */
struct frag_value {
	struct addr vip;    /* the source the later fragments get */
	__u64 seen_ns;      /* when the first fragment was rewritten */
};

/* services: {VIP frontend, local endpoint} -> 1, the pairs the ingress program accepts carriers
 * for. Written by Go (AddDSRService, from the node agent's plan); read by ingress. A hash map
 * not preallocated: its memory follows the node's services. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct dsr_svc_key);
	__type(value, __u8);
	__uint(max_entries, MAX_DSR_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} services SEC(".maps");

/* flows: a flow as its replies carry it -> its VIP and service port and when it was last seen.
 * Written by ingress (a carried packet of an allowed pair records or refreshes it), refreshed
 * by egress (every rewritten reply), read by Go (Flows). An LRU of DEFAULT_FLOWS entries (the
 * loader resizes it), preallocated: the least recently used flow drops out when it is full. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
	__uint(max_entries, DEFAULT_FLOWS);
} flows SEC(".maps");

/* half_open: the flows of carried TCP SYNs, keyed and valued as flows, until the handshake's
 * ACK (the gateway carries it) moves them into flows. A SYN flood of distinct tuples churns
 * this LRU, never flows: the established flows' entries stay. Written by ingress (a carried
 * SYN records, the ACK deletes), read and refreshed by egress when flows has no entry (the
 * SYN-ACK), read by Go (Flows). An LRU of DEFAULT_HALF_OPEN entries (the loader resizes it),
 * preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
	__uint(max_entries, DEFAULT_HALF_OPEN);
} half_open SEC(".maps");

/* budgets: enum budget_kind -> its current window (shared by all CPUs, counted with atomic
 * adds; carrier.h's budget_allow). Written by ingress; not pinned (a restart starts a fresh
 * window). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct budget);
	__uint(max_entries, BUDGET_MAX);
} budgets SEC(".maps");

/* budget_shares: kind * SHARES_PER_KIND + bucket -> the window of one frontend's (buckets 0 to
 * FRONTEND_SHARES - 1) or one client prefix's (the PREFIX_SHARES after) share of a budget.
 * Written by ingress with budgets; not pinned. An array: its lookup is inlined. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct budget);
	__uint(max_entries, BUDGET_MAX * SHARES_PER_KIND);
} budget_shares SEC(".maps");

/* node_addrs: the node's own addresses {address, family} -> 1. Written by Go (SetNodeAddresses, Attach); read by egress: an ICMP
 * error about a recorded flow is given the VIP only when its sender is the quoted Pod or one of
 * these (the node about its Pod). */
struct node_addr_key {
	struct addr addr;
	__u8 family;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct node_addr_key);
	__type(value, __u8);
	__uint(max_entries, MAX_NODE_ADDRS);
} node_addrs SEC(".maps");

/* live reports whether flow entry v is within its idle timeout at now. A time a little ahead of
 * now (another CPU refreshed it since now was read) is live. */
static __always_inline int live(const struct flow_value *v, __u8 proto, __u64 now)
{
	__u64 timeout = proto == PROTO_TCP ? cfg_tcp_ns : cfg_udp_ns;

	return now <= v->seen_ns || now - v->seen_ns <= timeout;
}

/* same_vip reports whether entry v names frontend {vip, vport}. */
static __always_inline int same_vip(const struct flow_value *v, const struct addr *vip, __be16 vport)
{
	return addr_eq(&v->vip, vip) && v->vip_port == vport;
}

/* frags: a reply datagram whose first fragment egress rewrote -> the VIP its later fragments
 * (which carry no ports) get as their source. Written and read by egress. An LRU of MAX_FRAGS
 * entries, preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, struct frag_value);
	__uint(max_entries, MAX_FRAGS);
} frags SEC(".maps");

/* ep_filter: word i -> bits 64i..64i+63 of the endpoint filter (filter.h). Written by Go: a
 * bit is set when a pair with an endpoint of that address is added, and never cleared while
 * the agent runs (the flows of a pair removed still have their replies rewritten); Load
 * rebuilds the whole filter from services and flows. Read by egress. An array: its lookup is
 * inlined, no kernel call. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EP_FILTER_WORDS);
} ep_filter SEC(".maps");

#endif
