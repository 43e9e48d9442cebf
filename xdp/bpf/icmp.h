/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp.h: ICMP and ICMPv6 for VIPs.
 * - Echo requests to a VIP address are answered by the gateway itself (XDP_TX).
 * - Errors (destination unreachable incl. fragmentation needed, packet too big, time exceeded)
 *   quoting a packet of a VIP flow are relayed: toward the flow's backend when they come from
 *   the client side (the quoted packet is VIP -> client), toward the client when they come from
 *   the cluster side (the quoted packet is client -> backend). The outer and the quoted headers
 *   are rewritten and all four checksums (outer IP, ICMP, quoted IP, quoted L4) fixed.
 * Everything else ICMP passes to the host unchanged. */
#ifndef XLB_ICMP_H
#define XLB_ICMP_H

#include "parse.h"
#include "csum.h"
#include "lb.h"
#include "nat.h"
#include "fib.h"

/* The packet quoted inside an ICMP error. */
struct inner {
	void *l3;
	void *l4;
	struct addr src;
	struct addr dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
};

#define ICMP_HDR_LEN 8

static __always_inline int parse_inner(struct packet *p, void *data_end, struct inner *in)
{
	void *l3 = p->l4 + ICMP_HDR_LEN;

	if (p->family == FAMILY_V4) {
		struct iphdr *ih = l3;

		if ((void *)(ih + 1) > data_end)
			return -1;
		if (ih->version != 4 || ih->ihl < 5 || (ih->frag_off & IP_OFFSET_BE))
			return -1;
		in->proto = ih->protocol;
		in->src.w[0] = ih->saddr;
		in->dst.w[0] = ih->daddr;
		in->l4 = l3 + ih->ihl * 4;
	} else {
		struct ipv6hdr *ih = l3;

		if ((void *)(ih + 1) > data_end)
			return -1;
		in->proto = ih->nexthdr;
		__builtin_memcpy(&in->src, &ih->saddr, sizeof(in->src));
		__builtin_memcpy(&in->dst, &ih->daddr, sizeof(in->dst));
		in->l4 = ih + 1;
	}
	if (in->proto != PROTO_TCP && in->proto != PROTO_UDP)
		return -1;
	if (in->l4 + 4 > data_end)
		return -1;
	in->l3 = l3;
	in->sport = ((__be16 *)in->l4)[0];
	in->dport = ((__be16 *)in->l4)[1];
	return 0;
}

/* icmp_rewrite sets the quoted packet's source (inner_src) or destination endpoint to (a, port)
 * and the mirrored outer address (outer destination for the quoted source, outer source for the
 * quoted destination) to a as well, when it held the old address or inner_src is set. */
