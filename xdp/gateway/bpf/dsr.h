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
#include "pmtu.h"

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
	__u32 diff, ow0, ow1;
	__u16 w0;

	if (bpf_xdp_adjust_head(ctx, -DSR_OPT4_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2 + sizeof(*iph) + DSR_OPT4_LEN > data_end)
		return -2;
	__builtin_memmove(data, data + DSR_OPT4_LEN, l2 + sizeof(*iph));
	iph = data + l2;
	opt = (__u8 *)(iph + 1);
	{
		union { __u8 b[DSR_OPT4_LEN]; __u32 w[2]; } o;

		o.b[0] = DSR_OPT4_TYPE;
		o.b[1] = DSR_OPT4_LEN;
		__builtin_memcpy(&o.b[2], &m->vport, sizeof(m->vport));
		__builtin_memcpy(&o.b[4], &m->vip.w[0], sizeof(m->vip.w[0]));
		__builtin_memcpy(opt, &o, sizeof(o));
		ow0 = o.w[0];
		ow1 = o.w[1];
	}
	/* The header checksum is updated for what changes (IHL, the total length, the option's
	 * words), not recomputed: a header whose checksum was wrong stays wrong, and the node drops
	 * it as the client's packet deserved. A gateway never launders a corrupted header
	 * (RFC 1812). */
	w0 = *(__u16 *)iph;
	diff = diff16(0, iph->tot_len, bpf_htons(bpf_ntohs(iph->tot_len) + DSR_OPT4_LEN));
	iph->ihl = (sizeof(*iph) + DSR_OPT4_LEN) / 4;
	iph->tot_len = bpf_htons(bpf_ntohs(iph->tot_len) + DSR_OPT4_LEN);
	diff = diff16(diff, w0, *(__u16 *)iph);
	diff = diff32(diff, 0, ow0);
	diff = diff32(diff, 0, ow1);
	iph->check = csum_apply(iph->check, diff);
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

/* dsr_too_big4 turns a DNATed IPv4 UDP datagram (l2 bytes of L2 header, an IP header without
 * options) into the ICMP "fragmentation needed" its client gets: from the VIP, advertising mtu,
 * quoting the datagram as the client sent it (its destination the VIP again, its TTL given
 * back), sent back out of the interface it came in on (pmtu.h). Returns the verdict, or -1 when
 * the frame is too short (unchanged). */
static __always_inline int dsr_too_big4(struct xdp_md *ctx, const struct dsr_meta *m, const int l2,
					__u16 mtu)
{
	return too_big4(ctx, l2, m->vip.w[0], &m->vip, m->vport, mtu, REASON_DSR_TOO_BIG);
}

/* dsr_too_big6 is dsr_too_big4 for IPv6 (an ICMPv6 "packet too big"; the datagram's UDP header
 * must follow the fixed header). */
static __always_inline int dsr_too_big6(struct xdp_md *ctx, const struct dsr_meta *m, const int l2,
					__u32 mtu)
{
	return too_big6(ctx, l2, &m->vip, &m->vip, m->vport, mtu, REASON_DSR_TOO_BIG);
}

#endif
