/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_fast.h: the fast path of the entry program xlb_xdp: an established flow's packet replayed from its flow-cache record, a backend's reply, and traffic that is none of ours, each without leaving xlb_xdp. */
#ifndef XLB_STAGE_FAST_H
#define XLB_STAGE_FAST_H

/* flow_replay is the fast path: a packet whose tuple has a fresh record in this CPU's
 * flow_cache (what forward did to the flow's previous packet) gets the same counters, rewrite
 * and next hop, without a VIP, backend, conntrack or next-hop lookup and without computing a
 * checksum difference. Records live at most CT_REFRESH_NS after the conntrack read and never past
 * the next hop's expiry; the generation covers every change of VIPs, backends and attachments.
 * Whatever a record does not cover (a SYN, a flow's first FIN or RST, a VLAN tag, a fragment, a
 * longer packet, an expiring TTL, an IPv6 UDP datagram without checksum) returns -1: the full
 * path decides, as it does for a packet that arrived on an interface of another role than the
 * flow's first (role: side.h; the record's source passed the side checks on its own). */
static __always_inline int flow_replay(struct xdp_md *ctx, struct packet *p, void *data_end,
				       struct flow_cache_entry *fc, const struct flow_key *fk,
				       __u64 now, __u32 gen, __u32 role)
{
	/* A SYN is never replayed: asked before the record is read, so that a new connection's SYN
	 * (a tuple this CPU's cache has not seen) does not wait for the record's cache line. */
	if (p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN)
		return -1;
	if (!fc || !gen || fc->gen != gen || now >= fc->fast_until || !flow_key_eq(&fc->key, fk) ||
	    fc->in_role != role)
		return -1;
	if (p->vlan || p->is_frag || ip_len(p) > fc->mtu || ttl_expiring(p, data_end))
		return -1;
	if (p->proto == PROTO_TCP && (p->tcp_flags & (TH_FIN | TH_RST)) && !(fc->flags & CT_F_CLOSING))
		return -1;
	if (p->proto == PROTO_UDP && p->family == FAMILY_V6 &&
	    ((struct udphdr *)p->l4)->check == 0)
		return -1;
	if ((fc->vip_flags & VIP_F_SRC_RANGES) && !src_allowed(p, fc->vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	count_traffic(&vip_stats, fc->vip_id, p->pkt_len, 0);
	count_traffic(&backend_stats, fc->backend_id, p->pkt_len, 0);
	count_reason(REASON_NAT_FORWARD);
	nat_replay(p, data_end, &fc->to_addr, fc->to_port, fc->ip_diff, fc->l4_diff);
	return send_to(ctx, p, fc->ifindex, fc->smac, fc->dmac);
}
/* fast_process is process() for a packet fast_path parsed (its L4 header follows the IP header
 * directly; fam is a constant in each inlined copy), for the cases that need no more: traffic of
 * no VIP or backend address, a backend's reply, and a packet to a VIP that flow_replay takes. The
 * same checks in the same order. Returns -1 for the full path (a packet to a VIP that flow_replay
 * does not take, after reading flow_cache; a SYN before), having changed nothing the full path
 * reads but now_gen's per-CPU clock bookkeeping. */
static __always_inline int fast_process(struct xdp_md *ctx, struct packet *p, void *data_end,
					const __u8 fam)
{
	struct flow_cache_entry *fc;
	struct flow_key fk = {};
	struct cpu_state *cs;
	__u64 now;
	__u32 gen;
	int rc;

	p->family = fam;
	if (p->proto != PROTO_TCP && p->proto != PROTO_UDP)
		return -1;
	if (!filter_has(0, &p->dst, fam)) {
		if (!filter_has(1, &p->src, fam) || parse_ports(data_end, p))
			return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
		cs = cpu_state_get();
		now = now_gen(cs, &gen);
		rc = lb_reverse(ctx, p, data_end, now, gen, in_role(ctx));
		return rc >= 0 ? rc : verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}
	if (parse_ports(data_end, p) ||
	    (p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN))
		return -1;
	flow_key_of(&fk, p);
	fc = flow_cache_slot(&fk);
	cs = cpu_state_get();
	now = now_gen(cs, &gen);
	return flow_replay(ctx, p, data_end, fc, &fk, now, gen, in_role(ctx));
}

/* fast_path is tried on every packet before anything else. It parses only the common packet:
 * untagged, not fragmented, TCP or UDP right after an IPv4 header without options or an IPv6
 * header without extension headers, into a packet and a flow key that the compiler keeps in
 * registers (the full path's stay on its stack), and hands it to fast_process. Returns -1 for
 * anything else: the full path then decides. */
static __always_inline int fast_path(struct xdp_md *ctx, void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct packet p = {};

	if ((void *)(eth + 1) > data_end)
		return -1;
	p.eth = eth;
	p.pkt_len = data_end - data;
	if (eth->h_proto == ETH_P_IP_BE) {
		struct iphdr *iph = (void *)(eth + 1);
		__u32 tot;

		if ((void *)(iph + 1) > data_end || *(__u8 *)iph != IPV4_NO_OPTIONS ||
		    (iph->frag_off & (IP_MF_BE | IP_OFFSET_BE)))
			return -1;
		tot = be16_len(iph->tot_len);
		if (tot < sizeof(*iph) || (void *)iph + tot > data_end)
			return -1;
		p.l3 = iph;
		p.l3_end = (void *)iph + tot;
		p.l4 = iph + 1;
		p.proto = iph->protocol;
		p.src.w[0] = iph->saddr;
		p.dst.w[0] = iph->daddr;
		return fast_process(ctx, &p, data_end, FAMILY_V4);
	}
	if (eth->h_proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6 ||
		    (void *)(ip6 + 1) + be16_len(ip6->payload_len) > data_end)
			return -1;
		p.l3 = ip6;
		p.l3_end = (void *)(ip6 + 1) + be16_len(ip6->payload_len);
		p.l4 = ip6 + 1;
		p.proto = ip6->nexthdr;
		__builtin_memcpy(&p.src, &ip6->saddr, sizeof(p.src));
		__builtin_memcpy(&p.dst, &ip6->daddr, sizeof(p.dst));
		return fast_process(ctx, &p, data_end, FAMILY_V6);
	}
	return -1;
}

#endif
