/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* fib.h: sending a rewritten packet on its way. The next hop (egress interface, MACs, MTU) comes
 * from the per-CPU next-hop cache, or from bpf_fib_lookup on a miss (the lookup is ~200 ns here:
 * deep kernel call chains are costly with return-thunk mitigations). Then XDP_TX when egress is
 * the ingress interface, else XDP_REDIRECT through tx_ports. Whenever the kernel has to help (no
 * neighbour entry yet, MTU, an interface we do not redirect to, a tagged frame leaving by another
 * port), the packet goes up with XDP_PASS and its original MACs, so the kernel forwards it as a
 * router would. */
#ifndef XLB_FIB_H
#define XLB_FIB_H

#include <linux/bpf.h>
#include "parse.h"
#include "maps.h"
#include "stats.h"
#include "hash.h"
#include "lb.h"
#include "nat.h"

#define AF_INET  2
#define AF_INET6 10
#define IPV6_FLOWINFO_MASK_BE 0xFFFFFF0F /* htonl(0x0FFFFFFF) */

/* send_to rewrites the MACs and sends the packet out of ifindex. */
static __always_inline int send_to(struct xdp_md *ctx, struct packet *p, __u32 ifindex,
				   const __u8 *smac, const __u8 *dmac)
{
	__builtin_memcpy(p->eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, smac, ETH_ALEN);
	if (ifindex == ctx->ingress_ifindex)
		return verdict(REASON_FWD_TX, XDP_TX);
	count_reason(REASON_FWD_REDIRECT);
	return bpf_redirect_map(&tx_ports, ifindex, XDP_PASS);
}

/* ip_len is the packet's IP length (header included), for the MTU check. */
static __always_inline __u32 ip_len(struct packet *p)
{
	return p->l3_end - p->l3;
}

/* pass_rewritten hands a rewritten packet to the kernel to forward. Its TTL is given back first:
 * the kernel's forwarding decrements it again. */
static __always_inline int pass_rewritten(struct packet *p, void *data_end, __u32 reason)
{
	ttl_restore(p, data_end);
	return verdict(reason, XDP_PASS);
}

/* What next_hop found. */
enum hop_result {
	HOP_SEND = 0,      /* h is filled: XDP sends the packet */
	HOP_LOCAL,         /* the destination is this host: the kernel delivers it */
	HOP_NO_NEIGH,      /* the kernel must resolve the neighbour */
	HOP_KERNEL,        /* the kernel must forward it (forwarding off, MTU, VLAN device...) */
	HOP_NO_TXPORT,     /* egress is an interface XDP does not redirect to */
	HOP_VLAN,          /* a tagged frame: the kernel owns the VLAN device */
	HOP_DROP,          /* blackhole, unreachable or prohibited */
	HOP_TOO_BIG,       /* longer than the egress MTU (h->mtu): the kernel fragments it, or the
			    * sender is told (pmtu.h) */
};

/* Where a packet goes next. */
struct hop {
	__u64 expires; /* until when the answer may be reused (0: not cached, ask every time) */
	__u32 ifindex;
	__u16 mtu;
	__u8 smac[ETH_ALEN];
	__u8 dmac[ETH_ALEN];
};

/* next_hop finds where p goes as it stands (its destination, source and length): from the
 * per-CPU next-hop cache, or bpf_fib_lookup on a miss (which fills the cache). */
