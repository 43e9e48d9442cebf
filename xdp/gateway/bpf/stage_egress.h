/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_egress.h: the egress stage (xlb_egress4, xlb_egress6): DNAT to the chosen backend, the flow-cache record of what was done, the next hop, the carrier of direct server return and the too-big answers by tail call. Reached by tail call from the established-flow and new-flow stages with the flow's frontend and backend in stage_scratch (stage.h). */
#ifndef XLB_STAGE_EGRESS_H
#define XLB_STAGE_EGRESS_H

/* record_hop writes into flow_cache entry rec what was done to packet p, which XDP is about to
 * send by h: its destination went from (from, fport) to p's, and its next hop. The record is
 * replayed until until (see flow_replay). */
static __always_inline void record_hop(struct flow_cache_entry *rec, struct packet *p,
				       const struct addr *from, __be16 fport, struct hop *h,
				       __u64 until)
{
	rec->fast_until = h->expires < until ? h->expires : until;
	rec->to_addr = p->dst;
	rec->to_port = p->dport;
	rec->mtu = h->mtu;
	rec->ifindex = h->ifindex;
	__builtin_memcpy(rec->smac, h->smac, ETH_ALEN);
	__builtin_memcpy(rec->dmac, h->dmac, ETH_ALEN);
	dnat_diffs(from, fport, &p->dst, p->dport, p->family, &rec->ip_diff, &rec->l4_diff);
}

/* forward DNATs a packet of VIP vip_id to backend bid and sends it on its way. rec, when not
 * NULL, is the flow's flow_cache entry (an established flow): when XDP sends the packet, what
 * was done to it is recorded there for the flow's next packets (flow_replay). carry says the
 * packet has no conntrack entry: to a backend of direct server return it carries its frontend
 * (xlb_dsr, by tail call) if it opens the flow here — a TCP packet (a SYN, its ACK, a flow ECMP
 * moved here), a datagram that is a new flow (new_flow); not a datagram flow's second datagram,
 * which the node has seen the first of (as before first datagrams went to the handshake slots;
 * and the same whatever the slot held: the AF_XDP engine, which has no slots, decides alike). */
static __always_inline int forward(struct xdp_md *ctx, struct packet *p, void *data_end,
				   __u32 vip_id, __u32 bid, struct backend *be, int new_flow,
				   __u64 now, __u32 gen, struct flow_cache_entry *rec,
				   __u32 vip_flags, int carry)
{
	struct addr vip = p->dst;
	__be16 vport = p->dport;
	struct hop h = {};
	int hop;

	frag_remember(p, now); /* a first fragment: accepted here, its ports still the client's */
	count_traffic(&vip_stats, vip_id, p->pkt_len, new_flow);
	count_traffic(&backend_stats, bid, p->pkt_len, new_flow);
	count_reason(REASON_NAT_FORWARD);
	rewrite_endpoint(p, data_end, 0, &be->addr, be->port);
	if (carry && (be->flags & BACKEND_F_DSR) && (new_flow || p->proto == PROTO_TCP)) {
		struct dsr_meta *m = dsr_meta_get();

		if (m) {
			m->vip = vip;
			m->vport = vport;
			m->family = p->family;
			bpf_tail_call(ctx, &progs, PROG_DSR);
			/* No xlb_dsr in progs (never once loaded). The packet is not touched after
			 * a tail call: some verifiers (Debian 12's 6.12) take packet pointers for
			 * invalid after one. */
			return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
		}
		count_reason(REASON_DSR_NO_ROOM); /* no scratch: without the carrier */
	}
	hop = next_hop(ctx, p, data_end, now, gen, &h);
	if (hop == HOP_TOO_BIG) { /* the client is told, if it may not be fragmented (pmtu.h) */
		int rc = too_big_call(ctx, p, data_end, &vip, vport, h.mtu, PROG_TOO_BIG_CLIENT);

		if (rc >= 0)
			return rc;
	}
	if (rec && hop == HOP_SEND && h.expires && p->l4 && !p->is_frag) {
		rec->vip_flags = vip_flags;
		record_hop(rec, p, &vip, vport, &h, rec->refreshed + CT_REFRESH_NS);
	}
	return send_hop(ctx, p, data_end, hop, &h);
}

/* egress_stage is the program of family fam's egress (xlb_egress4, xlb_egress6): the packet goes
 * to the backend the stage before chose (stage_state). A backend removed in between (userspace
 * changed it while the packet crossed the tail call) drops the packet as a missing one would. */
static __always_inline int egress_stage(struct xdp_md *ctx, const __u8 fam)
{
	struct flow_cache_entry *rec = NULL;
	struct stage_state *st;
	struct packet p = {};
	struct backend *be;
	void *data_end;

	st = stage_packet(ctx, &p, fam);
	if (!st)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	data_end = (void *)(long)ctx->data_end;
	be = backend_get(st->bid);
	if (!be)
		return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
	if (st->record) {
		/* The slot the full path filled (fc_fill): still this flow's, unless the cache moved
		 * on (a generation) in between. */
		rec = flow_cache_slot(&st->fk);
		if (rec && (rec->gen != st->gen || !flow_key_eq(&rec->key, &st->fk)))
			rec = NULL;
	}
	return forward(ctx, &p, data_end, st->vip_id, st->bid, be, st->new_flow, st->now, st->gen,
		       rec, st->vip_flags, st->carry);
}

#endif
