/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stats.h: the per-CPU counters of the node side of direct server return. xdp/dsr names them
 * (counterNames, in this order) and sums them over CPUs (Counters). */
#ifndef XLB_DSR_STATS_H
#define XLB_DSR_STATS_H

#include "maps.h"

/* What a program did with a packet it did not leave alone. Packets without a carrier (ingress)
 * and packets of no recorded flow (egress) are not counted: they are the common case, and
 * counting costs a map lookup. */
enum dsr_stat {
	STAT_CARRIER_ACCEPTED = 0,   /* carried packet of an allowed pair: flow recorded, carrier removed */
	STAT_CARRIER_FRAG_STRIPPED,  /* carried non-first fragment: carrier removed, nothing recorded */
	STAT_DROP_NOT_ALLOWED,       /* carrier naming a {frontend, endpoint} pair services lacks */
	STAT_DROP_MALFORMED,         /* carrier of the wrong type, length or layout */
	STAT_DROP_OPTIONS,           /* IPv4: the carrier beside other options */
	STAT_DROP_TRUNCATED,         /* carried packet shorter than its headers say */
	STAT_DROP_NOT_L4,            /* carrier on a packet other than TCP or UDP */
	STAT_DROP_STRIP_FAILED,      /* the kernel refused to remove the carrier */
	STAT_RECORD_FAILED,          /* flows could not be written: passed, its replies not rewritten */
	STAT_REPLY_REWRITTEN,        /* reply of a recorded flow given the VIP as source */
	STAT_REPLY_EXPIRED,          /* reply of a flow idle past its timeout: left alone */
	STAT_FRAG_REWRITTEN,         /* later fragment of a rewritten reply given the VIP */
	STAT_ICMP_REWRITTEN,         /* ICMP error about a recorded flow given the VIP */
	STAT_DROP_UDP6_ZERO_CSUM,    /* IPv6 UDP reply with checksum 0 (invalid): dropped */
	STAT_DROP_REWRITE_FAILED,    /* a rewrite helper failed half-way: dropped, not sent half done */
	STAT_TCP_PICKUP_OVER_BUDGET, /* carried non-SYN TCP packet of no known flow over cfg_tcp_pickup:
				      * passed stripped, not recorded */
	STAT_UDP_NEW_OVER_BUDGET,    /* carried UDP datagram of a new flow over cfg_udp_new: passed
				      * stripped, not recorded */
	STAT_CARRIER_CONFLICT,       /* carried packet other than a SYN naming another frontend than its
				      * tuple's live flow: passed stripped, the flow kept */
	STAT_SYN_OVER_BUDGET,        /* carried SYN of a new candidate over cfg_syn: passed stripped, not
				      * recorded */
	STAT_BUDGET_FRONTEND_SPENT,  /* of the *_over_budget: the frontend's share was spent */
	STAT_BUDGET_PREFIX_SPENT,    /* of the *_over_budget: the client prefix's share was spent */
	STAT_FLOW_REPOINTED,         /* the Pod's SYN-ACK committed a half-open candidate over a flow
				      * naming another frontend (a new connection on the tuple) */
	STAT_ICMP_FOREIGN,           /* ICMP error about a recorded flow from neither the quoted Pod nor
				      * the node: left alone */
	STAT_MAX,
};

/* stats: per CPU, enum dsr_stat -> count. Written by both programs, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, enum dsr_stat);
	__type(value, __u64);
	__uint(max_entries, STAT_MAX);
} stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &stat);

	if (c)
		*c += 1;
}

/* verdict counts stat and returns action, so that every counted return says why. */
static __always_inline int verdict(__u32 stat, int action)
{
	count(stat);
	return action;
}

#endif