static __always_inline int next_hop(struct xdp_md *ctx, struct packet *p, void *data_end,
				    __u64 now, __u32 gen, struct hop *h)
{
	struct bpf_fib_lookup fib;
	/* The top bits: the low bits of filter_bit hardly depend on an IPv4 address's last octet,
	 * so a /24 of backends or clients would share a handful of slots. */
	__u32 slot = filter_bit(&p->dst, p->family) >> (ADDR_FILTER_LOG2 - NH_CACHE_LOG2);
	struct nexthop *nh = bpf_map_lookup_elem(&nh_cache, &slot);
	long rc;

	/* A tagged frame arrived on a VLAN the kernel terminates: the route's egress is a VLAN
	 * device XDP cannot send from. */
	if (p->vlan)
		return HOP_VLAN;
	if (nh && now < nh->expires && nh->gen == gen && nh->family == p->family &&
	    addr_eq(&nh->addr, &p->dst) && ip_len(p) <= nh->mtu) {
		h->ifindex = nh->ifindex;
		h->expires = nh->expires;
		h->mtu = nh->mtu;
		__builtin_memcpy(h->smac, nh->smac, ETH_ALEN);
		__builtin_memcpy(h->dmac, nh->dmac, ETH_ALEN);
		return HOP_SEND;
	}

	/* Only a cache miss pays for the lookup's 64-byte argument. */
	__builtin_memset(&fib, 0, sizeof(fib));
	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = p->proto;
	fib.sport = p->sport;
	fib.dport = p->dport;
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > data_end)
			return HOP_KERNEL;
		fib.family = AF_INET;
		fib.tos = iph->tos;
		fib.tot_len = bpf_ntohs(iph->tot_len);
		fib.ipv4_src = iph->saddr;
		fib.ipv4_dst = iph->daddr;
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return HOP_KERNEL;
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & IPV6_FLOWINFO_MASK_BE;
		fib.tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		__builtin_memcpy(fib.ipv6_src, &p->src, sizeof(fib.ipv6_src));
		__builtin_memcpy(fib.ipv6_dst, &p->dst, sizeof(fib.ipv6_dst));
	}

	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return HOP_LOCAL;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return HOP_NO_NEIGH;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return HOP_DROP;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		h->mtu = fib.mtu_result;
		return HOP_TOO_BIG;
	default: /* forwarding disabled, lwt */
		return HOP_KERNEL;
	}

	if (fib.ifindex != ctx->ingress_ifindex && !bpf_map_lookup_elem(&tx_ports, &fib.ifindex))
		return HOP_NO_TXPORT;
	if (nh && cfg_nh_cache_ns) {
		nh->addr = p->dst;
		nh->family = p->family;
		nh->ifindex = fib.ifindex;
		nh->mtu = fib.mtu_result;
		__builtin_memcpy(nh->smac, fib.smac, ETH_ALEN);
		__builtin_memcpy(nh->dmac, fib.dmac, ETH_ALEN);
		nh->expires = now + cfg_nh_cache_ns;
		nh->gen = gen;
		h->expires = nh->expires;
	}
	h->ifindex = fib.ifindex;
	h->mtu = fib.mtu_result;
	__builtin_memcpy(h->smac, fib.smac, ETH_ALEN);
	__builtin_memcpy(h->dmac, fib.dmac, ETH_ALEN);
	return HOP_SEND;
}

/* send_hop sends a rewritten packet as next_hop said: out of an interface, or up to the kernel
 * (with its TTL given back), or nowhere. */
static __always_inline int send_hop(struct xdp_md *ctx, struct packet *p, void *data_end,
				    int rc, struct hop *h)
{
	switch (rc) {
	case HOP_SEND:
		return send_to(ctx, p, h->ifindex, h->smac, h->dmac);
	case HOP_NO_NEIGH:
		return pass_rewritten(p, data_end, REASON_PASS_NO_NEIGH);
	case HOP_NO_TXPORT:
		return pass_rewritten(p, data_end, REASON_PASS_NO_TXPORT);
	case HOP_VLAN:
		return pass_rewritten(p, data_end, REASON_PASS_VLAN_EGRESS);
	case HOP_DROP:
		return verdict(REASON_DROP_FIB, XDP_DROP);
	}
	return pass_rewritten(p, data_end, REASON_PASS_FIB);
}

/* fib_forward sends a packet whose destination was just rewritten. */
static __always_inline int fib_forward(struct xdp_md *ctx, struct packet *p, void *data_end,
				       __u64 now, __u32 gen)
{
	struct hop h = {};

	return send_hop(ctx, p, data_end, next_hop(ctx, p, data_end, now, gen, &h), &h);
}

#endif
