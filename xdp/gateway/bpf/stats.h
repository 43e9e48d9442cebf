/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stats.h: per-CPU counters. */
#ifndef XLB_STATS_H
#define XLB_STATS_H

#include "maps.h"

static __always_inline void count_reason(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&reasons, &reason);

	if (c)
		*c += 1;
}

/* verdict counts reason and returns action, so every return of the program says why. */
static __always_inline int verdict(__u32 reason, int action)
{
	count_reason(reason);
	return action;
}

/* count_traffic counts a packet of bytes to id in map (vip_stats or backend_stats), and a new flow
 * when new_flow (0 or 1). new_flow is added, not branched on: the verifier then need not tell
 * apart paths that differ only in it (all of forward follows). */
static __always_inline void count_traffic(void *map, __u32 id, __u32 bytes, __u32 new_flow)
{
	struct traffic *t = bpf_map_lookup_elem(map, &id);

	if (!t)
		return;
	t->packets++;
	t->bytes += bytes;
	t->new_flows += new_flow;
}

#endif
