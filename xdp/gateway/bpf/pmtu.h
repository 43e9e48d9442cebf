/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* pmtu.h: path MTU discovery through the gateway. A packet the gateway would send on a link whose
 * MTU it exceeds (bpf_fib_lookup says "fragmentation needed"; next_hop's HOP_TOO_BIG) and that
 * may not be fragmented (IPv4 with DF, or IPv6) is answered with an ICMP "too big" its sender can
 * use, instead of being handed to the kernel, whose own ICMP would be lost:
 *   - a client's packet to a VIP, DNATed to its backend (forward()): the client is told, from the
 *     VIP, quoting the packet as the client sent it (destination VIP:port, its TTL given back),
 *     as Katran and Cilium do: the kernel's ICMP would quote the backend's address, which no
 *     socket of the client's knows;
 *   - a backend's reply (lb_reverse), before it is rewritten to come from the VIP: the backend
 *     is told, from the gateway's own address on the way back to it (bpf_fib_lookup's source
 *     address; the VIP if there is none), quoting the reply as the backend sent it: the kernel's
 *     ICMP would quote the rewritten reply (from the VIP) and go to the VIP, i.e. to itself.
 * An IPv4 packet without DF goes to the kernel, which fragments it. The answer leaves by the
 * interface the packet came in on (XDP_TX, MACs swapped), as a router answers its previous hop.
 * Direct server return's carrier uses the same builders (dsr.h). */
#ifndef XLB_PMTU_H
#define XLB_PMTU_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parse.h"
#include "csum.h"
#include "stats.h"

#define IP_DF_BE 0x0040 /* htons(0x4000): don't fragment */
#define ICMP_FRAG_NEEDED 4
#define ICMP_QUOTE 28   /* the quoted IPv4 header and 8 bytes of L4 */
#define ICMP6_QUOTE 48  /* the quoted IPv6 header and 8 bytes of L4 */
#define ICMP_REPLY_TTL 64
#define ETH_HDR_LEN 14  /* the answers are built only for untagged frames */

/* ip4_csum is the IPv4 header checksum of the 20 + opt bytes at h (opt a constant). */
static __always_inline __u16 ip4_csum(const __u16 *h, const int words)
{
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < words; i++)
		if (i != 5) /* the checksum field itself */
			sum += h[i];
	return ~csum_fold(sum);
}

/* csum_bytes adds n bytes at b (n even, a constant) to a ones'-complement sum. */
static __always_inline __u32 csum_bytes(__u32 sum, const void *b, const int n)
{
	const __u16 *w = b;

#pragma unroll
	for (int i = 0; i < n / 2; i++)
		sum += w[i];
	return sum;
}

/* too_big4 turns the IPv4 packet in ctx (l2 bytes of L2 header, an IP header without options,
 * 8 bytes of L4 at least) into the ICMP "fragmentation needed" its sender gets: from `from`,
 * advertising mtu, quoting the packet's first ICMP_QUOTE bytes, sent back out of the interface it
 * came in on. With vip set (a DNATed packet), the quote is the packet as the client sent it: its
 * destination vip:vport again (the UDP checksum too; TCP's is not quoted), its TTL given back.
 * Returns the verdict (counted as reason), or -1 when the frame is too short (unchanged). */
