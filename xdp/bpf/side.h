/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* side.h: which side of the gateway a packet arrived from, and what it may do from there
 * (docs/datapath.md, "Security model").
 *
 * Every interface xlb attaches to has a role (if_roles): client-facing, cluster-facing, or both
 * (a one-armed gateway, where the source decides: a source in site_sources' SITE_CLUSTER is
 * the cluster's, any other a client's). From the client side a packet may be balanced to a
 * backend, never reverse-NATed; from the cluster side a backend's reply is reverse-NATed, and a
 * packet to a VIP is balanced only when it comes from the site itself (an in-cluster client). A
 * packet to a VIP whose source is a VIP or the gateway's own address is forged wherever it
 * arrives; one from a site prefix is forged when it arrives from the client side. */
#ifndef XLB_SIDE_H
#define XLB_SIDE_H

#include "maps.h"
#include "stats.h"
#include "lb.h"

/* in_role returns the role of the interface the packet arrived on (ROLE_NONE if not ours). */
static __always_inline __u32 in_role(struct xdp_md *ctx)
{
	__u32 i = ctx->ingress_ifindex;
	__u8 *r = bpf_map_lookup_elem(&if_roles, &i);

	return r ? *r : ROLE_NONE;
}

/* site_kind returns the SITE_* bits of the longest site prefix holding a (0: none). */
static __always_inline __u32 site_kind(const struct addr *a, __u8 family)
{
	struct site_key k = { .prefixlen = 32 + (family == FAMILY_V6 ? 128 : 32),
			      .family = bpf_htonl(family), .addr = *a };
	__u8 *v = bpf_map_lookup_elem(&site_sources, &k);

	return v ? *v : 0;
}

/* vip_side_check decides whether packet p, addressed to a VIP and arrived on an interface of
 * role, may be balanced: -1 if so, else its drop verdict (counted). */
static __always_inline int vip_side_check(struct packet *p, __u32 role)
{
	__u32 kind;

	if (role == ROLE_NONE)
		return verdict(REASON_DROP_NO_ROLE, XDP_DROP);
	kind = site_kind(&p->src, p->family);
	if ((kind & SITE_GATEWAY) || is_vip_addr(&p->src, p->family))
		return verdict(REASON_DROP_SITE_SOURCE, XDP_DROP);
	if (role == ROLE_CLIENT && (kind & SITE_CLUSTER))
		return verdict(REASON_DROP_SITE_SOURCE, XDP_DROP);
	if (role == ROLE_CLUSTER && !(kind & SITE_CLUSTER))
		return verdict(REASON_DROP_WRONG_SIDE, XDP_DROP);
	return -1;
}

/* reply_side_check decides whether a backend's reply p (it matched a reverse entry), arrived on
 * an interface of role, may be reverse-NATed: -1 if so, else its drop verdict (counted). A
 * reply from the client side would otherwise leave with a VIP as its source: a reflector. */
static __always_inline int reply_side_check(struct packet *p, __u32 role)
{
	if (role == ROLE_CLUSTER)
		return -1;
	if (role == ROLE_NONE)
		return verdict(REASON_DROP_NO_ROLE, XDP_DROP);
	if (role == ROLE_BOTH && (site_kind(&p->src, p->family) & SITE_CLUSTER))
		return -1;
	return verdict(REASON_DROP_REPLY_WRONG_SIDE, XDP_DROP);
}

/* side_verdict applies vip_side_check (reply 0) or reply_side_check (reply 1) to the packet in
 * ctx, arrived on an interface of role: -1 if it may go on, else its drop verdict. A global
 * function: the verifier checks it once, on its own, and the paths that call it (near the
 * verifier's limits) see only its result; it reads the source address from the frame again. */
__noinline int side_verdict(struct xdp_md *ctx, __u32 role, __u32 reply)
{
	void *data_end, *data, *cur;
	struct ethhdr *eth;
	struct packet p = {};
	__be16 proto;

	if (!ctx)
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	data_end = (void *)(long)ctx->data_end;
	data = (void *)(long)ctx->data;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	proto = eth->h_proto;
	cur = eth + 1;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		struct { __be16 tci; __be16 proto; } *vh = cur;

		if ((void *)(vh + 1) > data_end)
			return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
		proto = vh->proto;
		cur = vh + 1;
	}
	if (proto == ETH_P_IP_BE) {
		struct iphdr *iph = cur;

		if ((void *)(iph + 1) > data_end)
			return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
		p.family = FAMILY_V4;
		p.src.w[0] = iph->saddr;
	} else if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
		p.family = FAMILY_V6;
		__builtin_memcpy(&p.src, &ip6->saddr, sizeof(p.src));
	} else {
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	}
	if (reply)
		return reply_side_check(&p, role);
	return vip_side_check(&p, role);
}

#endif
