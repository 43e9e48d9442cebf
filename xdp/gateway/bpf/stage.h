/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage.h: how a stage of the datapath hands a packet to the next one. Each stage is a program of
 * its own, reached by a tail call through progs (PROG_*, consts.h), so that the verifier walks
 * each apart and none comes near its limit. A tail call keeps the packet but not the stack: what
 * the next stage cannot read back from the packet crosses in this CPU's stage_scratch (struct
 * stage_state). A chain of stages runs on one CPU without preemption, so the scratch entry is the
 * packet's own from the first stage to the last. */
#ifndef XLB_STAGE_H
#define XLB_STAGE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

/* PROG_OF picks a per-family stage; fam is a constant wherever it is used, so the index is one
 * too and the kernel patches the tail call into a direct jump. */
#define PROG_OF(fam, v4, v6) ((fam) == FAMILY_V4 ? (v4) : (v6))

/* stage_get returns this CPU's stage_scratch (never NULL in practice). */
static __always_inline struct stage_state *stage_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stage_scratch, &zero);
}

/* stage_packet takes packet p up again in a stage reached by tail call: parsed again (it is
 * unchanged since the stage that handed it on), its ports from its L4 header or, in a non-first
 * fragment, from the flow the full path recalled (frag.h). Returns this CPU's stage_state, or NULL
 * when the packet is not of family fam or not what the state describes (never, unless a stage
 * program is run on its own). */
static __always_inline struct stage_state *stage_packet(struct xdp_md *ctx, struct packet *p,
							 const __u8 fam)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct stage_state *st = stage_get();

	if (!st || st->fk.family != fam || parse_l3(data, data_end, p) != PARSE_OK ||
	    p->family != fam || p->proto != st->fk.proto)
		return NULL;
	p->family = fam; /* a constant from here on */
	if (p->l4) {
		if (parse_ports(data_end, p))
			return NULL;
	} else {
		p->sport = st->fk.sport;
		p->dport = st->fk.dport;
	}
	return st;
}

/* stage_call tail-calls stage prog; it returns only when progs holds no program there, and the
 * packet is passed (the caller must not touch it after a tail call: some kernels' verifiers take
 * packet pointers for invalid after one). */
static __always_inline int stage_call(struct xdp_md *ctx, const __u32 prog)
{
	bpf_tail_call(ctx, &progs, prog);
	return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
}

/* to_egress hands a packet to the egress stage (stage_egress.h): DNAT to backend bid of VIP
 * vip_id. st already holds the flow, the clock and the ingress role. new_flow: the packet opens
 * its flow here; record: forward records its hop in the flow's flow_cache slot, for the flow's
 * next packets (vip_flags are the VIP's flags the record keeps); carry: it may carry its frontend
 * to a backend of direct server return. */
static __always_inline int to_egress(struct xdp_md *ctx, struct stage_state *st, const __u8 fam,
				     __u32 vip_id, __u32 bid, int new_flow, int record,
				     __u32 vip_flags, int carry)
{
	st->vip_id = vip_id;
	st->bid = bid;
	st->new_flow = new_flow;
	st->record = record;
	st->vip_flags = vip_flags;
	st->carry = carry;
	return stage_call(ctx, PROG_OF(fam, PROG_EGRESS4, PROG_EGRESS6));
}

#endif
