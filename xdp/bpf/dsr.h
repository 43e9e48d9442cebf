/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* dsr.h: the gateway's half of direct server return. A packet that forward() DNATed to a backend
 * whose node serves direct server return (BACKEND_F_DSR), and that opens a flow here (no
 * conntrack entry: a SYN, a first datagram, a flow ECMP moved to this gateway), carries its
 * frontend (VIP and port) to the node: an IPv4 option or an IPv6 Destination Options header
 * (datapath.h), inserted right after the IP header. Established flows carry nothing: the node
 * knows them. A packet the carrier would not fit on (its next hop's MTU) goes without it, but a
 * UDP datagram that cannot be fragmented on the way (IPv6, or IPv4 with DF) is answered with an
 * ICMP "too big" for the MTU less the carrier, from the VIP and quoting the datagram as the
 * client sent it, so the client sends smaller ones; a TCP segment of a flow without conntrack
 * entry here is mid-flow (its SYN, which always fits, carried the frontend). */
#ifndef XLB_DSR_H
#define XLB_DSR_H

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

#define IPPROTO_DSTOPTS_ 60 /* IPv6 Destination Options header */

/* carrier_forged reports whether p, a packet to a VIP address, arrived with what a node would
 * take for a carrier: IPv4 options whose first is DSR_OPT4_TYPE, or an IPv6 Destination Options
 * header right after the fixed header whose first option is DSR_OPT6_TYPE. Only a gateway may
 * write one: kept on the DNATed packet, a client's would make the Pod's node rewrite that Pod's
 * replies to come from a frontend of the client's choosing. The first option is the only place
 * to look: a node takes the IPv4 option only alone (xdp/dsr) and the IPv6 one only first. */
static __always_inline int carrier_forged(const struct packet *p, void *data_end)
{
	if (p->family == FAMILY_V4) {
		const struct iphdr *iph = p->l3;
		const __u8 *opt = (const void *)(iph + 1);

		if ((void *)(iph + 1) > data_end || iph->ihl == 5 || (void *)(opt + 1) > data_end)
			return 0;
		return *opt == DSR_OPT4_TYPE;
	} else {
		const struct ipv6hdr *ip6 = p->l3;
		const __u8 *opt = (const void *)(ip6 + 1);

		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_DSTOPTS_ ||
		    (void *)(opt + 3) > data_end)
			return 0;
		return opt[2] == DSR_OPT6_TYPE;
	}
}

/* dsr_meta_get is this CPU's dsr_scratch. */
static __always_inline struct dsr_meta *dsr_meta_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&dsr_scratch, &zero);
}

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

/* dsr_insert4 inserts the IPv4 carrier after the 20-byte header of a frame whose L2 header is
 * l2 bytes (14, or 18 with a VLAN tag): the frame grows by DSR_OPT4_LEN at its head, the L2 and
 * IP headers move there, the option fills the gap. Returns 0; -1 when the frame cannot grow
 * (it is unchanged); -2 when it grew but is shorter than its headers (never: the caller parsed
 * them; the verifier cannot know). */
