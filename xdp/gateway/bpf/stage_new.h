/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_new.h: the new-flow stage (xlb_new4, xlb_new6): a packet to a VIP of no flow the full path found: VIP lookup, source checks, Maglev, the flood budgets and the handshake table. Reached by tail call from the full path with the flow in stage_scratch (stage.h); hands the packet to the egress stage. */
#ifndef XLB_STAGE_NEW_H
#define XLB_STAGE_NEW_H

/* ct_store inserts or replaces the forward entry of flow fk in conntrack (unless only_reverse),
 * and the reverse entry in ct_reverse when the backend's endpoint serves several VIP:ports (its
 * replies cannot be mapped statelessly). The caller has paid for it from a budget (budget.h). */
static __always_inline void ct_store(const struct flow_key *fk, __u64 now, __u32 bid,
				     const struct backend *be, __u32 vip_id, __u8 flags,
				     int only_reverse)
{
	struct ct_entry e = { .last_seen = now, .backend_id = bid, .vip_id = vip_id,
			      .vip_port = fk->dport, .flags = flags };

	if (!only_reverse) {
		bpf_map_update_elem(&conntrack, fk, &e, BPF_ANY);
		live_mark(tuple_hash(fk)); /* a SYN and a datagram ask the filter (live.h) */
	}
	if (be->flags & BACKEND_F_REVERSE_CT) {
		struct flow_key rk = { .src = be->addr, .dst = fk->src,
				       .sport = be->port ? be->port : fk->dport,
				       .dport = fk->sport, .proto = fk->proto,
				       .family = fk->family };

		e.backend_id = 0;
		e.flags = flags | CT_F_REVERSE;
		bpf_map_update_elem(&ct_reverse, &rk, &e, BPF_ANY);
	}
}

/* hs_promote moves the connection slot i holds into conntrack (with its backend, VIP, closing
 * state and idle time) if it is worth keeping (hs_conn_worth) and not fk's own: called by a SYN
 * of fk about to take the slot over (paid from its handshake budget). Returns 1 when it
 * inserted. A global function: the verifier checks it once. */
__noinline int hs_promote(const struct flow_key *fk, __u32 i, __u64 now)
{
	struct hs_entry *e = bpf_map_lookup_elem(&hs_slots, &i);
	struct ct_scratch *sc;
	__u32 zero = 0, hash;
	__s32 age;

	if (!fk || !e || !e->key.family || !(hs_state(e) & HS_ST_CONN) || !hs_conn_worth(e, now) ||
	    flow_key_eq(&e->key, fk))
		return 0;
	sc = bpf_map_lookup_elem(&ct_scratch, &zero);
	if (!sc)
		return 0;
	sc->key = e->key;
	sc->key.pad[0] = 0; /* conntrack's keys are hashed whole: padding zero, as a packet's */
	sc->key.pad[1] = 0;
	hash = tuple_hash(&sc->key);
	if (e->check != hs_check(hash, e->backend_id, e->vip_id, e->isn))
		return 0; /* torn (two CPUs wrote the slot at once): no connection to trust */
	age = (__s32)(hs_time(now) - e->syn_time);
	__builtin_memset(&sc->val, 0, sizeof(sc->val));
	sc->val.last_seen = age > 0 ? now - ((__u64)age << HS_TIME_SHIFT) : now;
	sc->val.backend_id = e->backend_id;
	sc->val.vip_id = e->vip_id;
	sc->val.vip_port = sc->key.dport;
	sc->val.flags = (hs_state(e) & HS_ST_CLOSING) ? CT_F_CLOSING : 0;
	bpf_map_update_elem(&conntrack, &sc->key, &sc->val, BPF_ANY);
	live_mark(hash);
	return 1;
}

/* lb_new handles a packet to a VIP address of no flow the full path found (a SYN, a handshake's
 * ACK, a flow's first datagrams, a flow ECMP moved here, a stale entry's flow), arrived on an
 * interface of role: fk is its flow, th its tuple_hash, fc this CPU's flow_cache slot for it
 * (NULL for a non-first fragment). It looks up the VIP (through svc_cache), checks the packet's
 * side and source, and picks a backend: the handshake table's, a live conntrack entry's for a
 * SYN, else the VIP's Maglev table's; then hands the packet to the egress stage. Returns -1 when
 * the packet is for no VIP. */
