/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* maps.h: every map of the datapath, what it holds, its size and who writes it.
 * All maps are pinned by name under the loader's bpffs directory so a restarted daemon
 * adopts them and forwarding never stops. "Go" below means the loader (xdp package). */
#ifndef XLB_MAPS_H
#define XLB_MAPS_H

#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"

#define PIN __uint(pinning, LIBBPF_PIN_BY_NAME)

/* vips: {VIP address, port (0 = all ports), proto} -> vip_info. Also one marker entry
 * {address, 0, 0} per VIP address (ICMP echo, fragments). Written by Go, read per packet. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key);
	__type(value, struct vip_info);
	__uint(max_entries, 2 * MAX_VIPS); /* VIP entries, plus up to one marker each */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	PIN;
} vips SEC(".maps");

/* vip_by_id: VIP id -> its {address, port, proto} and flags. Reverse NAT reads the address from
 * here, established flows check that their VIP still exists. Written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct vip_ref);
	__uint(max_entries, MAX_VIPS);
	PIN;
} vip_by_id SEC(".maps");

/* maglev_slots: every VIP's Maglev table, one region each (see consts.h): slot -> backend id,
 * 0 = empty. Sized by Go at load. Written by Go: a new region is filled, then the VIP's
 * vip_info is switched to it in one update, then the old region is freed. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, DEFAULT_MAGLEV_SLOTS);
	PIN;
} maglev_slots SEC(".maps");

/* backends: backend id -> {Pod address, target port, flags}. family 0 = unused id.
 * Written by Go; an id is never reused while conntrack may still point at it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend);
	__uint(max_entries, MAX_BACKENDS);
	PIN;
} backends SEC(".maps");

/* reverse: backend endpoint {Pod address, target port (0 = any), proto} -> the VIP its
 * replies come from, or REV_F_AMBIGUOUS when the endpoint serves several VIP:ports, with up to
 * REV_MAX_CANDIDATES of their VIP ids for reverse_maglev. Written by Go (SetReverse, derived from
 * service state, so it works without conntrack). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key);
	__type(value, struct rev_value);
	__uint(max_entries, MAX_REVERSE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	PIN;
} reverse SEC(".maps");

/* conntrack: flow -> chosen backend. One LRU shared by all CPUs (a reply can land on any CPU).
 * Size set by Go at load (default DEFAULT_CT_SIZE). Written by the datapath (inserts, refreshes)
 * and by Go (flush). TCP flows are inserted on the first non-SYN packet, never on a SYN (a SYN
 * writes hs_slots instead). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct ct_entry);
	__uint(max_entries, DEFAULT_CT_SIZE);
	PIN;
} conntrack SEC(".maps");

/* ct_reverse: reverse entries (backend endpoint -> client, CT_F_REVERSE) of the flows to an
 * ambiguous backend (one endpoint serving several VIP:ports, REV_F_AMBIGUOUS): the frontend its
 * replies must come from. An LRU of its own, so that this bookkeeping, which a SYN writes, can
 * never evict a forward flow from conntrack. Sized by Go at load (a quarter of conntrack's size
 * by default). Written by the datapath (and refreshed by the replies that use it), flushed by Go
 * with their forward entries. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct ct_entry);
	__uint(max_entries, DEFAULT_CT_SIZE / 4);
	PIN;
} ct_reverse SEC(".maps");

/* hs_slots: the handshake table: TCP handshakes in flight (SYN seen, no conntrack entry yet),
 * direct-mapped by a hash of the forward tuple (hs.h): slot tuple_hash & cfg_hs_mask holds the
 * tuple, the backend its SYN went to, its VIP and its sequence number. Written by the datapath: a
 * TCP SYN to a VIP writes (or refreshes) its tuple's slot; the first non-SYN packet of the flow,
 * which finds no conntrack entry, takes the entry's backend instead of asking Maglev again (the
 * table may have changed since the SYN), creates the conntrack entry and empties the slot. A
 * retransmitted SYN takes the entry's backend too. Entries older than HS_TIMEOUT_NS, of another
 * VIP or naming a down or deleted backend are ignored. A plain array, shared by all CPUs: a SYN
 * writes one cache line and its ACK reads and clears it, where an LRU hash took a lookup, an
 * insert (its lists and locks) and a delete. Another SYN whose tuple falls on the same slot takes
 * it over: a SYN flood churns this table (within the handshake budget), never conntrack, and a
 * handshake whose slot was taken falls back to Maglev. Sized by Go at load (HandshakeSize,
 * rounded up to a power of two). BPF_F_MMAPABLE puts the values on a page boundary, so each
 * entry is one whole cache line. Each slot also carries the live-flow filter's bits of the
 * tuples that hash to it (hs_entry.live, live.h), which a SYN taking the slot over and the ACK
 * emptying it leave alone. Go only empties slots (FlushFlows: the key's family, through its
 * mapping) and rebuilds the filter's idle half (xdp/gateway/live.go: 64-bit atomic and/or on the
 * check+live words, as live_mark). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct hs_entry);
	__uint(max_entries, DEFAULT_HS_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE);
	PIN;
} hs_slots SEC(".maps");

/* frags: datagram {src, dst, id, proto} -> its ports and first-fragment time, written by the
 * datapath (frag.h) when it forwards a first fragment to a backend, or reverse-NATs a backend's,
 * so that the later fragments find the same flow (and so the same backend); read by later
 * fragments for FRAG_TIMEOUT_NS. Written at most FRAG_BUDGET times per second. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, struct frag_ports);
	__uint(max_entries, MAX_FRAGS);
	PIN;
} frags SEC(".maps");

/* src_ranges: {VIP id, client prefix} -> 1 for VIPs with VIP_F_SRC_RANGES. Written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct src_range_key);
	__type(value, __u8);
	__uint(max_entries, MAX_SRC_RANGES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	PIN;
} src_ranges SEC(".maps");

/* if_roles: ingress ifindex -> ROLE_*: which side of the gateway an interface faces. Written by
 * Go when it attaches (ROLE_NONE, 0, for every interface it did not). Read per packet to a VIP
 * or from a backend (side.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, MAX_IFINDEX);
	PIN;
} if_roles SEC(".maps");

/* site_sources: {family, prefix} -> SITE_* bits: the site's own addresses (Pods, nodes, cluster
 * prefixes, every backend; the gateway's own addresses), which a client-facing interface never
 * receives as a source. Written by Go (the reconciler, from the plan), read on the full path of
 * packets to a VIP and of backends' replies on one-armed interfaces (side.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct site_key);
	__type(value, __u8);
	__uint(max_entries, MAX_SITE_SOURCES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	PIN;
} site_sources SEC(".maps");

/* tx_ports: ifindex -> ifindex, the interfaces XDP_REDIRECT may use. Written by Go on attach. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAX_TX_PORTS);
	PIN;
} tx_ports SEC(".maps");

/* addr_bitmap: the address filter: the VIP address bitmap (words 0..ADDR_FILTER_WORDS-1) and
 * the backend address bitmap (the next ADDR_FILTER_WORDS words), 64 bits a word, bit filter_bit
 * (hash.h; see consts.h). Rebuilt by Go from vips and reverse at every load, then written one
 * word at a time whenever the set of VIP or backend addresses changes. Builds whose filter hash
 * was murmur called it addr_filter: a new name, so that a program still attached during an
 * upgrade keeps the bitmap its hash needs (Load removes the old pin). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2 * ADDR_FILTER_WORDS);
	PIN;
} addr_bitmap SEC(".maps");

/* vip_stats, backend_stats: per-CPU traffic per VIP id / backend id. Written by the datapath,
 * summed by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct traffic);
	__uint(max_entries, MAX_VIPS);
	PIN;
} vip_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct traffic);
	__uint(max_entries, MAX_BACKENDS);
	PIN;
} backend_stats SEC(".maps");

/* reasons: per-CPU packet count per enum reason. Written by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum reason);
	__type(value, __u64);
	__uint(max_entries, REASON_MAX);
	PIN;
} reasons SEC(".maps");

/* frag_budget: the first-fragment budget's window (one entry, shared by all CPUs; frag.h).
 * Written by the datapath; not pinned (a restart starts a fresh window). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct frag_budget);
	__uint(max_entries, 1);
} frag_budget SEC(".maps");

/* frag_scratch: per-CPU, the frags key and value frag_remember builds (the paths that call it
 * have no stack to spare). Written and read by the datapath within one packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct frag_scratch);
	__uint(max_entries, 1);
} frag_scratch SEC(".maps");

/* ct_scratch: per-CPU, the conntrack key and value hs_promote builds (the SYN path that calls it
 * has no stack to spare). Written and read by the datapath within one packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ct_scratch);
	__uint(max_entries, 1);
} ct_scratch SEC(".maps");

/* side_scratch: per-CPU, the lookup keys side_verdict builds (side.h): the paths that call it
 * have no stack to spare. Written and read by the datapath within one packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct side_scratch);
	__uint(max_entries, 1);
} side_scratch SEC(".maps");

/* budgets: the flood budgets' windows, one per enum budget_kind, shared by all CPUs (budget.h).
 * Written by the datapath; not pinned (a restart starts fresh windows). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct budget);
	__uint(max_entries, BUDGET_MAX);
} budgets SEC(".maps");

/* cpu_state: per-CPU budget tokens and clock check. Written by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct cpu_state);
	__uint(max_entries, 1);
} cpu_state SEC(".maps");

/* clock: the loader's CLOCK_MONOTONIC and the cache generation (see consts.h). Written by Go.
 * Pinned, so that during a restart the old program, still attached until the new one replaces
 * it, sees the new loader's generation bumps and drops its caches too. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct clock_value);
	__uint(max_entries, 1);
	PIN;
} clock SEC(".maps");

/* svc_cache: per-CPU lookup cache of vips and reverse (see consts.h). Written by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct svc_cache_entry);
	__uint(max_entries, SVC_CACHE_SLOTS);
} svc_cache SEC(".maps");

/* flow_cache: each CPU's cache of recent conntrack entries and their records (see consts.h),
 * CPU c owning entries [c * FLOW_CACHE_SLOTS, (c + 1) * FLOW_CACHE_SLOTS). A plain array indexed
 * by CPU rather than a PERCPU_ARRAY: a per-CPU lookup first loads the element's pointer from a
 * table, a second dependent cache miss per packet on a flow-heavy path. BPF_F_MMAPABLE puts the
 * values on a page boundary, so every 128-byte entry sits on two whole cache lines. Sized by Go
 * at load to the possible CPUs. Written by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct flow_cache_entry);
	__uint(max_entries, FLOW_CACHE_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
} flow_cache SEC(".maps");

/* nh_cache: per-CPU next-hop cache (see consts.h). Written by the datapath. Not pinned: a new
 * program starts with an empty cache. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct nexthop);
	__uint(max_entries, NH_CACHE_SLOTS);
} nh_cache SEC(".maps");

/* v6_scratch: per-CPU scratch where the IPv6 extension-header walk leaves its results. Reading
 * them back gives the verifier one state instead of one per path through the walk. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ipv6_ext);
	__uint(max_entries, 1);
} v6_scratch SEC(".maps");

/* dsr_scratch: per-CPU, what forward() hands xlb_dsr with its tail call: the frontend the
 * packet was sent to, before it was DNATed to its backend; also what forward() and lb_reverse
 * hand xlb_too_big_client / xlb_too_big_backend (pmtu.h): the frontend and the MTU to advertise.
 * Written and read by the datapath. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct dsr_meta);
	__uint(max_entries, 1);
} dsr_scratch SEC(".maps");

/* stage_scratch: per-CPU, what a stage hands the next one across a tail call (struct
 * stage_state, stage.h). Written and read by the datapath, within one packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stage_state);
	__uint(max_entries, 1);
} stage_scratch SEC(".maps");

/* The programs reached by tail call (xlb.c), for progs' initial contents. */
int xlb_full4(struct xdp_md *ctx);
int xlb_full6(struct xdp_md *ctx);
int xlb_dsr(struct xdp_md *ctx);
int xlb_too_big_client(struct xdp_md *ctx);
int xlb_too_big_backend(struct xdp_md *ctx);
int xlb_icmp4(struct xdp_md *ctx);
int xlb_icmp6(struct xdp_md *ctx);
int xlb_new4(struct xdp_md *ctx);
int xlb_new6(struct xdp_md *ctx);
int xlb_reply4(struct xdp_md *ctx);
int xlb_reply6(struct xdp_md *ctx);
int xlb_egress4(struct xdp_md *ctx);
int xlb_egress6(struct xdp_md *ctx);

