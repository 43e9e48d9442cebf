/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp.h: ICMP and ICMPv6 for VIPs.
 * - Echo requests to a VIP address are answered by the gateway itself (XDP_TX), unless every
 *   frontend on the address has loadBalancerSourceRanges and none admits the client: then they
 *   are dropped (ECHO_RANGES_ID_BIT).
 * - Errors (destination unreachable incl. fragmentation needed, packet too big, time exceeded)
 *   quoting a packet of a VIP flow that this gateway knows are relayed: toward the flow's
 *   backend when they come from the client side (the quoted packet is VIP -> client), toward
 *   the client when they come from the cluster side (the quoted packet is client -> backend).
 *   The outer and the quoted headers are rewritten and all four checksums (outer IP, ICMP,
 *   quoted IP, quoted L4 when quoted) fixed. "Knows" is state, never a guess: the flow's
 *   conntrack entry (for this VIP, not expired, its backend the quoted one) or, for a TCP
 *   handshake, its handshake-table entry. An error about any other flow, or whose quote is too short
 *   to name one, is dropped: relayed, it would let anyone reset or slow a backend's connections
 *   (or, passed to the kernel, poison its path MTU cache) with errors about flows that do not
 *   exist. Source ranges apply to the flow's client, the quoted packet's destination (client
 *   side) or source (cluster side), not to the error's sender: that is any router on the path.
 *   A "fragmentation needed" below PMTU_MIN4 or a "packet too big" below PMTU_MIN6 is dropped:
 *   no real path is that narrow, and relayed it would make the backend send tiny segments.
 * Everything else ICMP passes to the host unchanged. Path MTU answers the gateway generates
 * itself are pmtu.h's. */
#ifndef XLB_ICMP_H
#define XLB_ICMP_H

#include "parse.h"
#include "csum.h"
#include "lb.h"
#include "hs.h"
#include "nat.h"
#include "fib.h"
#include "pmtu.h"

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
#define ICMP_L4_QUOTE 8 /* the bytes of the quoted L4 header every error carries (RFC 792) */

/* The least path MTU an error may advertise to be relayed: IPv4's 552 (RFC 1191's 576-byte
 * datagram less options, Linux's min_pmtu) and IPv6's minimum link MTU (RFC 8200). */
#define PMTU_MIN4 552
#define PMTU_MIN6 1280