static __always_inline void icmp_rewrite(struct packet *p, struct inner *in, void *data_end,
					 int inner_src, const struct addr *a, __be16 port)
{
	__u32 adiff, idiff, odiff = 0;
	__be16 *pf, oldp;
	__u16 *c, oldc;
	struct addr old = inner_src ? in->src : in->dst;

	/* Quoted IP header. */
	if (p->family == FAMILY_V4) {
		struct iphdr *ih = in->l3;
		__be32 *f = inner_src ? &ih->saddr : &ih->daddr;

		if ((void *)(ih + 1) > data_end)
			return;
		adiff = diff32(0, *f, a->w[0]);
		*f = a->w[0];
		oldc = ih->check;
		ih->check = csum_apply(oldc, adiff);
		idiff = diff16(adiff, oldc, ih->check);
	} else {
		struct ipv6hdr *ih = in->l3;
		struct addr *f = (struct addr *)(inner_src ? &ih->saddr : &ih->daddr);

		if ((void *)(ih + 1) > data_end)
			return;
		adiff = diff_addr(0, f, a, FAMILY_V6);
		*f = *a;
		idiff = adiff;
	}

	/* Quoted port, and the quoted L4 checksum when the quote reaches it. */
	pf = (__be16 *)in->l4 + (inner_src ? 0 : 1);
	if ((void *)(pf + 1) > data_end)
		return;
	oldp = *pf;
	*pf = port;
	idiff = diff16(idiff, oldp, port);
	c = (__u16 *)(in->l4 + (in->proto == PROTO_TCP ? 16 : 6));
	if ((void *)(c + 1) <= data_end) {
		oldc = *c;
		if (in->proto == PROTO_TCP)
			*c = csum_apply(oldc, diff16(adiff, oldp, port));
		else
			*c = csum_apply_udp(oldc, diff16(adiff, oldp, port));
		idiff = diff16(idiff, oldc, *c);
	}

	/* Outer IP header and the ICMP checksum. */
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;
		struct icmp_hdr *ic = p->l4;
		__be32 *of = inner_src ? &iph->daddr : &iph->saddr;
		__u16 *ttlw = (__u16 *)&iph->ttl;
		__u16 old_ttlw;

		if ((void *)(iph + 1) > data_end || (void *)(ic + 1) > data_end)
			return;
		old_ttlw = *ttlw;
		if (inner_src || *of == old.w[0]) {
			odiff = diff32(0, *of, a->w[0]);
			*of = a->w[0];
		}
		iph->ttl--;
		iph->check = csum_apply(iph->check, diff16(odiff, old_ttlw, *ttlw));
		ic->checksum = csum_apply(ic->checksum, idiff);
		if (inner_src)
			p->dst.w[0] = a->w[0];
		else if (odiff)
			p->src.w[0] = a->w[0];
	} else {
		struct ipv6hdr *ip6 = p->l3;
		struct icmp_hdr *ic = p->l4;
		struct addr *of = (struct addr *)(inner_src ? &ip6->daddr : &ip6->saddr);
		int outer;

		if ((void *)(ip6 + 1) > data_end || (void *)(ic + 1) > data_end)
			return;
		outer = inner_src || (of->w[0] == old.w[0] && of->w[1] == old.w[1] &&
				      of->w[2] == old.w[2] && of->w[3] == old.w[3]);
		if (outer) {
			odiff = diff_addr(0, of, a, FAMILY_V6);
			*of = *a;
			if (inner_src)
				p->dst = *a;
			else
				p->src = *a;
		}
		ip6->hop_limit--;
		/* The ICMPv6 checksum covers the pseudo-header: the outer address change too. */
		ic->checksum = csum_apply(ic->checksum, csum_add(idiff, odiff));
	}
}

/* icmp_echo_reply turns an echo request into the reply, in place, and sends it back. */
static __always_inline int icmp_echo_reply(struct packet *p, void *data_end)
{
	__u8 mac[ETH_ALEN];

	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;
		struct icmp_hdr *ic = p->l4;
		__u16 *ttlw = (__u16 *)&iph->ttl, old_ttlw, oldt;
		__be32 a;

		if ((void *)(iph + 1) > data_end || (void *)(ic + 1) > data_end)
			return verdict(REASON_PASS_ICMP, XDP_PASS);
		old_ttlw = *ttlw;
		a = iph->saddr;
		iph->saddr = iph->daddr;
		iph->daddr = a;
		iph->ttl = ECHO_REPLY_TTL;
		iph->check = csum_apply(iph->check, diff16(0, old_ttlw, *ttlw));
		oldt = *(__u16 *)ic;
		ic->type = ICMP_ECHOREPLY;
		ic->checksum = csum_apply(ic->checksum, diff16(0, oldt, *(__u16 *)ic));
	} else {
		struct ipv6hdr *ip6 = p->l3;
		struct icmp_hdr *ic = p->l4;
		struct in6_addr a;
		__u16 oldt;

		if ((void *)(ip6 + 1) > data_end || (void *)(ic + 1) > data_end)
			return verdict(REASON_PASS_ICMP, XDP_PASS);
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->hop_limit = ECHO_REPLY_TTL;
		oldt = *(__u16 *)ic;
		ic->type = ICMPV6_ECHO_REPLY;
		ic->checksum = csum_apply(ic->checksum, diff16(0, oldt, *(__u16 *)ic));
	}
	__builtin_memcpy(mac, p->eth->h_source, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, p->eth->h_dest, ETH_ALEN);
	__builtin_memcpy(p->eth->h_dest, mac, ETH_ALEN);
	return verdict(REASON_ICMP_ECHO_REPLY, XDP_TX);
}