/* progs: tail-call table, PROG_* (consts.h) -> the program of that stage. Its contents are
 * part of the object (the loader fills it as it loads the programs): the layout lives here
 * alone. Each program generation has its own, which Go pins under progs/<id of its xlb_xdp>
 * while a pinned link runs it (the kernel empties a program array with no user reference left). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__uint(max_entries, PROGS_MAX);
	__array(values, int(void *));
} progs SEC(".maps") = {
	.values = {
		[PROG_FULL4] = (void *)&xlb_full4,
		[PROG_FULL6] = (void *)&xlb_full6,
		[PROG_DSR] = (void *)&xlb_dsr,
		[PROG_TOO_BIG_CLIENT] = (void *)&xlb_too_big_client,
		[PROG_TOO_BIG_BACKEND] = (void *)&xlb_too_big_backend,
		[PROG_ICMP4] = (void *)&xlb_icmp4,
		[PROG_ICMP6] = (void *)&xlb_icmp6,
		[PROG_NEW4] = (void *)&xlb_new4,
		[PROG_NEW6] = (void *)&xlb_new6,
		[PROG_REPLY4] = (void *)&xlb_reply4,
		[PROG_REPLY6] = (void *)&xlb_reply6,
		[PROG_EGRESS4] = (void *)&xlb_egress4,
		[PROG_EGRESS6] = (void *)&xlb_egress6,
	},
};

#endif
