/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* consts.h: every size, flag and reason code of the XDP datapath shared with its Go loader.
 * The Go side mirrors these in xdp/gateway/consts.go; a test checks they agree. What every xlb program
 * shares (families, protocols, the id limits, ICMP numbers) is in datapath.h. */
#ifndef XLB_CONSTS_H
#define XLB_CONSTS_H

#include "datapath.h"

#define MAX_REVERSE     MAX_BACKENDS
#define MAX_SRC_RANGES  65536   /* loadBalancerSourceRanges prefixes over all VIPs */
#define MAX_TX_PORTS    256     /* interfaces we may redirect to */
#define MAX_FRAGS       65536   /* datagrams whose first fragment was seen, at once (frags, frag.h) */
#define DEFAULT_CT_SIZE 1048576 /* flows; the loader overrides at load time */
/* Slots of the handshake table (hs_slots: SYN seen, no conntrack entry yet), a power of two; the
 * loader overrides it at load time (Options.HandshakeSize, rounded up). An ACK that creates the
 * conntrack entry empties its slot, so the table normally holds only the handshakes of the last
 * RTT: at 10,000 new connections/s and a 10 ms RTT, ~100 of 65,536 slots, and a handshake loses
 * its slot to another tuple's SYN with a probability of ~0.2%. */
#define DEFAULT_HS_SIZE 65536

/* The live-flow filter (live.h): two halves of LIVE_SLOT_BITS bits in every slot of hs_slots
 * (hs_entry.live), a tuple's bit being tuple_hash's top LIVE_SLOT_LOG2 bits in its own slot. A
 * clear bit in the half map clock names proves that conntrack holds no entry for the tuple that
 * could be live, so a SYN (ct_syn_kept) skips the conntrack lookup, a miss in a hash of a million
 * buckets. At the default 65,536 slots a half has 1M bits: ~10% of them set by 100,000 live
 * TCP flows, ~63% by a million (a SYN then asks conntrack more often: slower, never wrong); the
 * loader rebuilds the idle half from conntrack and switches to it when the active half fills
 * with bits of flows that are gone (xdp/gateway/live.go). */
#define LIVE_SLOT_LOG2 4
#define LIVE_SLOT_BITS (1u << LIVE_SLOT_LOG2)

/* Maglev tables live in one flat array, maglev_slots, sized at load (DEFAULT_MAGLEV_SLOTS):
 * each VIP owns a region [table_off, table_off + table_size). A region is filled before the VIP's
 * descriptor points at it, so a table is replaced atomically. One flat array keeps the lookup
 * inlined by the verifier (a map-in-map inner lookup is an indirect helper call). */
#define DEFAULT_MAGLEV_SLOTS (1u << 24)

/* The next-hop cache: per-CPU, direct-mapped by the top NH_CACHE_LOG2 bits of the destination's
 * filter_bit (hash.h). An entry is trusted for cfg_nh_cache_ns; bpf_fib_lookup is the slow path
 * that fills it. */
#define NH_CACHE_LOG2  10
#define NH_CACHE_SLOTS (1u << NH_CACHE_LOG2)

/* Per-CPU caches in front of the hash maps, so the common packet makes no map-lookup call:
 * svc_cache holds recent vips/reverse lookups (found or not), flow_cache recent conntrack entries.
 * Both are direct-mapped by hash and trust an entry only while its generation equals the one in
 * map clock, which the loader bumps whenever it changes vips, reverse, conntrack or a backend in
 * use. A flow_cache entry is also trusted for at most CT_REFRESH_NS: then the packet reads (and
 * refreshes) the shared conntrack entry again. Its record of the flow's rewrite and next hop
 * (flow_replay, the fast path) lasts no longer, nor past the next hop's own expiry. */