/* icmp_relay relays an ICMP error about a VIP flow; see the top of this file. */
static __always_inline int icmp_relay(struct xdp_md *ctx, struct packet *p, void *data_end)
{
	struct inner in = {};
	struct svc_key *vip;
	__be16 vport;

	if (parse_inner(p, data_end, &in) < 0)
		return verdict(REASON_PASS_ICMP, XDP_PASS);

	/* From the client side: quoted packet VIP:vport -> client:cport, outer dst the VIP. */
	if (filter_has(0, &in.src, p->family) &&
	    __builtin_memcmp(&in.src, &p->dst, sizeof(in.src)) == 0) {
		struct vip_info *vi = svc_lookup(&vips, &in.src, p->family, in.sport, in.proto);
		struct flow_key fk = { .src = in.dst, .dst = in.src, .sport = in.dport,
				       .dport = in.sport, .proto = in.proto, .family = p->family };
		struct backend *be = NULL;
		struct ct_entry *ct;

		if (!vi || (vi->flags & VIP_F_MARKER))
			return verdict(REASON_PASS_ICMP, XDP_PASS);
		ct = bpf_map_lookup_elem(&conntrack, &fk);
		if (ct)
			be = backend_get(ct->backend_id);
		if (!be && in.proto == PROTO_TCP)
			/* A half-open connection: the backend its SYN went to. */
			be = backend_get(hs_backend(bpf_map_lookup_elem(&handshakes, &fk), vi->id,
						    bpf_ktime_get_coarse_ns(), HS_MATCH_ANY, 0));
		if (!be) {
			__u32 h = flow_hash(cfg_hash_seed, &in.dst, p->family, in.dport, in.sport,
					    in.proto, vi->flags & VIP_F_AFFINITY_CLIENTIP);

			be = backend_get(maglev_pick(vi, h));
		}
		if (!be)
			return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
		if (ttl_expiring(p, data_end))
			return verdict(REASON_PASS_TTL, XDP_PASS);
		icmp_rewrite(p, &in, data_end, 1, &be->addr, be->port ? be->port : in.sport);
		count_reason(REASON_ICMP_TO_BACKEND);
		return fib_forward(ctx, p, data_end, bpf_ktime_get_coarse_ns(), cache_gen());
	}

	/* From the cluster side: quoted packet client:cport -> backend:bport. */
	if (filter_has(1, &in.dst, p->family) &&
	    reverse_vip(&in.dst, &in.src, in.dport, in.sport, in.proto, p->family,
			&vip, &vport) >= 0) {
		struct hop h = {};
		int hop;

		if (ttl_expiring(p, data_end))
			return verdict(REASON_PASS_TTL, XDP_PASS);
		/* An error about this host's own connection (e.g. a health probe) stays as it is. */
		hop = next_hop(ctx, p, data_end, bpf_ktime_get_coarse_ns(), cache_gen(), &h);
		if (hop == HOP_LOCAL)
			return verdict(REASON_PASS_LOCAL, XDP_PASS);
		icmp_rewrite(p, &in, data_end, 0, &vip->addr, vport);
		count_reason(REASON_ICMP_TO_CLIENT);
		return send_hop(ctx, p, data_end, hop, &h);
	}
	return verdict(REASON_PASS_ICMP, XDP_PASS);
}

static __always_inline int handle_icmp(struct xdp_md *ctx, struct packet *p, void *data_end)
{
	__u8 type;

	if (!p->l4 || p->is_frag || parse_ports(data_end, p) < 0)
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	type = *(__u8 *)p->l4;
	if (p->family == FAMILY_V4 && p->proto == PROTO_ICMP) {
		if (type == ICMP_ECHO)
			return is_vip_addr(&p->dst, p->family) ? icmp_echo_reply(p, data_end)
							       : verdict(REASON_PASS_ICMP, XDP_PASS);
		if (type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED)
			return icmp_relay(ctx, p, data_end);
	} else if (p->family == FAMILY_V6 && p->proto == PROTO_ICMPV6) {
		if (type == ICMPV6_ECHO_REQUEST)
			return is_vip_addr(&p->dst, p->family) ? icmp_echo_reply(p, data_end)
							       : verdict(REASON_PASS_ICMP, XDP_PASS);
		if (type == ICMPV6_DEST_UNREACH || type == ICMPV6_PKT_TOOBIG ||
		    type == ICMPV6_TIME_EXCEED)
			return icmp_relay(ctx, p, data_end);
	}
	return verdict(REASON_PASS_ICMP, XDP_PASS);
}

#endif