/* parse_inner reads the packet quoted in ICMP error p: its IP header and the first ICMP_L4_QUOTE
 * bytes of TCP or UDP, all within the error's IP datagram (not an Ethernet trailer). */
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
	if (in->l4 + ICMP_L4_QUOTE > data_end || in->l4 + ICMP_L4_QUOTE > p->l3_end)
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

	/* Quoted port, and the quoted L4 checksum when the quote reaches it: the quote ends with the
	 * error's IP datagram, whatever trailer the frame has. */
	pf = (__be16 *)in->l4 + (inner_src ? 0 : 1);
	if ((void *)(pf + 1) > data_end)
		return;
	oldp = *pf;
	*pf = port;
	idiff = diff16(idiff, oldp, port);
	c = (__u16 *)(in->l4 + (in->proto == PROTO_TCP ? 16 : 6));
	if ((void *)(c + 1) <= data_end && (void *)(c + 1) <= p->l3_end) {
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

/* addr_allowed checks client address a against VIP (or echo ranges) id's source ranges. */
static __always_inline int addr_allowed(const struct addr *a, __u8 family, __u32 id)
{
	struct src_range_key k = { .prefixlen = 32 + (family == FAMILY_V6 ? 128 : 32),
				   .vip_id = bpf_htonl(id), .addr = *a };

	return bpf_map_lookup_elem(&src_ranges, &k) != NULL;
}

/* ptb_too_low reports whether error p advertises a path MTU below the floors. */
static __always_inline int ptb_too_low(struct packet *p)
{
	struct icmp_hdr *ic = p->l4;

	if (p->family == FAMILY_V4)
		return ic->type == ICMP_DEST_UNREACH && ic->code == ICMP_FRAG_NEEDED &&
		       bpf_ntohl(ic->rest) < PMTU_MIN4; /* the low 16 bits; the high ones unused */
	return ic->type == ICMPV6_PKT_TOOBIG && bpf_ntohl(ic->rest) < PMTU_MIN6;
}

/* flow_backend returns the backend of the flow fk (client -> VIP, of VIP vip_id) as this gateway
 * knows it: its conntrack entry (forward, this VIP's, not expired) or its handshake-table slot (a
 * TCP handshake, or a datagram flow's first datagram). NULL when it knows no such flow. */
static __always_inline struct backend *flow_backend(const struct flow_key *fk, __u32 vip_id,
						    __u64 now)
{
	struct ct_entry *ct = bpf_map_lookup_elem(&conntrack, fk);
	__u32 hash;

	if (ct && !(ct->flags & CT_F_REVERSE) && ct->vip_id == vip_id &&
	    elapsed(now, ct->last_seen) <= ct_timeout(fk->proto, ct->flags))
		return backend_get(ct->backend_id);
	/* A half-open connection (the backend its SYN went to), or a datagram flow that has sent
	 * one datagram (where it went). */
	hash = tuple_hash(fk);
	return backend_get((__u32)hs_probe(fk, hash, vip_id, now, (__u64)HS_MATCH_ANY << 32));
}

/* icmp_relay relays an ICMP error about a VIP flow; see the top of this file. */
static __always_inline int icmp_relay(struct xdp_md *ctx, struct packet *p, void *data_end)
{
	__u64 now = now_ns(cpu_state_get());
	struct inner in = {};
	struct svc_key *vip;
	struct backend *be;
	__be16 vport;

	if (parse_inner(p, data_end, &in) < 0)
		/* Too short to name a flow: to a VIP address, nothing of ours can use it. */
		return is_vip_addr(&p->dst, p->family) ? verdict(REASON_DROP_ICMP_UNKNOWN, XDP_DROP)
						       : verdict(REASON_PASS_ICMP, XDP_PASS);

	/* From the client side: quoted packet VIP:vport -> client:cport, outer dst the VIP. */
	if (filter_has(0, &in.src, p->family) &&
	    __builtin_memcmp(&in.src, &p->dst, sizeof(in.src)) == 0) {
		struct vip_info *vi = svc_lookup(&vips, &in.src, p->family, in.sport, in.proto);
		struct flow_key fk = { .src = in.dst, .dst = in.src, .sport = in.dport,
				       .dport = in.sport, .proto = in.proto, .family = p->family };
		__u32 role = in_role(ctx);

		/* Only what arrives from the client side (side.h). */
		if (role == ROLE_NONE)
			return verdict(REASON_DROP_NO_ROLE, XDP_DROP);
		if (role == ROLE_CLUSTER)
			return verdict(REASON_DROP_WRONG_SIDE, XDP_DROP);

		if (!vi || (vi->flags & VIP_F_MARKER)) {
			if (is_vip_addr(&p->dst, p->family))
				return verdict(REASON_DROP_ICMP_UNKNOWN, XDP_DROP);
			return verdict(REASON_PASS_ICMP, XDP_PASS);
		}
		if (ptb_too_low(p))
			return verdict(REASON_DROP_ICMP_PTB_LOW, XDP_DROP);
		if ((vi->flags & VIP_F_SRC_RANGES) && !addr_allowed(&in.dst, p->family, vi->id))
			return verdict(REASON_DROP_ICMP_SRC_RANGE, XDP_DROP);
		be = flow_backend(&fk, vi->id, now);
		if (!be)
			return verdict(REASON_DROP_ICMP_UNKNOWN, XDP_DROP);
		if (ttl_expiring(p, data_end))
			return verdict(REASON_PASS_TTL, XDP_PASS);
		icmp_rewrite(p, &in, data_end, 1, &be->addr, be->port ? be->port : in.sport);
		count_reason(REASON_ICMP_TO_BACKEND);
		return fib_forward(ctx, p, data_end, now, cache_gen());
	}

	/* From the cluster side: quoted packet client:cport -> backend:bport. */
	if (filter_has(1, &in.dst, p->family) &&
	    reverse_vip(&in.dst, &in.src, in.dport, in.sport, in.proto, p->family, now,
			&vip, &vport) >= 0) {
		struct flow_key fk = { .src = in.src, .dst = vip->addr, .sport = in.sport,
				       .dport = vport, .proto = in.proto, .family = p->family };
		struct vip_info *vi = svc_lookup(&vips, &vip->addr, p->family, vport, in.proto);
		__u32 role = in_role(ctx);
		struct hop h = {};
		int hop;

		/* Only what arrives from the cluster side: relayed to the client from the VIP, one
		 * from the client side would be a reflector (side.h). */
		if (role == ROLE_NONE)
			return verdict(REASON_DROP_NO_ROLE, XDP_DROP);
		if (role == ROLE_CLIENT)
			return verdict(REASON_DROP_REPLY_WRONG_SIDE, XDP_DROP);
		if (!vi || (vi->flags & VIP_F_MARKER))
			return verdict(REASON_DROP_ICMP_UNKNOWN, XDP_DROP);
		if (ptb_too_low(p))
			return verdict(REASON_DROP_ICMP_PTB_LOW, XDP_DROP);
		if ((vi->flags & VIP_F_SRC_RANGES) && !addr_allowed(&in.src, p->family, vi->id))
			return verdict(REASON_DROP_ICMP_SRC_RANGE, XDP_DROP);
		/* The flow must be known, and sent to the quoted backend endpoint. */
		be = flow_backend(&fk, vi->id, now);
		if (!be || !addr_eq(&be->addr, &in.dst) || (be->port ? be->port : vport) != in.dport)
			return verdict(REASON_DROP_ICMP_UNKNOWN, XDP_DROP);
		if (ttl_expiring(p, data_end))
			return verdict(REASON_PASS_TTL, XDP_PASS);
		/* An error about this host's own connection (e.g. a health probe) stays as it is. */
		hop = next_hop(ctx, p, data_end, now, cache_gen(), &h);
		if (hop == HOP_LOCAL)
			return verdict(REASON_PASS_LOCAL, XDP_PASS);
		icmp_rewrite(p, &in, data_end, 0, &vip->addr, vport);
		count_reason(REASON_ICMP_TO_CLIENT);
		return send_hop(ctx, p, data_end, hop, &h);
	}
	return verdict(REASON_PASS_ICMP, XDP_PASS);
}

/* echo_allowed says whether an echo request from p's source to its VIP address is answered: the
 * address's marker says whether source ranges apply, and under which id (ECHO_RANGES_ID_BIT). */
static __always_inline int echo_allowed(struct packet *p)
{
	struct svc_key k = { .addr = p->dst, .family = p->family };
	struct vip_info *mk = bpf_map_lookup_elem(&vips, &k);

	return !mk || !(mk->flags & VIP_F_SRC_RANGES) || addr_allowed(&p->src, p->family, mk->table_off);
}

/* icmp_echo handles an echo request: answered when it is to a VIP address from an admitted client,
 * dropped from another client, passed when it is to another address. */
static __always_inline int icmp_echo(struct packet *p, void *data_end)
{
	if (!is_vip_addr(&p->dst, p->family))
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	if (!echo_allowed(p))
		return verdict(REASON_DROP_ICMP_SRC_RANGE, XDP_DROP);
	return icmp_echo_reply(p, data_end);
}

static __always_inline int handle_icmp(struct xdp_md *ctx, struct packet *p, void *data_end)
{
	__u8 type;

	if (!p->l4 || p->is_frag || parse_ports(data_end, p) < 0)
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	type = *(__u8 *)p->l4;
	if (p->family == FAMILY_V4 && p->proto == PROTO_ICMP) {
		if (type == ICMP_ECHO)
			return icmp_echo(p, data_end);
		if (type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED)
			return icmp_relay(ctx, p, data_end);
	} else if (p->family == FAMILY_V6 && p->proto == PROTO_ICMPV6) {
		if (type == ICMPV6_ECHO_REQUEST)
			return icmp_echo(p, data_end);
		if (type == ICMPV6_DEST_UNREACH || type == ICMPV6_PKT_TOOBIG ||
		    type == ICMPV6_TIME_EXCEED)
			return icmp_relay(ctx, p, data_end);
	}
	return verdict(REASON_PASS_ICMP, XDP_PASS);
}

#endif