#define SVC_CACHE_SLOTS  4096
#define FLOW_CACHE_BITS  13 /* 8192 entries of 128 bytes: 1 MiB per CPU */
#define FLOW_CACHE_SLOTS (1u << FLOW_CACHE_BITS)
#define SVC_CACHE_VIPS    1
#define SVC_CACHE_REVERSE 2

/* Indexes in the progs tail-call table, one program per stage and, where the stage is large,
 * per address family (stage.h, xlb.c). The entry program xlb_xdp is attached; every other one is
 * reached by tail call. */
#define PROG_FULL4           0  /* xlb_full4: the full path of IPv4 (and of non-IP) packets */
#define PROG_FULL6           1  /* xlb_full6: the full path of IPv6 packets */
#define PROG_DSR             2  /* xlb_dsr: the carrier of direct server return (dsr.h) */
#define PROG_TOO_BIG_CLIENT  3  /* xlb_too_big_client: "too big" to a client, from the VIP (pmtu.h) */
#define PROG_TOO_BIG_BACKEND 4  /* xlb_too_big_backend: "too big" to a backend (pmtu.h) */
#define PROG_ICMP4           5  /* xlb_icmp4: ICMP (icmp.h) */
#define PROG_ICMP6           6  /* xlb_icmp6: ICMPv6 (icmp.h) */
#define PROG_NEW4            7  /* xlb_new4: a new IPv4 flow (stage_new.h) */
#define PROG_NEW6            8  /* xlb_new6: a new IPv6 flow */
#define PROG_REPLY4          9  /* xlb_reply4: an IPv4 backend's reply (stage_reply.h) */
#define PROG_REPLY6          10 /* xlb_reply6: an IPv6 backend's reply */
#define PROG_EGRESS4         11 /* xlb_egress4: DNAT and send an IPv4 packet (stage_egress.h) */
#define PROG_EGRESS6         12 /* xlb_egress6: DNAT and send an IPv6 packet */
#define PROGS_MAX            13

/* The address filter: two bitmaps of ADDR_FILTER_BITS bits, indexed by a hash of an address.
 * A clear bit proves an address is no VIP (or no backend), so non-VIP traffic pays one array
 * access instead of hash-map lookups. A set bit may be a collision; the exact map decides. */
#define ADDR_FILTER_LOG2  16
#define ADDR_FILTER_BITS  (1u << ADDR_FILTER_LOG2)
#define ADDR_FILTER_WORDS (ADDR_FILTER_BITS / 64)

/* vip_info.flags */
#define VIP_F_AFFINITY_CLIENTIP (1u << 0) /* hash the client address only (sessionAffinity: ClientIP) */
#define VIP_F_SRC_RANGES        (1u << 1) /* check src_ranges; clients outside are dropped */
#define VIP_F_MARKER            (1u << 2) /* address marker {addr, 0, 0}: "this address is a VIP" */
/* An address marker with VIP_F_SRC_RANGES answers echo requests only from clients some frontend
 * on the address admits: its table_off holds the src_ranges id of the union of their ranges,
 * ECHO_RANGES_ID_BIT | the lowest VIP id on the address (written by Go, syncMarker). Without
 * the flag (some frontend on the address has no source ranges), everyone may ping it. */
#define ECHO_RANGES_ID_BIT (1u << 31)

/* backend.flags */
#define BACKEND_F_DOWN       (1u << 0) /* unusable: even established flows are moved off it */
#define BACKEND_F_REVERSE_CT (1u << 1) /* its endpoint's reverse NAT is ambiguous: new flows also
					* write a reverse conntrack entry (set by Go) */
#define BACKEND_F_DSR        (1u << 2) /* direct server return: a flow's packets without conntrack
					* entry carry the frontend to the backend's node (xlb_dsr) */

/* rev_value.flags */
#define REV_F_AMBIGUOUS (1u << 0) /* endpoint serves several VIP:ports: find the VIP in conntrack,
				   * else (no entry: another gateway saw the flow) re-derive it with
				   * Maglev among rev_value.cand */

