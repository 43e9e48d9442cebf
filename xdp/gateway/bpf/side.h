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

/* bogus_source reports whether a is an address no client can send from, whatever the fabric:
 * IPv4 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4 (multicast) and 240.0.0.0/4 (reserved,
 * broadcast); IPv6 ::, ::1, ::ffff:0:0/96 (v4-mapped), fe80::/10 and ff00::/8 (multicast). Such
 * a packet is forged (or a misconfiguration), and balanced it would reach a backend whose reply
 * cannot be routed back, or be passed to the kernel by a failing FIB lookup. */
static __always_inline int bogus_source(const struct addr *a, __u8 family)
{
	const __u8 *b = (const __u8 *)a;

	if (family == FAMILY_V4)
		return b[0] == 0 || b[0] == 127 || b[0] >= 224 || (b[0] == 169 && b[1] == 254);
	if (b[0] == 0xff || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80))
		return 1;
	if (a->w[0] || a->w[1] || b[8] || b[9])
		return 0;
	if (b[10] == 0xff && b[11] == 0xff)
		return 1;
	return !b[10] && !b[11] && (!a->w[3] || a->w[3] == bpf_htonl(1));
}

/* vip_side_check decides whether a packet addressed to a VIP, arrived on an interface of role,
 * whose source has the SITE_* bits kind and is (src_is_vip) or is not a VIP address, may be
 * balanced: -1 if so, else its drop verdict (counted). */
static __always_inline int vip_side_check(__u32 role, __u32 kind, int src_is_vip)
{
	if ((kind & SITE_GATEWAY) || src_is_vip)
		return verdict(REASON_DROP_SITE_SOURCE, XDP_DROP);
	if (role == ROLE_CLIENT && (kind & SITE_CLUSTER))
		return verdict(REASON_DROP_SITE_SOURCE, XDP_DROP);
	if (role == ROLE_CLUSTER && !(kind & SITE_CLUSTER))
		return verdict(REASON_DROP_WRONG_SIDE, XDP_DROP);
	return -1;
}

/* reply_side_check decides whether a backend's reply (it matched a reverse entry), arrived on
 * an interface of role (not ROLE_NONE, not ROLE_CLUSTER), whose source has the SITE_* bits
 * kind, may be reverse-NATed: -1 if so, else its drop verdict (counted). A reply from the
 * client side would otherwise leave with a VIP as its source: a reflector. */
static __always_inline int reply_side_check(__u32 role, __u32 kind)
{
	if (role == ROLE_BOTH && (kind & SITE_CLUSTER))
		return -1;
	return verdict(REASON_DROP_REPLY_WRONG_SIDE, XDP_DROP);
}

/* side_verdict applies vip_side_check (reply 0) or reply_side_check (reply 1) to the packet in
 * ctx, arrived on an interface of role: -1 if it may go on, else its drop verdict. A global
 * function: the verifier checks it once, on its own, and the paths that call it (near the
 * verifier's limits) see only its result; it reads the source address from the frame again,
 * into side_scratch, whose entries are its lookup keys (its callers have no stack to spare). */
__noinline int side_verdict(struct xdp_md *ctx, __u32 role, __u32 reply)
{
	void *data_end, *data, *cur;
	struct side_scratch *s;
	struct ethhdr *eth;
	__u32 zero = 0, kind;
	__u8 family, *v;
	__be16 proto;

	if (role == ROLE_NONE)
		return verdict(REASON_DROP_NO_ROLE, XDP_DROP);
	if (reply && role == ROLE_CLUSTER)
		return -1;
	s = bpf_map_lookup_elem(&side_scratch, &zero);
	if (!ctx || !s)
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
	__builtin_memset(s, 0, sizeof(*s));
	if (proto == ETH_P_IP_BE) {
		struct iphdr *iph = cur;

		if ((void *)(iph + 1) > data_end)
			return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
		family = FAMILY_V4;
		s->site.addr.w[0] = iph->saddr;
	} else if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
		family = FAMILY_V6;
		__builtin_memcpy(&s->site.addr, &ip6->saddr, sizeof(s->site.addr));
	} else {
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	}
	if (!reply && bogus_source(&s->site.addr, family))
		return verdict(REASON_DROP_BOGUS_SOURCE, XDP_DROP);
	/* The longest site prefix holding the source. */
	s->site.prefixlen = 32 + (family == FAMILY_V6 ? 128 : 32);
	s->site.family = bpf_htonl(family);
	v = bpf_map_lookup_elem(&site_sources, &s->site);
	kind = v ? *v : 0;
	if (reply)
		return reply_side_check(role, kind);
	/* Is the source a VIP address (the vips marker entry)? */
	s->vip.addr = s->site.addr;
	s->vip.family = family;
	return vip_side_check(role, kind,
			      filter_has(0, &s->vip.addr, family) &&
				      bpf_map_lookup_elem(&vips, &s->vip) != NULL);
}

#endif
