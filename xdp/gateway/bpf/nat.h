/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nat.h: rewriting one endpoint (address + port) of a packet, with the IP, TCP and UDP
 * checksums updated incrementally, and the TTL / hop-limit decrement of a forwarding hop. */
#ifndef XLB_NAT_H
#define XLB_NAT_H

#include <bpf/bpf_endian.h>
#include "parse.h"
#include "csum.h"

/* ttl_expiring says whether forwarding would take the TTL/hop limit to 0. */
static __always_inline int ttl_expiring(struct packet *p, void *data_end)
{
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;

		return (void *)(iph + 1) > data_end || iph->ttl <= 1;
	} else {
		struct ipv6hdr *ip6 = p->l3;

		return (void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1;
	}
}

/* ttl_restore undoes the TTL / hop-limit decrement of rewrite_endpoint (for packets handed to
 * the kernel, which decrements it itself when it forwards them). */
static __always_inline void ttl_restore(struct packet *p, void *data_end)
{
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;
		__u16 *ttlw = (__u16 *)&iph->ttl;
		__u16 old;

		if ((void *)(iph + 1) > data_end)
			return;
		old = *ttlw;
		iph->ttl++;
		iph->check = csum_apply(iph->check, diff16(0, old, *ttlw));
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return;
		ip6->hop_limit++;
	}
}

/* rewrite_endpoint sets the source (src != 0) or destination endpoint of p to (a, port),
 * decrements the TTL, and fixes every checksum. port 0 keeps the port. A non-first fragment
 * (p->l4 == NULL) only has its IP header rewritten: its L4 checksum lives in the first one. */
static __always_inline void rewrite_endpoint(struct packet *p, void *data_end, int src,
					     const struct addr *a, __be16 port)
{
	__u32 diff = 0;

	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;
		__be32 *field = src ? &iph->saddr : &iph->daddr;
		__u16 *ttlw = (__u16 *)&iph->ttl;
		__u16 old_ttlw;

		if ((void *)(iph + 1) > data_end)
			return;
		old_ttlw = *ttlw;
		diff = diff32(0, *field, a->w[0]);
		*field = a->w[0];
		iph->ttl--;
		iph->check = csum_apply(iph->check, diff16(diff, old_ttlw, *ttlw));
	} else {
		struct ipv6hdr *ip6 = p->l3;
		struct addr *field = (struct addr *)(src ? &ip6->saddr : &ip6->daddr);

		if ((void *)(ip6 + 1) > data_end)
			return;
		diff = diff_addr(0, field, a, FAMILY_V6);
		*field = *a;
		ip6->hop_limit--;
	}
	if (src)
		p->src = *a;
	else
		p->dst = *a;

	if (!p->l4)
		return;
	if (!port)
		port = src ? p->sport : p->dport;
	if (p->proto == PROTO_TCP) {
		struct tcphdr *th = p->l4;
		__be16 *pf = src ? &th->source : &th->dest;

		if ((void *)(th + 1) > data_end)
			return;
		diff = diff16(diff, *pf, port);
		*pf = port;
		th->check = csum_apply(th->check, diff);
	} else if (p->proto == PROTO_UDP) {
		struct udphdr *uh = p->l4;
		__be16 *pf = src ? &uh->source : &uh->dest;

		if ((void *)(uh + 1) > data_end)
			return;
		diff = diff16(diff, *pf, port);
		*pf = port;
		uh->check = csum_apply_udp(uh->check, diff);
	}
	if (src)
		p->sport = port;
	else
		p->dport = port;
}

/* TTL_DEC_DIFF is the checksum difference of decrementing a TTL (or hop limit) of at least 1:
 * the word {ttl, protocol}, loaded as stored, goes from x to x - d, where d is 0x0100 in network
 * order, and ~x + (x - d) = 0xffff - d, whatever x is: 0xfeff in network order (0xfffe as a
 * little-endian load). */
#define TTL_DEC_DIFF bpf_htons(0xfeff)

/* dnat_diffs computes the checksum differences of rewriting a destination endpoint from
 * (from, fport) to (to, tport) and decrementing the TTL, accumulated exactly as rewrite_endpoint
 * accumulates them: *ip_diff for the IPv4 header (address and TTL), *l4_diff for TCP or UDP
 * (address and port). They depend only on the flow, so nat_replay can apply them to every later
 * packet of it. */
static __always_inline void dnat_diffs(const struct addr *from, __be16 fport,
				       const struct addr *to, __be16 tport, __u8 family,
				       __u32 *ip_diff, __u32 *l4_diff)
{
	__u32 diff = diff_addr(0, from, to, family);

	*ip_diff = csum_add(diff, TTL_DEC_DIFF);
	*l4_diff = diff16(diff, fport, tport);
}

/* nat_replay rewrites p's destination to (to, tport), decrements the TTL and updates both
 * checksums by the differences dnat_diffs computed for its flow: what rewrite_endpoint does to a
 * whole TCP/UDP packet, byte for byte, without computing anything. */
static __always_inline void nat_replay(struct packet *p, void *data_end, const struct addr *to,
				       __be16 tport, __u32 ip_diff, __u32 l4_diff)
{
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > data_end)
			return;
		iph->daddr = to->w[0];
		iph->ttl--;
		iph->check = csum_apply(iph->check, ip_diff);
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return;
		__builtin_memcpy(&ip6->daddr, to, sizeof(*to));
		ip6->hop_limit--;
	}
	if (p->proto == PROTO_TCP) {
		struct tcphdr *th = p->l4;

		if ((void *)(th + 1) > data_end)
			return;
		th->dest = tport;
		th->check = csum_apply(th->check, l4_diff);
	} else {
		struct udphdr *uh = p->l4;

		if ((void *)(uh + 1) > data_end)
			return;
		uh->dest = tport;
		uh->check = csum_apply_udp(uh->check, l4_diff);
	}
}

#endif