/* ct_entry.flags */
#define CT_F_CLOSING (1u << 0) /* FIN or RST seen: the short closing timeout applies */
#define CT_F_REVERSE (1u << 1) /* reverse entry (backend -> client, in ct_reverse); backend_id
				* unused */

/* Only refresh a conntrack entry's timestamp when it is older than this: saves a cache-line
 * write on almost every packet of a busy flow. */
#define CT_REFRESH_NS 1000000000ull

/* A handshake-table entry is honoured for this long after the last SYN of its tuple: the backend may
 * retransmit its SYN-ACK for ~60 s (Linux: after 1, 3, 7, 15, 31 s) before the client's ACK gets
 * through. Older entries are ignored (and overwritten by the next SYN). */
#define HS_TIMEOUT_NS (60ull * 1000000000ull)

/* A handshake slot keeps its SYN's time in 32 bits, in units of 2^HS_TIME_SHIFT ns (~1.05 ms;
 * hs_time), which frees the slot's last 4 bytes for the live-flow filter. The units wrap every
 * ~52 days: a slot whose tuple saw no SYN for that long could look fresh again for a minute, to
 * that tuple only, and only name the backend its SYN went to. HS_SKEW_UNITS (~1 s) is how far in
 * the future a slot's time may be (CPUs reading the clock at slightly different moments). */
#define HS_TIME_SHIFT    20
#define HS_TIMEOUT_UNITS ((__u32)(HS_TIMEOUT_NS >> HS_TIME_SHIFT))
#define HS_SKEW_UNITS    ((__u32)(1000000000ull >> HS_TIME_SHIFT))

/* HS_SEQ_WINDOW bounds how far past the SYN's sequence number a non-SYN packet of the handshake
 * may be (its ACK is at isn + 1, data a little further): a quarter of the sequence space, far
 * beyond any window, so that a packet of another connection on the same tuple (a reused client
 * port, with its own random ISN) is rarely taken for this one. */
#define HS_SEQ_WINDOW (1u << 30)

/* The state of a handshake slot (its key's first padding byte: hs_state). 0: a handshake in
 * flight (a SYN seen) or a datagram flow's first datagram. HS_ST_CONN: the handshake's ACK came
 * and the connection lives on in the slot instead of in conntrack, with conntrack's timeouts,
 * until a SYN for another tuple needs the slot and promotes it into conntrack (hs_promote).
 * HS_ST_CLOSING: of such a connection, a FIN or RST seen (the closing timeout applies). */
#define HS_ST_CONN    (1u << 0)
#define HS_ST_CLOSING (1u << 1)

/* A closing connection held in a slot is moved into conntrack when another tuple needs the slot
 * only while its last packet is less than this old: what a closing connection still sends (the
 * last ACK of the FIN exchange, a retransmitted FIN) comes within a few round trips. One quiet
 * for longer is simply overwritten, so that short connections, which close long before their
 * slot is needed at any connection rate a slot table serves, never enter conntrack; a straggler
 * after that is balanced by Maglev (the same backend unless the table changed meanwhile). */
#define HS_CLOSING_PROMOTE_NS (2ull * 1000000000ull)

/* A datagram flow's first datagram holds its handshake slot against other datagrams for this
 * long (a SYN may still take it): a flow that sends its second datagram within it always finds
 * its first, even when another flow shares its slot (the other finds the slot held and goes into
 * conntrack at once, rather than the two taking each other's entry in turn, so that neither ever
 * reaches its second datagram). A slot absorbs one first datagram per this time without
 * conntrack: at 65,536 slots, 3.3 million one-datagram flows a second, beyond what a gateway's
 * CPUs forward; only a flood faster than that goes into conntrack, within the new-flow budget. */
#define HS_DATAGRAM_HOLD_NS (20ull * 1000000ull)

