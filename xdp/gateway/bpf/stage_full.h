/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_full.h: the full path (xlb_full4, xlb_full6): every packet the fast path did not take. Parsed whole (VLAN tags, IPv4 options, IPv6 extension headers, fragments); an established flow is found in the flow cache, its handshake slot or conntrack and handed to the egress stage; a new flow goes to the new-flow stage, a backend's reply to the reply stage, ICMP to the ICMP stage. */
#ifndef XLB_STAGE_FULL_H
#define XLB_STAGE_FULL_H

/* forged_carrier reports whether the packet in ctx is addressed to a VIP and arrived with a carrier
 * (carrier_forged). fast_path takes no packet with IPv4 options or IPv6 extension headers, so only
 * the full path asks. A global function: the verifier checks it once, on its own, and the full
 * path (near the verifier's limits) sees only its result. */
__noinline int forged_carrier(struct xdp_md *ctx)
{
	void *data_end, *data, *cur;
	struct ethhdr *eth;
	struct packet p = {};
	__be16 proto;

	if (!ctx)
		return 0;
	data_end = (void *)(long)ctx->data_end;
	data = (void *)(long)ctx->data;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return 0;
	proto = eth->h_proto;
	cur = eth + 1;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		struct { __be16 tci; __be16 proto; } *vh = cur;

		if ((void *)(vh + 1) > data_end)
			return 0;
		proto = vh->proto;
		cur = vh + 1;
	}
	p.l3 = cur;
	if (proto == ETH_P_IP_BE) {
		struct iphdr *iph = cur;

		if ((void *)(iph + 1) > data_end)
			return 0;
		p.family = FAMILY_V4;
		p.dst.w[0] = iph->daddr;
	} else if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		p.family = FAMILY_V6;
		__builtin_memcpy(&p.dst, &ip6->daddr, sizeof(p.dst));
	} else {
		return 0;
	}
	return carrier_forged(&p, data_end) && is_vip_addr(&p.dst, p.family);
}
/* lb_established handles a packet to a VIP address that flow_replay did not take, arrived on an
 * interface of role: fk is its flow, fc this CPU's flow_cache slot for it (NULL for a non-first
 * fragment), st this CPU's stage_state, holding fk, the clock and role. An established flow is
 * found in fc, else in its handshake slot or conntrack (and then copied to fc); whatever frontend
 * it finds, the packet must pass vip_side_check (side.h), and goes to the egress stage. Returns -1
 * for anything else (a SYN, a flow of no entry, a stale entry), with tuple_hash(fk) in st->th:
 * the new-flow stage decides. */