static __always_inline int dsr_insert4(struct xdp_md *ctx, const struct dsr_meta *m, const int l2)
{
	void *data, *data_end;
	struct iphdr *iph;
	__u8 *opt;

	if (bpf_xdp_adjust_head(ctx, -DSR_OPT4_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2 + sizeof(*iph) + DSR_OPT4_LEN > data_end)
		return -2;
	__builtin_memmove(data, data + DSR_OPT4_LEN, l2 + sizeof(*iph));
	iph = data + l2;
	opt = (__u8 *)(iph + 1);
	opt[0] = DSR_OPT4_TYPE;
	opt[1] = DSR_OPT4_LEN;
	__builtin_memcpy(opt + 2, &m->vport, sizeof(m->vport));
	__builtin_memcpy(opt + 4, &m->vip.w[0], sizeof(m->vip.w[0]));
	iph->ihl = (sizeof(*iph) + DSR_OPT4_LEN) / 4;
	iph->tot_len = bpf_htons(bpf_ntohs(iph->tot_len) + DSR_OPT4_LEN);
	iph->check = ip4_csum((__u16 *)iph, (sizeof(*iph) + DSR_OPT4_LEN) / 2);
	return 0;
}

/* dsr_insert6 inserts the IPv6 carrier, a Destination Options header, after the fixed header
 * (see dsr_insert4). */
static __always_inline int dsr_insert6(struct xdp_md *ctx, const struct dsr_meta *m, const int l2)
{
	void *data, *data_end;
	struct ipv6hdr *ip6;
	__u8 *h;

	if (bpf_xdp_adjust_head(ctx, -DSR_OPT6_HDRLEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2 + sizeof(*ip6) + DSR_OPT6_HDRLEN > data_end)
		return -2;
	__builtin_memmove(data, data + DSR_OPT6_HDRLEN, l2 + sizeof(*ip6));
	ip6 = data + l2;
	h = (__u8 *)(ip6 + 1);
	h[0] = ip6->nexthdr;
	h[1] = DSR_OPT6_HDRLEN / 8 - 1;
	h[2] = DSR_OPT6_TYPE;
	h[3] = DSR_OPT6_DATA;
	__builtin_memcpy(h + 4, &m->vport, sizeof(m->vport));
	__builtin_memcpy(h + 6, &m->vip, sizeof(m->vip));
	h[22] = 1; /* PadN */
	h[23] = 0;
	ip6->nexthdr = PROTO_DSTOPTS_HDR;
	ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + DSR_OPT6_HDRLEN);
	return 0;
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

/* dsr_too_big4 turns a DNATed IPv4 UDP datagram (l2 bytes of L2 header, an IP header without
 * options) into the ICMP "fragmentation needed" its client gets: from the VIP, advertising mtu,
 * quoting the datagram as the client sent it (its destination the VIP again, its TTL given
 * back), sent back out of the interface it came in on. Returns the verdict, or -1 when the
 * frame is too short (unchanged). */
static __always_inline int dsr_too_big4(struct xdp_md *ctx, const struct dsr_meta *m, const int l2,
					__u16 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + l2;
	__u8 quote[ICMP_QUOTE];
	__u8 mac[ETH_ALEN];
	struct iphdr *q = (struct iphdr *)quote;
	struct icmp_hdr *ic;
	struct udphdr *uh;
	__be32 client;
	__u32 sum, diff;

	if (data + l2 + ICMP_QUOTE > data_end || (void *)(iph + 1) > data_end)
		return -1;
	__builtin_memcpy(quote, iph, ICMP_QUOTE);
	client = iph->saddr;
	/* The datagram as the client sent it: its destination, TTL and checksums given back. */
	uh = (struct udphdr *)(quote + sizeof(*q));
	diff = diff32(0, q->daddr, m->vip.w[0]);
	diff = diff16(diff, uh->dest, m->vport);
	uh->check = csum_apply_udp(uh->check, diff);
	uh->dest = m->vport;
	q->daddr = m->vip.w[0];
	q->ttl++;
	q->check = ip4_csum((__u16 *)q, sizeof(*q) / 2);

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
	iph->saddr = m->vip.w[0];
	iph->daddr = client;
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
	return verdict(REASON_DSR_TOO_BIG, XDP_TX);
}

/* dsr_too_big6 is dsr_too_big4 for IPv6 (an ICMPv6 "packet too big"; the datagram's UDP header
 * must follow the fixed header). */
static __always_inline int dsr_too_big6(struct xdp_md *ctx, const struct dsr_meta *m, const int l2,
					__u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + l2;
	__u8 quote[ICMP6_QUOTE];
	__u8 mac[ETH_ALEN];
	struct ipv6hdr *q = (struct ipv6hdr *)quote;
	struct icmp_hdr *ic;
	struct udphdr *uh;
	struct addr client;
	__u32 sum, diff;
	__be32 len = bpf_htonl(sizeof(*ic) + ICMP6_QUOTE);

	if (data + l2 + ICMP6_QUOTE > data_end || (void *)(ip6 + 1) > data_end)
		return -1;
	__builtin_memcpy(quote, ip6, ICMP6_QUOTE);
	__builtin_memcpy(&client, &ip6->saddr, sizeof(client));
	/* The datagram as the client sent it: its destination, hop limit and checksum given back. */
	uh = (struct udphdr *)(quote + sizeof(*q));
	diff = diff_addr(0, (struct addr *)&q->daddr, &m->vip, FAMILY_V6);
	diff = diff16(diff, uh->dest, m->vport);
	uh->check = csum_apply(uh->check, diff);
	uh->dest = m->vport;
	__builtin_memcpy(&q->daddr, &m->vip, sizeof(m->vip));
	q->hop_limit++;

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	*(__be32 *)ip6 = bpf_htonl(0x60000000); /* version 6, no traffic class, no flow label */
	ip6->payload_len = bpf_htons(sizeof(*ic) + ICMP6_QUOTE);
	ip6->nexthdr = PROTO_ICMPV6;
	ip6->hop_limit = ICMP_REPLY_TTL;
	__builtin_memcpy(&ip6->saddr, &m->vip, sizeof(m->vip));
	__builtin_memcpy(&ip6->daddr, &client, sizeof(client));
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
	return verdict(REASON_DSR_TOO_BIG, XDP_TX);
}

#endif