/* hs_match says how hs_backend checks a packet against a handshake's SYN. */
enum hs_match {
	HS_MATCH_ANY,  /* an ICMP error about the flow: no sequence number to check */
	HS_MATCH_SYN,  /* a SYN: only a retransmission (the same sequence number) matches; another
			* SYN on the tuple is a new connection, balanced afresh */
	HS_MATCH_DATA, /* the handshake's ACK (or later data): within HS_SEQ_WINDOW past the SYN's */
};

/* The flood budgets (budget.h) and the fragment budget work in windows of this length, each
 * window shared by all CPUs. */
#define RATE_WINDOW_NS 1000000000ull

/* The flood budgets (budget.h): how many state-table inserts each kind of packet may make per
 * RATE_WINDOW_NS, over all CPUs. Beyond a budget a packet is still forwarded (Maglev is
 * stateless and every gateway agrees), just not remembered. */
enum budget_kind {
	BUDGET_NEW_FLOW,  /* conntrack: a UDP flow's first datagram, and the TCP packet that
			   * completes a handshake this gateway saw (cfg_new_flow_rate) */
	BUDGET_MID_FLOW,  /* conntrack: a TCP packet of a flow whose handshake this gateway did not
			   * see (an ECMP move, a restart; or a forged ACK): cfg_mid_flow_rate, a
			   * fraction of the new-flow budget, so random-tuple ACKs cannot churn
			   * conntrack at the new-flow rate */
	BUDGET_HANDSHAKE, /* hs_slots, and the reverse entry an ambiguous backend's SYN-ACK
			   * needs: a SYN's inserts (cfg_new_flow_rate) */
	BUDGET_MAX,
};

/* A CPU takes units of a global budget in batches of at most BUDGET_BATCH (and at most
 * 1/BUDGET_BATCH_SHARE of the budget), so that CPUs do not all write one cache line per new
 * flow; a window's budget holds give or take one batch per CPU. */
#define BUDGET_BATCH       32
#define BUDGET_BATCH_SHARE 256

/* Fragments (frag.h). A first fragment's ports are remembered FRAG_TIMEOUT_NS: Linux keeps a
 * datagram in reassembly 30 s (ipfrag_time), but a gateway only needs the ports for the burst of
 * one datagram's fragments, which arrive within milliseconds; an IPv4 ID (16 bits) is reused
 * within seconds by a busy sender, and an entry older than that would send a later datagram with
 * the same ID to the first one's backend. At most FRAG_BUDGET first fragments are remembered per
 * RATE_WINDOW_NS over all CPUs: a FRAG_TIMEOUT_NS span touches at most 3 windows, so a flood at
 * the budget writes at most 3 * FRAG_BUDGET < MAX_FRAGS entries while an entry lives and cannot
 * push out a datagram still in flight (the LRU's per-CPU lists aside). */
#define FRAG_TIMEOUT_NS (2ull * 1000000000ull)
#define FRAG_BUDGET     16384

/* The clock. Calling into the kernel costs ~40 ns per call on CPUs with return-thunk mitigations,
 * so the datapath reads CLOCK_MONOTONIC from map clock, which the loader refreshes every few
 * milliseconds. While the value a CPU reads stays the same, the CPU compares it with
 * bpf_ktime_get_coarse_ns() on the 1st, 2nd, 4th, 8th... packet; when it lags by more than
 * CLOCK_STALE_NS (no loader is running) the CPU uses the helper until the clock moves again. A busy
 * CPU thus checks ~14 times per tick, a quiet one on its first packet after the loader stopped. */
#define CLOCK_STALE_NS    (200ull * 1000000ull)

/* Ethernet and IP constants we need without pulling in libc headers. */
#define ETH_ALEN 6
#define ETH_P_IP_BE     0x0008 /* htons(0x0800) */
#define ETH_P_IPV6_BE   0xDD86 /* htons(0x86DD) */
#define ETH_P_8021Q_BE  0x0081 /* htons(0x8100) */
#define ETH_P_8021AD_BE 0xA888 /* htons(0x88A8) */
#define IPV4_NO_OPTIONS 0x45 /* first byte of an IPv4 header: version 4, 20-byte header */
#define IP_MF_BE        0x0020 /* htons(0x2000): more fragments */
#define IP_OFFSET_BE    0xFF1F /* htons(0x1FFF): fragment offset */
#define IPV6_EXT_MAX    6      /* extension headers we walk before giving up (pass) */

