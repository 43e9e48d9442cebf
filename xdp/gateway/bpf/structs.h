/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* structs.h: keys and values of the XDP datapath's maps (struct addr and struct svc_key are
 * datapath.h's). Each is a wire format shared with the Go loader (the xlb* types bpf2go
 * generates); field order and padding are explicit so both sides agree byte for byte. */
#ifndef XLB_STRUCTS_H
#define XLB_STRUCTS_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include "datapath.h"

/* Value of vip_by_id: a VIP id's frontend and flags (the flags as in vips). */
struct vip_ref {
	struct svc_key key;
	__u32 flags; /* VIP_F_* */
};

/* Value of vips. */
struct vip_info {
	__u32 id;         /* index into vip_by_id, vip_stats; for a marker: how many VIPs use the address */
	__u32 flags;      /* VIP_F_* */
	__u32 table_off;  /* first slot of the VIP's Maglev table in maglev_slots */
	__u32 table_size; /* M, a prime; 0 = no table yet (packets dropped: no backend) */
};

/* Value of backends: where a backend id sends packets. */
struct backend {
	struct addr addr;
	__be16 port;  /* 0: keep the client's destination port (all-ports VIPs) */
	__u8 family;  /* 0 marks an unused id */
	__u8 flags;   /* BACKEND_F_* */
};

/* Value of reverse (written by Go, SetReverse): which VIP a backend endpoint's replies must
 * appear to come from. */
struct rev_value {
	__u32 vip_id;   /* the VIP's address is vip_by_id[vip_id].addr (unambiguous entries) */
	__be16 vip_port;/* service port to restore; 0 keeps the source port (all-ports VIP) */
	__u16 flags;    /* REV_F_* */
	/* REV_F_AMBIGUOUS entries: the VIP ids of the frontends the endpoint serves, unused ones 0
	 * (all 0 when it serves more than REV_MAX_CANDIDATES). A reply without conntrack entry takes
	 * the one whose Maglev table alone maps the reply's forward tuple to this endpoint. */
	__u32 cand[REV_MAX_CANDIDATES];
};

/* Key of conntrack: a flow as seen on the wire in one direction. Forward entries are keyed
 * client -> VIP; reverse entries (ambiguous backends only) backend -> client. */
