/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* fib.h: sending a rewritten packet on its way: bpf_fib_lookup for the next hop, MAC rewrite,
 * then XDP_TX (egress == ingress) or XDP_REDIRECT through tx_ports. Whenever the kernel has to
 * help (no neighbour entry yet, MTU, an interface we do not redirect to), the packet goes up
 * with XDP_PASS and its original MACs, so the kernel forwards it as a router would. */
#ifndef XLB_FIB_H
#define XLB_FIB_H

#include <linux/bpf.h>
#include "parse.h"
#include "maps.h"
#include "stats.h"

#define AF_INET  2
#define AF_INET6 10
#define IPV6_FLOWINFO_MASK_BE 0xFFFFFF0F /* htonl(0x0FFFFFFF) */

static __always_inline int fib_forward(struct xdp_md *ctx, struct packet *p, void *data_end)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = p->proto;
	fib.sport = p->sport;
	fib.dport = p->dport;
	if (p->family == FAMILY_V4) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > data_end)
			return verdict(REASON_PASS_FIB, XDP_PASS);
		fib.family = AF_INET;
		fib.tos = iph->tos;
		fib.tot_len = bpf_ntohs(iph->tot_len);
		fib.ipv4_src = iph->saddr;
		fib.ipv4_dst = iph->daddr;
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return verdict(REASON_PASS_FIB, XDP_PASS);
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
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return verdict(REASON_PASS_NO_NEIGH, XDP_PASS);
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return verdict(REASON_DROP_FIB, XDP_DROP);
	default: /* forwarding disabled, frag needed, not forwarded, lwt */
		return verdict(REASON_PASS_FIB, XDP_PASS);
	}

	if (fib.ifindex == ctx->ingress_ifindex) {
		__builtin_memcpy(p->eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(p->eth->h_source, fib.smac, ETH_ALEN);
		return verdict(REASON_FWD_TX, XDP_TX);
	}
	if (p->vlan)
		return verdict(REASON_PASS_VLAN_EGRESS, XDP_PASS);
	if (!bpf_map_lookup_elem(&tx_ports, &fib.ifindex))
		return verdict(REASON_PASS_NO_TXPORT, XDP_PASS);
	__builtin_memcpy(p->eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, fib.smac, ETH_ALEN);
	count_reason(REASON_FWD_REDIRECT);
	return bpf_redirect_map(&tx_ports, fib.ifindex, XDP_PASS);
}

#endif
