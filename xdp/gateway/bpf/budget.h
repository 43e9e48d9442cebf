/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* budget.h: the flood budgets (docs/datapath.md, "Security model").
 *
 * Every insert into a state table that a packet from the internet can cause is paid from a
 * budget (enum budget_kind) of so many inserts per RATE_WINDOW_NS over all CPUs: conntrack's new
 * flows (UDP, and TCP handshakes this gateway saw completing), conntrack's mid-flow pickups
 * (TCP flows whose handshake this gateway did not see: a smaller budget, so random-tuple ACKs
 * cannot churn conntrack), and the handshake table with the reverse entries a SYN writes. A
 * packet beyond its budget is still forwarded: Maglev is stateless and the same on every
 * gateway, so only a flow whose table changes before it is recorded can lose its backend.
 *
 * The budgets are global, not per CPU: a flood spread by RSS over many CPUs gets no more. To keep
 * the CPUs off one cache line per new flow, a CPU takes a batch of units at a time (cpu_state's
 * tokens) with one atomic add to the window's total (budgets). */
#ifndef XLB_BUDGET_H
#define XLB_BUDGET_H

#include "maps.h"
#include "stats.h"
#include "lb.h"

/* budget_take takes one unit of budget which at time now: 1 if the insert may be made, else 0
 * (counted: ct_rate_limited, ct_midflow_limited or handshake_rate_limited). A global function:
 * the verifier checks it once, and the paths near its limits that call it see only its result. */
__noinline int budget_take(__u32 which, __u64 now)
{
	__u32 key = which, zero = 0;
	struct cpu_state *cs;
	struct budget *b;
	__u64 limit, batch, *start;
	__u32 *tokens;

	if (which >= BUDGET_MAX)
		return 0;
	limit = which == BUDGET_MID_FLOW ? cfg_mid_flow_rate : cfg_new_flow_rate;
	if (!limit)
		return 1;
	b = bpf_map_lookup_elem(&budgets, &key);
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!b || !cs)
		return 0;
	/* Whichever CPU sees the window over starts the next (also when now < start: a clock
	 * set back); two racing CPUs both reset it, harmlessly. */
	if (now - b->start >= RATE_WINDOW_NS) {
		b->start = now;
		b->taken = 0;
	}
	/* Constant indices: the verifier then needs no bounds on which. */
	switch (which) {
	case BUDGET_NEW_FLOW:
		start = &cs->budget_start[BUDGET_NEW_FLOW];
		tokens = &cs->budget_tokens[BUDGET_NEW_FLOW];
		break;
	case BUDGET_MID_FLOW:
		start = &cs->budget_start[BUDGET_MID_FLOW];
		tokens = &cs->budget_tokens[BUDGET_MID_FLOW];
		break;
	default:
		start = &cs->budget_start[BUDGET_HANDSHAKE];
		tokens = &cs->budget_tokens[BUDGET_HANDSHAKE];
	}
	if (*start != b->start) { /* tokens of a past window are void */
		*start = b->start;
		*tokens = 0;
	}
	if (!*tokens) {
		if (b->taken >= limit) {
			count_reason(which == BUDGET_NEW_FLOW	? REASON_CT_RATE_LIMITED :
				     which == BUDGET_MID_FLOW	? REASON_CT_MIDFLOW_LIMITED :
								  REASON_HS_RATE_LIMITED);
			return 0;
		}
		batch = limit / BUDGET_BATCH_SHARE;
		if (batch > BUDGET_BATCH)
			batch = BUDGET_BATCH;
		if (!batch)
			batch = 1;
		__sync_fetch_and_add(&b->taken, batch);
		*tokens = batch;
	}
	(*tokens)--;
	return 1;
}

#endif
