// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* dsr.c: the node side of direct server return. Two TC programs, attached with TCX links to the
 * node's interfaces (xdp/dsr):
 * - dsr_ingress, where the gateways' packets arrive: reads, checks and removes the carrier a
 *   gateway put in a packet it DNATed to a Pod on this node, and records the flow (carrier.h);
 * - dsr_egress, where replies leave: gives a recorded flow's replies, and the ICMP errors about
 *   it, the VIP and service port as their source (reply.h, icmp.h).
 * Everything else passes untouched: TC_ACT_OK, whatever else is attached decides. IPv6 packets
 * with extension headers other than the carrier (ingress) or a Fragment header (egress) are
 * left alone. See docs/dsr.md. */
#include "carrier.h"
#include "reply.h"
#include "icmp.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tcx/ingress")
int dsr_ingress(struct __sk_buff *skb)
{
	if (skb->protocol == ETH_P_IP_BE) {
		__u8 *vihl = hdr(skb, ETH_HLEN, 1);

		/* The common case: no IPv4 options, no carrier. */
		if (!vihl || *vihl == 0x45)
			return TC_ACT_OK;
		return carrier4(skb);
	}
	if (skb->protocol == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = hdr(skb, ETH_HLEN, IPV6_HLEN);

		if (!ip6 || ip6->nexthdr != PROTO_DSTOPTS_HDR)
			return TC_ACT_OK;
		return carrier6(skb);
	}
	return TC_ACT_OK;
}

/* parse4 fills p from an IPv4 header; -1 when there is none. */
static __always_inline int parse4(struct __sk_buff *skb, struct pkt *p, __u16 *frag_off)
{
	struct iphdr *ip = hdr(skb, ETH_HLEN, IPV4_HLEN);

	/* A packet shorter than its header says is left alone. A longer one is not (a GSO packet
	 * of more than 64 KiB says 0). */
	if (!ip || ip->version != 4 || ip->ihl < 5 || ETH_HLEN + bpf_ntohs(ip->tot_len) > skb->len)
		return -1;
	p->family = FAMILY_V4;
	p->proto = ip->protocol;
	p->src.w[0] = ip->saddr;
	p->dst.w[0] = ip->daddr;
	p->l4 = ETH_HLEN + ip->ihl * 4;
	*frag_off = bpf_ntohs(ip->frag_off);
	p->is_frag = (*frag_off & (IP_MF | IP_OFFSET)) != 0;
	p->frag_id = ip->id;
	p->ip_check = ip->check;
	return 0;
}

/* parse6 fills p from an IPv6 header and a Fragment header right after it; -1 when there is
 * none. frag_off is the Fragment header's offset and M flag (host order). */
static __always_inline int parse6(struct __sk_buff *skb, struct pkt *p, __u16 *frag_off)
{
	struct ipv6hdr *ip6 = hdr(skb, ETH_HLEN, IPV6_HLEN);

	if (!ip6 || ip6->version != 6 || ETH_HLEN + IPV6_HLEN + bpf_ntohs(ip6->payload_len) > skb->len)
		return -1;
	p->family = FAMILY_V6;
	p->proto = ip6->nexthdr;
	__builtin_memcpy(&p->src, &ip6->saddr, sizeof(p->src));
	__builtin_memcpy(&p->dst, &ip6->daddr, sizeof(p->dst));
	p->l4 = ETH_HLEN + IPV6_HLEN;
	*frag_off = 0;
	if (p->proto == PROTO_FRAGMENT) {
		struct { __u8 next; __u8 res; __be16 off; __be32 id; } *fh = hdr(skb, p->l4, FRAG6_HLEN);

		if (!fh)
			return -1;
		p->proto = fh->next;
		*frag_off = bpf_ntohs(fh->off);
		p->is_frag = (*frag_off & (IP6_OFFSET | IP6_MF)) != 0;
		p->frag_id = fh->id;
		p->l4 += FRAG6_HLEN;
	}
	return 0;
}

SEC("tcx/egress")
int dsr_egress(struct __sk_buff *skb)
{
	struct pkt p = {};
	__u16 fo;
	int later;

	if (skb->protocol == ETH_P_IP_BE) {
		if (parse4(skb, &p, &fo) < 0)
			return TC_ACT_OK;
		later = (fo & IP_OFFSET) != 0;
	} else if (skb->protocol == ETH_P_IPV6_BE) {
		if (parse6(skb, &p, &fo) < 0)
			return TC_ACT_OK;
		later = (fo & IP6_OFFSET) != 0;
	} else {
		return TC_ACT_OK;
	}
	if (p.proto == PROTO_TCP || p.proto == PROTO_UDP)
		return later ? later_frag(skb, &p) : reply(skb, &p);
	if (!p.is_frag && ((p.family == FAMILY_V4 && p.proto == PROTO_ICMP) ||
			   (p.family == FAMILY_V6 && p.proto == PROTO_ICMPV6)))
		return icmp_error(skb, &p);
	return TC_ACT_OK;
}
