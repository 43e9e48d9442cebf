/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp.h: the egress side for ICMP errors. An error the Pod (or the node, for the Pod) sends to
 * a client about one of the client's packets to the Pod - ICMP destination unreachable (with
 * fragmentation needed) and time exceeded, ICMPv6 destination unreachable, packet too big and
 * time exceeded - quotes the client -> Pod packet. When that is a recorded flow, the client
 * must see an error about its packet to the VIP: the quoted destination address and port become
 * the VIP and service port (the quoted IPv4 header checksum and the quoted TCP or UDP checksum,
 * when the quote holds it, updated), and the outer source becomes the VIP. The ICMP checksum
 * takes every change inside the message, and for ICMPv6 the pseudo-header's new source too. As
 * Only errors whose sender is the quoted Pod or the node itself (node_addrs) are rewritten. As
 * the gateway's ICMP relay does for the return path (xdp/gateway/bpf/icmp.h), without the relay: the
 * error leaves by the node's routing. Quotes with IPv6 extension headers or IPv4 non-first
 * fragments are left alone, as is every other ICMP message. */
#ifndef XLB_DSR_ICMP_H
#define XLB_DSR_ICMP_H

#include "reply.h"

/* The quoted packet of an ICMP error, as read before anything is written. */
struct quote {
	struct addr src;  /* the client */
	struct addr dst;  /* the Pod */
	__u32 l3;         /* offset of the quoted IP header */
	__u32 l4;         /* offset of the quoted L4 header */
	__be16 sport;
	__be16 dport;
	__u16 ip_check;   /* IPv4: the quoted header checksum */
	__u16 l4_check;   /* the quoted TCP or UDP checksum, when has_l4_check */
	__u8 proto;
	__u8 has_l4_check;
};

/* is_error reports whether an ICMP (v4 or v6 by family) type is one of the errors rewritten. */
static __always_inline int is_error(__u8 family, __u8 type)
{
	if (family == FAMILY_V4)
		return type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED;
	return type == ICMPV6_DEST_UNREACH || type == ICMPV6_PKT_TOOBIG ||
	       type == ICMPV6_TIME_EXCEED;
}

/* read_quote reads the packet quoted by the ICMP error at p->l4 into q; -1 when it is not a
 * TCP or UDP packet with its ports. */
static __always_inline int read_quote(struct __sk_buff *skb, const struct pkt *p, struct quote *q)
{
	__u32 coff;

	q->l3 = p->l4 + ICMP_HLEN;
	if (p->family == FAMILY_V4) {
		struct iphdr *ih = hdr(skb, q->l3, IPV4_HLEN);

		if (!ih || ih->version != 4 || ih->ihl < 5 ||
		    (bpf_ntohs(ih->frag_off) & IP_OFFSET))
			return -1;
		q->proto = ih->protocol;
		q->src.w[0] = ih->saddr;
		q->dst.w[0] = ih->daddr;
		q->ip_check = ih->check;
		q->l4 = q->l3 + ih->ihl * 4;
	} else {
		struct ipv6hdr *ih = hdr(skb, q->l3, IPV6_HLEN);

		if (!ih || ih->version != 6)
			return -1;
		q->proto = ih->nexthdr;
		__builtin_memcpy(&q->src, &ih->saddr, sizeof(q->src));
		__builtin_memcpy(&q->dst, &ih->daddr, sizeof(q->dst));
		q->l4 = q->l3 + IPV6_HLEN;
	}
	if (q->proto != PROTO_TCP && q->proto != PROTO_UDP)
		return -1;
	{
		__be16 *ports = hdr(skb, q->l4, 4);

		if (!ports)
			return -1;
		q->sport = ports[0];
		q->dport = ports[1];
	}
	coff = q->l4 + (q->proto == PROTO_TCP ? TCP_CSUM_OFF : UDP_CSUM_OFF);
	{
		__u16 *c = hdr(skb, coff, sizeof(*c));

		if (c) {
			q->l4_check = *c;
			q->has_l4_check = 1;
		}
	}
	return 0;
}