static __always_inline int lb_new(struct xdp_md *ctx, struct packet *p, void *data_end,
				  const struct flow_key *fk, struct flow_cache_entry *fc,
				  struct stage_state *st, __u64 now, __u32 gen, __u32 role,
				  __u32 th, const __u8 fam)
{
	int syn = p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;
	__u8 closing = (p->tcp_flags & (TH_FIN | TH_RST)) ? CT_F_CLOSING : 0;
	struct ct_entry *ct = NULL;
	struct hs_entry *hs = NULL, *slot;
	struct backend *be;
	struct vip_info *vi;
	__u32 bid, vip_id;
	int rc, hs_hit = 0, udp_first = 0, new_flow;

	vi = svc_lookup_cached(SVC_CACHE_VIPS, &p->dst, p->family, p->dport, p->proto, gen);
	if (!vi || (vi->flags & VIP_F_MARKER))
		return -1;
	rc = side_verdict(ctx, role, 0);
	if (rc >= 0)
		return rc;
	vip_id = vi->id;
	if ((vi->flags & VIP_F_SRC_RANGES) && !src_allowed(p, vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	/* A TCP flow without a conntrack entry (a SYN, a retransmitted SYN, the handshake's ACK) first
	 * asks the handshake table (hs.h) which backend its SYN went to: the VIP's table may have changed since, and
	 * that backend is the one holding the half-open connection. Otherwise Maglev chooses. */
	bid = 0;
	if (syn) {
		/* A SYN on the tuple of a live flow (not closing, not idle past its timeout, its
		 * backend usable) goes to that flow's backend, which answers it with a challenge ACK
		 * (RFC 5961) while the connection lives: one spoofed SYN must not re-point an
		 * established flow. Only a closing or idle entry is balanced again (below). */
		ct = live_maybe(th) ? bpf_map_lookup_elem(&conntrack, fk) : NULL; /* also below */
		if (ct && !(ct->flags & (CT_F_REVERSE | CT_F_CLOSING)) && ct->vip_id == vip_id &&
		    elapsed(now, ct->last_seen) <= ct_timeout(p->proto, 0) &&
		    backend_get(ct->backend_id)) {
			bid = ct->backend_id;
			count_reason(REASON_CT_SYN_KEPT);
		}
	}
	if (!bid && p->proto == PROTO_TCP) {
		__u64 r = hs_probe(fk, th, vip_id, now,
				   (__u64)(syn ? HS_MATCH_SYN : HS_MATCH_DATA) << 32 | p->tcp_seq);

		if (r & HS_PROBE_HOLDS)
			hs = (r & HS_PROBE_ALT) ? hs_alt(th) : hs_slot(th);
		bid = (__u32)r;
		if (syn && (r & HS_PROBE_CONN)) {
			/* A SYN on the tuple of a live connection its slot holds: ct_syn_kept, as
			 * above, and the slot keeps the connection (nothing to record). */
			count_reason(REASON_CT_SYN_KEPT);
			be = backend_get(bid);
			if (!be)
				return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
			if (fc)
				fc->gen = 0;
			return to_egress(ctx, st, fam, vip_id, bid, 1, 0, 0, 1);
		} else if (bid) {
			count_reason(REASON_HS_HIT);
			hs_hit = 1;
		}
	} else if (!bid) {
		/* A datagram without a conntrack entry: if its tuple's slot says where the flow's
		 * first datagram went (hs_udp_record), this is its second: it goes there, and
		 * conntrack takes the flow over (below). */
		bid = hs_udp_take(fk, th, vip_id, now);
		hs_hit = bid != 0;
	}
	if (!bid)
		bid = maglev_pick(vi, flow_hash(cfg_hash_seed, &p->src, p->family, p->sport,
						p->dport, p->proto,
						vi->flags & VIP_F_AFFINITY_CLIENTIP));
	be = backend_get(bid);
	if (!be)
		return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
	/* A datagram that opens its flow here records it in its slot, not in conntrack, when the
	 * slot may take it (hs_udp_record): one-shot datagrams and floods of random tuples never
	 * insert into conntrack. An ambiguous backend's reply still needs the reverse entry, from
	 * the new-flow budget. */
	new_flow = syn || (p->proto != PROTO_TCP && !hs_hit);
	if (p->proto != PROTO_TCP && !hs_hit)
		udp_first = hs_udp_record(fk, th, now, (__u64)bid << 32 | vip_id);
	/* The TCP packet completing a handshake this gateway saw (a handshake_hit) marks its slot
	 * as holding the connection (hs_establish): no conntrack insert, until a SYN of another
	 * tuple needs the slot (hs_promote, below). Otherwise the flow is remembered from its first
	 * non-SYN packet, paid from a budget (budget.h): a datagram flow's second datagram from the
	 * new-flow budget; any other TCP packet (a flow ECMP moved here mid-way, or a forged ACK)
	 * from the smaller mid-flow budget. Once the conntrack entry exists the slot is emptied
	 * (and a flush of the flow is not undone by it). */
	if (udp_first) {
		if ((be->flags & BACKEND_F_REVERSE_CT) && budget_take(BUDGET_NEW_FLOW, now))
			ct_store(fk, now, bid, be, vip_id, 0, 1);
	} else if (!syn && hs_hit && hs && p->proto == PROTO_TCP) {
		hs_establish(hs, now, closing);
	} else if (!syn && budget_take(p->proto == PROTO_TCP && !hs_hit ? BUDGET_MID_FLOW :
									  BUDGET_NEW_FLOW, now)) {
		ct_store(fk, now, bid, be, vip_id, closing, 0);
		if (hs)
			hs_retire(hs);
	}
	if (syn) {
		/* The SYN records its backend in its slot for its ACK (and its retransmissions):
		 * refreshed in place when the entry already names it, else written from the
		 * handshake budget, with the reverse entry an ambiguous backend's SYN-ACK needs. */
		int again = hs && !hs_state(hs) && hs->backend_id == bid && hs->vip_id == vip_id &&
			    hs->isn == p->tcp_seq;

		if (again)
			hs->syn_time = hs_time(now);
		/* A SYN takes the slot of its pair whose entry costs least to lose (hs_pick); one
		 * that holds another tuple's connection, it moves into conntrack first (hs_promote),
		 * paid from this SYN's handshake budget. */
		if (again || budget_take(BUDGET_HANDSHAKE, now)) {
			__u32 i = again ? HS_NO_SLOT : hs_pick(fk, th, now, HS_RANK_CONN);

			slot = bpf_map_lookup_elem(&hs_slots, &i);
			if (slot) {
				hs_promote(fk, i, now);
				hs_write(slot, fk, th, now, bid, vip_id, p->tcp_seq);
			}
			if (be->flags & BACKEND_F_REVERSE_CT)
				ct_store(fk, now, bid, be, vip_id, 0, 1);
		}
		/* A SYN on a tuple conntrack still holds but closing or idle (client port reuse after
		 * a FIN, or a FIN that went through another gateway) starts a new connection: the
		 * entry takes the SYN's backend in place, so the handshake's ACK follows it (a live
		 * entry already names it, above). Nothing is inserted: a SYN flood still cannot evict
		 * conntrack entries. ct is the entry looked up above (nothing since wrote conntrack). */
		if (ct && !(ct->flags & CT_F_REVERSE) &&
		    (ct->backend_id != bid || ct->vip_id != vip_id || ct->flags)) {
			ct->backend_id = bid;
			ct->vip_id = vip_id;
			ct->flags = 0;
			ct->last_seen = now;
			live_mark(th); /* revived: a rebuild may have left it out as idle */
		}
		if (fc)
			fc->gen = 0;
		ct = NULL;
	}
	/* A flow's opening packets carry the frontend to a DSR backend's node: a SYN, its ACK (the
	 * node's half-open entry becomes a flow), a first datagram; not a datagram flow's second,
	 * which the node has seen the first of (as it was before first datagrams went to the slots,
	 * and whatever the slot held, so the AF_XDP engine, which has no slots, decides the same). */
	return to_egress(ctx, st, fam, vip_id, bid, new_flow, 0, 0, 1);
}

/* new_flow_stage is the program of family fam's new flows (xlb_new4, xlb_new6), reached by tail
 * call from the full path with the packet's flow in stage_scratch. A packet to a VIP address but
 * no service on its port or protocol is dropped: passed on, it would reach the gateway's own
 * services on an internet-announced address, or loop between the gateway and its router until its
 * TTL ran out (the gateway routes VIPs upstream). */
static __always_inline int new_flow_stage(struct xdp_md *ctx, const __u8 fam)
{
	struct flow_cache_entry *fc = NULL;
	struct stage_state *st;
	struct packet p = {};
	struct flow_key fk;
	void *data_end;
	int rc;

	st = stage_packet(ctx, &p, fam);
	if (!st)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	data_end = (void *)(long)ctx->data_end;
	fk = st->fk;
	if (st->has_fc)
		fc = flow_cache_slot(&fk);
	rc = lb_new(ctx, &p, data_end, &fk, fc, st, st->now, st->gen, st->role, st->th, fam);
	if (rc >= 0)
		return rc;
	if (is_vip_addr(&p.dst, fam))
		return verdict(REASON_DROP_VIP_UNSERVED, XDP_DROP);
	if (filter_has(1, &p.src, fam))
		return stage_call(ctx, PROG_OF(fam, PROG_REPLY4, PROG_REPLY6));
	return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
}

#endif