#define PROTO_HOPOPTS  0
#define PROTO_ICMP     1
#define PROTO_ROUTING  43
#define PROTO_FRAGMENT 44
#define PROTO_AH       51
#define PROTO_ICMPV6   58
#define PROTO_NONE     59
#define PROTO_DSTOPTS  60


#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

/* Why a packet got its verdict: one per-CPU counter each. Every XDP_DROP and every XDP_PASS
 * increments exactly one of these; so does every forwarded packet. */
enum reason {
	REASON_PASS_NOT_IP = 0,      /* not IPv4/IPv6 (ARP, LLDP...) */
	REASON_PASS_MALFORMED_L3,    /* IP header truncated or lying: not ours to judge */
	REASON_PASS_NOT_VIP,         /* no VIP, no backend reply: the host's traffic */
	REASON_PASS_IPV6_EXT,        /* too many / unknown IPv6 extension headers */
	REASON_PASS_TTL,             /* TTL/hop limit would expire: the kernel sends the ICMP */
	REASON_PASS_NO_NEIGH,        /* rewritten, fib has no neighbour yet: kernel resolves it */
	REASON_PASS_FIB,             /* rewritten, fib wants the kernel (forwarding off, MTU...) */
	REASON_PASS_NO_TXPORT,       /* rewritten, egress not in tx_ports: kernel forwards */
	REASON_PASS_VLAN_EGRESS,     /* rewritten, tagged frame leaving another port: kernel forwards */
	REASON_PASS_REVERSE_NO_CT,   /* ambiguous backend reply with no conntrack entry */
	REASON_PASS_ICMP,            /* ICMP not about a VIP flow */
	REASON_PASS_LOCAL,           /* a backend's packet to this host (health-check reply): as is */
	REASON_DROP_MALFORMED_L4,    /* to a VIP with a truncated or lying L4 header */
	REASON_DROP_SRC_RANGE,       /* client outside the VIP's loadBalancerSourceRanges */
	REASON_DROP_NO_BACKEND,      /* VIP with an empty or missing Maglev table */
	REASON_DROP_FRAG_UNKNOWN,    /* non-first fragment whose first fragment was not seen */
	REASON_DROP_FIB,             /* fib says blackhole/unreachable/prohibited */
	REASON_DROP_UDP6_ZERO_CSUM,  /* UDP over IPv6 with checksum 0 (RFC 8200: discard) */
	REASON_FWD_TX,               /* forwarded out of the ingress interface */
	REASON_FWD_REDIRECT,         /* forwarded through tx_ports */
	REASON_NAT_FORWARD,          /* client -> VIP rewritten to the backend */
	REASON_NAT_REVERSE,          /* backend -> client rewritten to come from the VIP */
	REASON_ICMP_ECHO_REPLY,      /* echo request to a VIP answered */
	REASON_ICMP_TO_BACKEND,      /* ICMP error about a VIP flow relayed to its backend */
	REASON_ICMP_TO_CLIENT,       /* ICMP error from the cluster side relayed to the client */
	REASON_CT_RATE_LIMITED,      /* new flow forwarded without a conntrack entry (rate guard) */
	REASON_CT_RESELECT,          /* conntrack entry expired or its backend left: re-chosen */
	REASON_HS_HIT,               /* TCP packet of a flow without conntrack entry (the handshake's
				      * ACK, a retransmitted SYN) sent to its SYN's backend, from
				      * handshakes */
	REASON_HS_RATE_LIMITED,      /* SYN forwarded without a handshake-table entry (rate guard) */
	REASON_NAT_REVERSE_MAGLEV,   /* of nat_reverse: an ambiguous endpoint's reply without conntrack
				      * entry, its VIP re-derived from the candidates' Maglev tables */
	REASON_PASS_TAIL_CALL,       /* a tail call failed (its program missing from progs: never
				      * once loaded) */
	REASON_DSR_CARRIED,          /* of nat_forward: sent with the carrier (direct server return) */
	REASON_DSR_NO_ROOM,          /* of nat_forward: sent without the carrier, which would not fit
				      * (a TCP segment, or a UDP datagram that may be fragmented: the
				      * node knows the flow from an earlier packet, or not) */
	REASON_DSR_TOO_BIG,          /* a UDP datagram the carrier would not fit on, answered with an
				      * ICMP "too big" for the MTU less the carrier */
	REASON_DROP_CARRIER_FORGED,  /* a packet to a VIP that arrived with a carrier of direct server
				      * return: only gateways write them (carrier_forged) */
	REASON_DROP_NO_ROLE,         /* to a VIP or from a backend, on an interface without a role
				      * (not attached by xlb) */
	REASON_DROP_SITE_SOURCE,     /* to a VIP from a source that never arrives there: a VIP, the
				      * gateway's own address, or (client side) a site prefix */
	REASON_DROP_WRONG_SIDE,      /* to a VIP on a cluster-facing interface from outside the site */
	REASON_DROP_REPLY_WRONG_SIDE, /* a backend's reply that arrived from the client side: never
				       * reverse-NATed (a reflector otherwise) */
	REASON_DROP_VIP_UNSERVED,    /* to a VIP address, no service on that port or protocol:
				      * dropped, never looped back or given to the gateway's kernel */
	REASON_DROP_ICMP_UNKNOWN,    /* an ICMP error to a VIP address, or quoting a backend endpoint,
				      * about no flow this gateway knows (no conntrack or handshakes
				      * entry for the quoted tuple), or too short to tell: never relayed */
	REASON_DROP_ICMP_SRC_RANGE,  /* an echo request to a VIP address, or an ICMP error about a flow,
				      * whose client is outside the VIP's loadBalancerSourceRanges */
	REASON_DROP_ICMP_PTB_LOW,    /* a "fragmentation needed" below PMTU_MIN4 or a "packet too big"
				      * below PMTU_MIN6 (icmp.h) about a VIP flow: not relayed */
	REASON_ICMP_TOO_BIG_CLIENT,  /* a client's packet too big for the path to its backend (IPv4 with
				      * DF, or IPv6) answered with an ICMP "too big" from the VIP (pmtu.h) */
	REASON_ICMP_TOO_BIG_BACKEND, /* a backend's reply too big for the path to its client (IPv4 with
				      * DF, or IPv6) answered with an ICMP "too big" to the backend */
	REASON_CT_SYN_KEPT,          /* a SYN on a live flow's tuple sent to that flow's backend (its
				      * challenge ACK answers a spoofed one), not balanced again */
	REASON_CT_MIDFLOW_LIMITED,   /* a TCP flow whose handshake this gateway did not see forwarded
				      * but not recorded: the mid-flow budget (BUDGET_MID_FLOW) spent */
	REASON_FRAG_RATE_LIMITED,    /* a first fragment forwarded but not remembered: FRAG_BUDGET
				      * spent (its later fragments are then drop_frag_unknown) */
	REASON_FRAG_EXPIRED,         /* a non-first fragment found its datagram's entry older than
				      * FRAG_TIMEOUT_NS: the entry is deleted, the fragment treated as
				      * of an unknown datagram (drop_frag_unknown to a VIP) */
	REASON_DROP_BOGUS_SOURCE,    /* to a VIP from an address no client can have: unspecified,
				      * loopback, multicast, link-local, IPv4 0/8 and 240/4, IPv6
				      * v4-mapped (side.h) */
	REASON_MAX,
};

#endif