static __always_inline int too_big4(struct xdp_md *ctx, const int l2, __be32 from,
				    const struct addr *vip, __be16 vport, __u16 mtu, __u32 reason)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + l2;
	__u8 quote[ICMP_QUOTE];
	__u8 mac[ETH_ALEN];
	struct iphdr *q = (struct iphdr *)quote;
	__be16 *ports = (__be16 *)(quote + sizeof(*q));
	struct icmp_hdr *ic;
	__be32 sender;
	__u32 sum, diff;

	if (data + l2 + ICMP_QUOTE > data_end || (void *)(iph + 1) > data_end)
		return -1;
	__builtin_memcpy(quote, iph, ICMP_QUOTE);
	sender = iph->saddr;
	if (vip) {
		diff = diff32(0, q->daddr, vip->w[0]);
		diff = diff16(diff, ports[1], vport);
		if (q->protocol == PROTO_UDP)
			ports[3] = csum_apply_udp(ports[3], diff);
		ports[1] = vport;
		q->daddr = vip->w[0];
		q->ttl++;
		q->check = ip4_csum((__u16 *)q, sizeof(*q) / 2);
	}

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	iph->version = 4;
	iph->ihl = 5;
	iph->tos = 0;
	iph->tot_len = bpf_htons(sizeof(*iph) + sizeof(*ic) + ICMP_QUOTE);
	iph->id = 0;
	iph->frag_off = 0;
	iph->ttl = ICMP_REPLY_TTL;
	iph->protocol = PROTO_ICMP;
	iph->saddr = from;
	iph->daddr = sender;
	iph->check = ip4_csum((__u16 *)iph, sizeof(*iph) / 2);
	ic = (struct icmp_hdr *)(iph + 1);
	if ((void *)(ic + 1) + ICMP_QUOTE > data_end)
		return -1;
	ic->type = ICMP_DEST_UNREACH;
	ic->code = ICMP_FRAG_NEEDED;
	ic->checksum = 0;
	ic->rest = bpf_htonl(mtu); /* unused (16 bits), next-hop MTU (16 bits) */
	__builtin_memcpy(ic + 1, quote, ICMP_QUOTE);
	sum = csum_bytes(0, ic, sizeof(*ic) + ICMP_QUOTE);
	ic->checksum = ~csum_fold(sum);
	if (bpf_xdp_adjust_tail(ctx, (int)(l2 + sizeof(*iph) + sizeof(*ic) + ICMP_QUOTE) -
				     (int)(data_end - data)))
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	return verdict(reason, XDP_TX);
}

/* too_big6 is too_big4 for IPv6 (an ICMPv6 "packet too big"; the L4 header must follow the
 * fixed header). */
static __always_inline int too_big6(struct xdp_md *ctx, const int l2, const struct addr *from,
				    const struct addr *vip, __be16 vport, __u32 mtu, __u32 reason)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + l2;
	__u8 quote[ICMP6_QUOTE];
	__u8 mac[ETH_ALEN];
	struct ipv6hdr *q = (struct ipv6hdr *)quote;
	__be16 *ports = (__be16 *)(quote + sizeof(*q));
	struct icmp_hdr *ic;
	struct addr sender, src = *from;
	__u32 sum, diff;
	__be32 len = bpf_htonl(sizeof(*ic) + ICMP6_QUOTE);

	if (data + l2 + ICMP6_QUOTE > data_end || (void *)(ip6 + 1) > data_end)
		return -1;
	__builtin_memcpy(quote, ip6, ICMP6_QUOTE);
	__builtin_memcpy(&sender, &ip6->saddr, sizeof(sender));
	if (vip) {
		diff = diff_addr(0, (struct addr *)&q->daddr, vip, FAMILY_V6);
		diff = diff16(diff, ports[1], vport);
		if (q->nexthdr == PROTO_UDP)
			ports[3] = csum_apply(ports[3], diff);
		ports[1] = vport;
		__builtin_memcpy(&q->daddr, vip, sizeof(*vip));
		q->hop_limit++;
	}

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	*(__be32 *)ip6 = bpf_htonl(0x60000000); /* version 6, no traffic class, no flow label */
	ip6->payload_len = bpf_htons(sizeof(*ic) + ICMP6_QUOTE);
	ip6->nexthdr = PROTO_ICMPV6;
	ip6->hop_limit = ICMP_REPLY_TTL;
	__builtin_memcpy(&ip6->saddr, &src, sizeof(src));
	__builtin_memcpy(&ip6->daddr, &sender, sizeof(sender));
	ic = (struct icmp_hdr *)(ip6 + 1);
	if ((void *)(ic + 1) + ICMP6_QUOTE > data_end)
		return -1;
	ic->type = ICMPV6_PKT_TOOBIG;
	ic->code = 0;
	ic->checksum = 0;
	ic->rest = bpf_htonl(mtu);
	__builtin_memcpy(ic + 1, quote, ICMP6_QUOTE);
	/* The pseudo-header: both addresses, the upper-layer length, the next header. */
	sum = csum_bytes(0, &ip6->saddr, 32);
	sum = csum_bytes(sum, &len, sizeof(len));
	sum += bpf_htons(PROTO_ICMPV6);
	sum = csum_bytes(sum, ic, sizeof(*ic) + ICMP6_QUOTE);
	ic->checksum = ~csum_fold(sum);
	if (bpf_xdp_adjust_tail(ctx, (int)(l2 + sizeof(*ip6) + sizeof(*ic) + ICMP6_QUOTE) -
				     (int)(data_end - data)))
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	return verdict(reason, XDP_TX);
}

