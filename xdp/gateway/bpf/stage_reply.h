/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_reply.h: replies (backend -> client): the VIP becomes the source. lb_reverse is inlined in the fast path (stage_fast.h) and is the reply stage (xlb_reply4, xlb_reply6) the full path tail-calls. */
#ifndef XLB_STAGE_REPLY_H
#define XLB_STAGE_REPLY_H

/* lb_reverse handles a reply from a backend, arrived on an interface of role: the VIP becomes its
 * source if it passes reply_side_check (side.h). Returns -1 when the packet is not a backend
 * reply. */
static __always_inline int lb_reverse(struct xdp_md *ctx, struct packet *p, void *data_end,
				      __u64 now, __u32 gen, __u32 role)
{
	struct svc_key *vip;
	struct hop h = {};
	__be16 vport;
	int hop;
	int rc = reverse_vip(&p->src, &p->dst, p->sport, p->dport, p->proto, p->family, now,
			     &vip, &vport);

	if (rc == -1)
		return -1;
	if (role != ROLE_CLUSTER) {
		hop = side_verdict(ctx, role, 1);
		if (hop >= 0)
			return hop;
	}
	if (rc == -2)
		return verdict(REASON_PASS_REVERSE_NO_CT, XDP_PASS);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	/* The destination does not change: route first, so that a backend's packet to this host
	 * (a health-check reply) is left alone. */
	hop = next_hop(ctx, p, data_end, now, gen, &h);
	if (hop == HOP_LOCAL)
		return verdict(REASON_PASS_LOCAL, XDP_PASS);
	if (hop == HOP_TOO_BIG) { /* the backend is told, if it may not be fragmented (pmtu.h) */
		int v = too_big_call(ctx, p, data_end, &vip->addr, vport, h.mtu, PROG_TOO_BIG_BACKEND);

		if (v >= 0)
			return v;
	}
	frag_remember(p, now); /* a backend's first fragment, before its source becomes the VIP */
	count_reason(REASON_NAT_REVERSE);
	if (rc == 1)
		count_reason(REASON_NAT_REVERSE_MAGLEV);
	rewrite_endpoint(p, data_end, 1, &vip->addr, vport);
	return send_hop(ctx, p, data_end, hop, &h);
}

/* reply_stage is the program of family fam's replies (xlb_reply4, xlb_reply6), reached by tail
 * call from the full path (or the new-flow stage) with a packet from a backend address. */
static __always_inline int reply_stage(struct xdp_md *ctx, const __u8 fam)
{
	struct stage_state *st;
	struct packet p = {};
	int rc;

	st = stage_packet(ctx, &p, fam);
	if (!st)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	rc = lb_reverse(ctx, &p, (void *)(long)ctx->data_end, st->now, st->gen, st->role);
	return rc >= 0 ? rc : verdict(REASON_PASS_NOT_VIP, XDP_PASS);
}

#endif