/* node_addr reports whether a is one of the node's own addresses (node_addrs). */
static __always_inline int node_addr(const struct addr *a, __u8 family)
{
	struct node_addr_key k = { .addr = *a, .family = family };

	return bpf_map_lookup_elem(&node_addrs, &k) != NULL;
}

/* icmp_error handles an ICMP or ICMPv6 packet p (not a fragment). */
static __always_inline int icmp_error(struct __sk_buff *skb, const struct pkt *p)
{
	struct quote q = {};
	struct flow_key k = {};
	struct flow_value *v;
	struct addr vip;
	__be16 vport;
	__u32 adiff, idiff;
	__u16 check;

	{
		__u8 *type = hdr(skb, p->l4, ICMP_HLEN);

		if (!type || !is_error(p->family, *type))
			return TC_ACT_OK;
	}
	if (read_quote(skb, p, &q) < 0)
		return TC_ACT_OK;
	/* An error to the client about its own packet. */
	if (!addr_eq(&q.src, &p->dst))
		return TC_ACT_OK;
	k.pod = q.dst;
	k.client = q.src;
	k.pod_port = q.dport;
	k.client_port = q.sport;
	k.proto = q.proto;
	k.family = p->family;
	v = lookup_flow(&k);
	if (!v || !live(v, q.proto, bpf_ktime_get_coarse_ns()))
		return TC_ACT_OK;
	/* Only the Pod the error is about, or the node (its stack about a packet to its Pod), may
	 * speak for the VIP: any other sender on the node (another Pod with NET_RAW) would make
	 * the client see an unreachable or a lowered path MTU from the VIP. */
	if (!addr_eq(&p->src, &q.dst) && !node_addr(&p->src, p->family))
		return verdict(STAT_ICMP_FOREIGN, TC_ACT_OK);
	vip = v->vip;
	vport = v->vip_port;

	/* The quoted destination, the quoted IPv4 header checksum. idiff sums every change
	 * inside the ICMP message (all at even offsets in it: the ICMP checksum takes them as
	 * they are stored). */
	adiff = diff_addr(0, &q.dst, &vip, p->family);
	idiff = adiff;
	if (p->family == FAMILY_V4) {
		check = csum_apply(q.ip_check, adiff);
		if (bpf_skb_store_bytes(skb, q.l3 + 16, &vip.w[0], 4, 0) < 0 ||
		    bpf_skb_store_bytes(skb, q.l3 + 10, &check, sizeof(check), 0) < 0)
			return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
		idiff = diff16(idiff, q.ip_check, check);
	} else if (bpf_skb_store_bytes(skb, q.l3 + 24, &vip, sizeof(vip), 0) < 0) {
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	}
	/* The quoted destination port and the quoted L4 checksum (address and port: the quoted
	 * pseudo-header and header). */
	if (bpf_skb_store_bytes(skb, q.l4 + 2, &vport, sizeof(vport), 0) < 0)
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	idiff = diff16(idiff, q.dport, vport);
	if (q.has_l4_check) {
		__u32 d = diff16(adiff, q.dport, vport);
		__u32 coff = q.l4 + (q.proto == PROTO_TCP ? TCP_CSUM_OFF : UDP_CSUM_OFF);

		check = q.proto == PROTO_TCP ? csum_apply(q.l4_check, d) : csum_apply_udp(q.l4_check, d);
		if (bpf_skb_store_bytes(skb, coff, &check, sizeof(check), 0) < 0)
			return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
		idiff = diff16(idiff, q.l4_check, check);
	}
	/* The outer source and the ICMP checksum. */
	if (p->family == FAMILY_V4) {
		if (set_src4(skb, p, vip.w[0], 0, 0) < 0 ||
		    bpf_l4_csum_replace(skb, p->l4 + 2, 0, idiff, 0) < 0)
			return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	} else if (set_src6(skb, &p->src, &vip, p->l4 + 2, 0) < 0 ||
		   bpf_l4_csum_replace(skb, p->l4 + 2, 0, idiff, 0) < 0) {
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	}
	return verdict(STAT_ICMP_REWRITTEN, TC_ACT_OK);
}

#endif