struct flow_key {
	struct addr src;
	struct addr dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* Value of conntrack. */
struct ct_entry {
	__u64 last_seen;  /* bpf_ktime_get_coarse_ns() of the last refresh */
	__u32 backend_id; /* forward entries: the chosen backend */
	__u32 vip_id;     /* the VIP the flow belongs to */
	__be16 vip_port;  /* reverse entries: service port to restore */
	__u8 flags;       /* CT_F_* */
	__u8 pad[5];
};

/* Value of hs_slots: one slot of the handshake table: the TCP handshake in flight whose tuple
 * hashes here (where its SYN went), and the live-flow filter's bits of all the tuples that hash
 * here. 64 bytes, one cache line, which a new connection's SYN and ACK both touch anyway. */
struct hs_entry {
	struct flow_key key; /* the forward tuple (client -> VIP); family 0: an empty slot. Its
			      * first padding byte is the slot's state (HS_ST_*, hs_state): a
			      * connection whose handshake completed lives on in its slot */
	__u32 syn_time;   /* hs_time of the clock at the last SYN of this tuple (lb.h); of a
			   * connection held here (HS_ST_CONN), at its last refresh */
	__u32 backend_id; /* the backend the SYN was sent to */
	__u32 vip_id;     /* the VIP the SYN was for (the entry is used only for this VIP) */
	__u32 isn;        /* the SYN's sequence number: a SYN with another one on this tuple is a
			   * new connection (a client port reused), not a retransmission */
	__u32 check;      /* hs_check of the tuple's hash and the three fields above: an entry
			   * two CPUs wrote at once (torn) is not taken for either */
	__u32 live;       /* (with check: one aligned 64-bit word, for live_mark's atomic or)
			   * the live-flow filter (live.h): LIVE_SLOT_BITS bits per half, half h
			   * in bits [h * LIVE_SLOT_BITS, (h + 1) * LIVE_SLOT_BITS). Never written by a
			   * SYN taking the slot over, nor emptied with the handshake: it describes
			   * conntrack, not the handshake */
};

_Static_assert(sizeof(struct hs_entry) == 64, "hs_entry fills one cache line");
_Static_assert(__builtin_offsetof(struct hs_entry, check) % 8 == 0 &&
	       __builtin_offsetof(struct hs_entry, live) == __builtin_offsetof(struct hs_entry, check) + 4,
	       "check and live make one aligned 64-bit word (live_mark)");

/* Key of frags: one IP datagram. */
struct frag_key {
	struct addr src;
	struct addr dst;
	__u32 id;      /* IPv4 id (16 bits, zero-extended) or IPv6 fragment id */
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* Value of frags: the datagram's ports, learned from its first fragment once the datapath
 * forwarded (DNAT) or reverse-NATed it (frag.h). */
struct frag_ports {
	__u64 seen;    /* ns (the datapath's clock) when the first fragment was forwarded: the entry
			* is ignored and deleted after FRAG_TIMEOUT_NS */
	__be16 sport;  /* the datagram's L4 ports, as its first fragment carried them */
	__be16 dport;
	__u32 pad;
};

/* Value of frag_scratch: a frags entry being written (frag_remember), off the stack. */
struct frag_scratch {
	struct frag_key key;     /* the datagram */
	struct frag_ports ports; /* its ports and first-fragment time */
};

/* Value of ct_scratch: a conntrack entry being written (hs_promote), off the stack. */
struct ct_scratch {
	struct flow_key key;
	struct ct_entry val;
};

/* Value of frag_budget: the first-fragment budget's window, shared by all CPUs. */
struct frag_budget {
	__u64 start; /* ns: start of the current RATE_WINDOW_NS window */
	__u64 count; /* first fragments remembered in it (atomic add; FRAG_BUDGET at most, give or
		      * take a few racing CPUs) */
};

/* Key of src_ranges (LPM trie). prefixlen counts the 32 bits of vip_id plus the prefix bits. */
/* Key of site_sources: a prefix of one family. */
struct site_key {
	__u32 prefixlen;   /* 32 (the family word) + the prefix's length */
	__u32 family;      /* FAMILY_V4 or FAMILY_V6, big-endian, matched first */
	struct addr addr;
};

/* Value of side_scratch: the lookup keys side_verdict builds, off the stack (its callers are
 * near the 512-byte stack limit). */
struct side_scratch {
	struct site_key site; /* the source, as a site_sources key */
	struct svc_key vip;   /* the source, as a vips marker key */
};

struct src_range_key {
	__u32 prefixlen;
	__u32 vip_id; /* big-endian, so the trie's byte-wise match covers it first */
	struct addr addr;
};

/* Per-CPU traffic counters of a VIP or a backend. */
struct traffic {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
};

/* Value of cpu_state: per-CPU bookkeeping. */
struct cpu_state {
	__u64 budget_start[BUDGET_MAX]; /* the global window its budget tokens were taken in */
	__u32 budget_tokens[BUDGET_MAX]; /* units of each budget taken but not used yet */
	__u32 pad;
	__u64 last_clock;  /* the loader's clock as this CPU last read it */
	__u32 same;        /* packets since that value last changed */
	__u32 clock_stale; /* the loader's clock lags: use bpf_ktime_get_coarse_ns() */
};

/* Value of budgets: one flood budget's window, shared by all CPUs (budget.h). A cache line
 * each, so that taking one budget does not stall the CPUs taking another. */
struct budget {
	__u64 start; /* ns: start of the current RATE_WINDOW_NS window */
	__u64 taken; /* units handed out to CPUs in it (atomic add) */
	__u64 pad[6];
};

/* Value of clock (struct clock_value). */
struct clock_value {
	__u64 ns;  /* CLOCK_MONOTONIC, written by the loader; 0 = not running yet */
	__u32 gen; /* cache generation: bumped when vips, reverse, conntrack or backends change */
	__u32 live_half; /* the half of the live-flow filter that SYNs read (0 or 1; live.h) */
};

/* Value of svc_cache: a copy of one vips or reverse lookup. */
struct svc_cache_entry {
	struct svc_key key;
	__u32 gen;      /* generation when filled; 0 = empty */
	__u8 map;       /* SVC_CACHE_VIPS or SVC_CACHE_REVERSE */
	__u8 found;     /* 0: the lookup found nothing (a negative entry) */
	__u8 pad[2];
	union {
		struct vip_info vip;
		struct rev_value rev;
	};
};

/* Value of flow_cache: a copy of one forward conntrack entry and, once a packet of the flow has
 * been sent by XDP, the record of what was done to it: the rewrite, its checksum differences and
 * the next hop. While the record is fresh the flow's next packets replay it (flow_replay) without
 * asking vips, backends, conntrack or the next-hop cache. */
struct flow_cache_entry {
	struct flow_key key;
	__u64 refreshed;   /* when the shared entry was last read and refreshed */
	__u32 backend_id;
	__u32 vip_id;
	__u32 gen;         /* generation when filled; 0 = empty */
	__u8 flags;        /* CT_F_* */
	__u8 vip_flags;    /* the VIP's VIP_F_* when the record was made */
	__u8 in_role;      /* ROLE_* of the interface the flow arrived on: replayed only there */
	__u8 pad;
	/* The record; replayed only while the clock is below fast_until (0 = no record). */
	__u64 fast_until;  /* min(refreshed + CT_REFRESH_NS, the next hop's expiry) */
	struct addr to_addr; /* the destination address written (the backend's) */
	__be16 to_port;    /* the destination port written */
	__u16 mtu;         /* the next hop's MTU: longer packets take the full path */
	__u32 ip_diff;     /* IPv4 header checksum difference: address and TTL decrement */
	__u32 l4_diff;     /* TCP/UDP checksum difference: address and port */
	__u32 ifindex;     /* egress interface */
	__u8 smac[6];
	__u8 dmac[6];
	__u8 pad2[8];      /* to 128 bytes: two whole cache lines (see map flow_cache) */
};

/* Value of nh_cache: where packets to one address go. */
struct nexthop {
	struct addr addr;
	__u64 expires;     /* clock value after which the entry is refreshed */
	__u32 ifindex;     /* egress interface */
	__u32 gen;         /* cache generation when filled (attach/detach bump it) */
	__u16 mtu;         /* egress MTU: longer packets take the slow path (the kernel's ICMP) */
	__u8 family;
	__u8 pad;
	__u8 smac[6];
	__u8 dmac[6];
};

/* Scratch for ipv6_walk's results (see parse.h). */
struct ipv6_ext {
	__u32 off;      /* offset of the upper-layer header from the start of the packet */
	__u32 frag_id;
	__u8 proto;     /* upper-layer protocol */
	__u8 is_frag;   /* a Fragment header is present */
	__u8 nonfirst;  /* fragment offset != 0: no upper-layer header here */
	__u8 result;    /* enum parse_result */
};

/* Value of dsr_scratch: the frontend of a packet forward() DNATed, for xlb_dsr's carrier, or of
 * a packet too big for its path (pmtu.h), with the MTU to advertise. */
struct dsr_meta {
	struct addr vip;
	__be16 vport;
	__u8 family;
	__u8 pad;
	__u16 mtu;    /* pmtu.h: the next hop's MTU */
	__u8 pad2[2];
};

/* Value of stage_scratch: what a stage of the datapath hands the next one with a tail call
 * (stage.h). The packet itself is unchanged until the egress stage rewrites it; its pointers are
 * taken again after each tail call, and only what a stage cannot read back from the packet
 * crosses here. */
struct stage_state {
	struct flow_key fk; /* the packet's flow; a non-first fragment's ports came from frags */
	__u64 now;          /* now_gen's clock, read once by the full path */
	__u32 gen;          /* the cache generation read with it */
	__u32 role;         /* ROLE_* of the ingress interface */
	__u32 th;           /* tuple_hash(fk): the handshake slots' index (new-flow stage) */
	__u32 vip_id;       /* egress: the flow's frontend */
	__u32 bid;          /* egress: its backend */
	__u32 vip_flags;    /* egress: VIP_F_* recorded with the flow (0: no record) */
	__u8 has_fc;        /* fk has a flow_cache slot (not a non-first fragment) */
	__u8 new_flow;      /* egress: the packet opens its flow here (counters, DSR carrier) */
	__u8 record;        /* egress: record the hop in fk's flow_cache slot (fc_fill named it) */
	__u8 carry;         /* egress: may carry its frontend to a DSR backend (no conntrack entry) */
};

/* ICMP and ICMPv6 share this header layout. */
struct icmp_hdr {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__u32 rest;
};


#endif