static __always_inline int lb_established(struct xdp_md *ctx, struct packet *p, void *data_end,
					  const struct flow_key *fk, struct flow_cache_entry *fc,
					  struct stage_state *st, __u64 now, __u32 gen,
					  __u32 role, const __u8 fam)
{
	int syn = p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;
	__u8 closing = (p->tcp_flags & (TH_FIN | TH_RST)) ? CT_F_CLOSING : 0;
	struct flow_cache_entry *rec = NULL;
	struct ct_entry *ct = NULL;
	struct backend *be;
	struct vip_ref *ref;
	__u32 bid, vip_id, th;
	int rc;

	/* A SYN never inserts into conntrack (it writes hs_slots): a SYN flood cannot evict
	 * established flows. */
	if (!syn) {
		if (fc && gen && fc->gen == gen && flow_key_eq(&fc->key, fk) &&
		    elapsed(now, fc->refreshed) <= CT_REFRESH_NS && !(closing & ~fc->flags)) {
			ref = ct_vip(p, fc->vip_id);
			be = ref ? backend_get(fc->backend_id) : NULL;
			if (be) {
				vip_id = fc->vip_id;
				bid = fc->backend_id;
				rec = fc;
				goto established;
			}
		}
		/* The tuple's handshake slot next: a TCP connection whose handshake completed may live
		 * there instead of in conntrack (HS_ST_CONN, hs_conn), as its conntrack entry would.
		 * The slot also holds the live-flow filter's bits (live.h): a packet whose bit is
		 * clear skips the conntrack lookup (a miss in a big hash), so a handshake's ACK and a
		 * flow's first datagram read no conntrack line. */
		th = tuple_hash(fk);
		if (p->proto == PROTO_TCP) {
			__u64 c = hs_conn(fk, th, now, closing);

			if (c) {
				vip_id = (__u32)(c >> 32) & 0x3fffffff;
				bid = (__u32)c;
				ref = ct_vip(p, vip_id);
				be = ref && !(c & HS_CONN_STALE) ? backend_get(bid) : NULL;
				if (be) {
					rec = fc_fill(fc, fk, now, bid, vip_id,
						      (c & HS_CONN_CLOSING) ? CT_F_CLOSING : 0, role,
						      gen);
					goto established;
				}
				if (ref)
					count_reason(REASON_CT_RESELECT);
			}
		}
		ct = live_maybe(th) ? bpf_map_lookup_elem(&conntrack, fk) : NULL;
		if (ct && !(ct->flags & CT_F_REVERSE)) {
			ref = ct_vip(p, ct->vip_id);
			be = NULL;
			if (ref && elapsed(now, ct->last_seen) <= ct_timeout(p->proto, ct->flags))
				be = backend_get(ct->backend_id);
			if (be) {
				vip_id = ct->vip_id;
				bid = ct->backend_id;
				ct->flags |= closing;
				ct->last_seen = now;
				rec = fc_fill(fc, fk, now, bid, vip_id, ct->flags, role, gen);
				goto established;
			}
			if (ref)
				count_reason(REASON_CT_RESELECT);
		}
	} else {
		th = tuple_hash(fk);
	}
	st->th = th;
	return -1;

established:
	rc = side_verdict(ctx, role, 0);
	if (rc >= 0)
		return rc;
	if ((ref->flags & VIP_F_SRC_RANGES) && !src_allowed(p, vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	return to_egress(ctx, st, fam, vip_id, bid, 0, rec != NULL, ref->flags, 0);
}

/* process_full balances a parsed packet of family fam (a constant: one copy per program, so the
 * verifier never mixes IPv4 and IPv6 states): the checks of every packet, an established flow,
 * then by tail call the new-flow stage (a packet to a VIP of no flow found here) or the reply
 * stage (a packet from a backend address). */
static __always_inline int process_full(struct xdp_md *ctx, struct packet *p, void *data_end,
					const __u8 fam)
{
	struct stage_state *st;
	struct flow_cache_entry *fc = NULL;
	struct flow_key fk = {};
	int to_vip, from_backend, rc, ports = -1;
	struct cpu_state *cs;
	__u32 gen, role;
	__u64 now;

	p->family = fam; /* a constant from here on */
	if (p->proto != PROTO_TCP && p->proto != PROTO_UDP) {
		/* No service is of another protocol: never the gateway's own (see below). */
		if (is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_VIP_UNSERVED, XDP_DROP);
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}

	/* The backend bitmap is only asked when the VIP one says no (or the new-flow stage finds no VIP):
	 * to_vip alone decides everything in between. Traffic that is none of ours stops here. */
	to_vip = filter_has(0, &p->dst, fam);
	from_backend = to_vip ? 0 : filter_has(1, &p->src, fam);
	if (!to_vip && !from_backend)
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);

	role = in_role(ctx);
	cs = cpu_state_get();
	now = now_gen(cs, &gen);
	if (p->l4)
		ports = parse_ports(data_end, p);
	if (ports == 0) {
		flow_key_of(&fk, p);
		if (to_vip)
			fc = flow_cache_slot(&fk);
	}
	/* The fast path: an established flow with a fresh record. */
	if (fc && !p->is_frag) {
		rc = flow_replay(ctx, p, data_end, fc, &fk, now, gen, role);
		if (rc >= 0)
			return rc;
	}

	if (p->l4) {
		if (ports < 0) {
			if (to_vip && is_vip_addr(&p->dst, fam))
				return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
			return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
		}
		if (fam == FAMILY_V6 && p->proto == PROTO_UDP &&
		    ((struct udphdr *)p->l4)->check == 0 && to_vip &&
		    is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_UDP6_ZERO_CSUM, XDP_DROP);
		/* A first fragment is remembered only once accepted: forward() or lb_reverse
		 * (frag.h). */
	} else if (frag_recall(p, now) < 0) {
		/* Non-first fragment of no datagram this gateway forwarded lately. */
		if (to_vip && is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_FRAG_UNKNOWN, XDP_DROP);
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}

	if (ports != 0) {
		/* A non-first fragment: its ports are known now. It skips the flow cache (it carries
		 * no TCP flags, so it never has to clear a slot as a SYN does): conntrack decides. */
		flow_key_of(&fk, p);
	}
	/* The next stages take the packet up from here (stage.h). */
	st = stage_get();
	if (!st)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	st->fk = fk;
	st->now = now;
	st->gen = gen;
	st->role = role;
	if (to_vip) {
		rc = lb_established(ctx, p, data_end, &fk, fc, st, now, gen, role, fam);
		if (rc >= 0)
			return rc;
		st->has_fc = fc != NULL;
		return stage_call(ctx, PROG_OF(fam, PROG_NEW4, PROG_NEW6));
	}
	return stage_call(ctx, PROG_OF(fam, PROG_REPLY4, PROG_REPLY6));
}

/* full_path is the program of family fam's full path (xlb_full4, xlb_full6): every packet the
 * fast path did not take. xlb_xdp sends IPv6 here to xlb_full6, everything else to xlb_full4
 * (non-IP and malformed packets get their verdicts there). */
static __always_inline int full_path(struct xdp_md *ctx, const __u8 fam)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct packet p = {};

	switch (parse_l3(data, data_end, &p)) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IP:
		return verdict(REASON_PASS_NOT_IP, XDP_PASS);
	case PARSE_IPV6_EXT:
		return verdict(REASON_PASS_IPV6_EXT, XDP_PASS);
	default:
		return verdict(REASON_PASS_MALFORMED_L3, XDP_PASS);
	}
	if (forged_carrier(ctx))
		return verdict(REASON_DROP_CARRIER_FORGED, XDP_DROP);
	if (p.family != fam) /* xlb_xdp read the same EtherType: never */
		return stage_call(ctx, PROG_OF(fam, PROG_FULL6, PROG_FULL4));
	if (p.proto == PROTO_ICMP || p.proto == PROTO_ICMPV6) {
		/* ICMP is rare: its own program, so this one stays small for the verifier. */
		bpf_tail_call(ctx, &progs, PROG_OF(fam, PROG_ICMP4, PROG_ICMP6));
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	}
	return process_full(ctx, &p, data_end, fam);
}

#endif