/* too_big_call hands p, which next_hop found longer than the egress MTU mtu, to the program that
 * answers its sender (PROG_TOO_BIG_CLIENT for a DNATed packet of frontend vip:vport,
 * PROG_TOO_BIG_BACKEND for a backend's reply of that frontend, not yet rewritten), when it may not
 * be fragmented and has the shape the answer quotes: untagged, not a fragment, an IPv4 header
 * without options or TCP/UDP right after the IPv6 header. Returns -1 when it does not: the caller
 * then hands the packet to the kernel, as before. A failed tail call (the program missing from
 * progs) returns XDP_PASS: the caller must not touch the packet after it, since some kernels'
 * verifiers (Debian 12's 6.12) take every packet pointer for invalid after a tail call. */
static __always_inline int too_big_call(struct xdp_md *ctx, struct packet *p, void *data_end,
					 const struct addr *vip, __be16 vport, __u16 mtu,
					 const __u32 prog)
{
	__u32 zero = 0;
	struct dsr_meta *m;

	if (p->vlan || p->is_frag || !p->l4 || (void *)p->eth + ETH_HDR_LEN != p->l3)
		return -1;
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > data_end || iph->ihl != 5 || !(iph->frag_off & IP_DF_BE))
			return -1;
	} else if (p->l4 != p->l3 + sizeof(struct ipv6hdr)) {
		return -1;
	}
	m = bpf_map_lookup_elem(&dsr_scratch, &zero);
	if (!m)
		return -1;
	m->vip = *vip;
	m->vport = vport;
	m->family = p->family;
	m->mtu = mtu;
	bpf_tail_call(ctx, &progs, prog);
	return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
}

/* gateway_addr finds this host's address toward dst (the preferred source of its route). */
static __always_inline int gateway_addr(struct xdp_md *ctx, const struct addr *dst, __u8 family,
					struct addr *out)
{
	struct bpf_fib_lookup fib;
	long rc;

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.ifindex = ctx->ingress_ifindex;
	if (family == FAMILY_V4) {
		fib.family = 2; /* AF_INET */
		fib.ipv4_dst = dst->w[0];
	} else {
		fib.family = 10; /* AF_INET6 */
		__builtin_memcpy(fib.ipv6_dst, dst, sizeof(fib.ipv6_dst));
	}
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC | BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	__builtin_memset(out, 0, sizeof(*out));
	if (family == FAMILY_V4)
		out->w[0] = fib.ipv4_src;
	else
		__builtin_memcpy(out, fib.ipv6_src, sizeof(*out));
	return out->w[0] || out->w[1] || out->w[2] || out->w[3] ? 0 : -1;
}

/* too_big answers the packet in ctx as too_big_call arranged: to_client for a DNATed packet
 * (from the VIP, the quote restored), else a backend's reply (from this host's address toward
 * the backend, the quote as it is). */
static __always_inline int too_big(struct xdp_md *ctx, const int to_client)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct packet p = {};
	struct addr from;
	struct dsr_meta *m;
	__u32 zero = 0;
	int rc;

	m = bpf_map_lookup_elem(&dsr_scratch, &zero);
	if (parse_l3(data, data_end, &p) != PARSE_OK || !m || m->family != p.family || p.vlan)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	from = m->vip;
	if (!to_client && gateway_addr(ctx, &p.src, p.family, &from) < 0)
		from = m->vip;
	if (p.family == FAMILY_V4)
		rc = too_big4(ctx, ETH_HDR_LEN, from.w[0], to_client ? &m->vip : NULL, m->vport,
			      m->mtu, to_client ? REASON_ICMP_TOO_BIG_CLIENT :
						  REASON_ICMP_TOO_BIG_BACKEND);
	else
		rc = too_big6(ctx, ETH_HDR_LEN, &from, to_client ? &m->vip : NULL, m->vport, m->mtu,
			      to_client ? REASON_ICMP_TOO_BIG_CLIENT : REASON_ICMP_TOO_BIG_BACKEND);
	if (rc < 0)
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	return rc;
}

#endif
