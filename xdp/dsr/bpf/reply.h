/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* reply.h: the egress side for TCP and UDP. A packet whose {source, source port, destination,
 * destination port, protocol} is a flow ingress recorded, in flows or half_open (the Pod's
 * reply to the client), gets the flow's VIP and service port as its source, so that it can
 * leave by the node's own routing straight to the client. A fragmented reply's later fragments (no ports) follow its
 * first through frags.
 *
 * Checksums go through the kernel's helpers, not by hand: an outgoing packet's TCP or UDP
 * checksum is often left for the NIC to finish (CHECKSUM_PARTIAL: the field holds only the
 * pseudo-header's sum), and bpf_l4_csum_replace applies a change the way the packet's state
 * needs (BPF_F_PSEUDO_HDR marks a pseudo-header change, the only kind a partial checksum takes
 * in). BPF_F_MARK_MANGLED_0: an IPv4 UDP checksum of 0 ("none") stays 0, a computed 0 is sent as
 * 0xffff. An IPv6 UDP checksum of 0 is invalid (RFC 8200): such a reply is dropped rather than
 * rewritten (the client would drop it anyway). BPF_F_IPV6 is not used: it exists only on
 * kernels from 6.16 and matters only for CHECKSUM_COMPLETE, which outgoing packets do not
 * have. */
#ifndef XLB_DSR_REPLY_H
#define XLB_DSR_REPLY_H

#include "skb.h"
#include "csum.h"
#include "stats.h"
#include "filter.h"

/* lookup_flow returns the entry of the flow whose replies carry k: flows', or for TCP, when
 * flows has none, half_open's (the SYN-ACK of a handshake ingress saw the SYN of); NULL. */
static __always_inline struct flow_value *lookup_flow(const struct flow_key *k)
{
	struct flow_value *v = bpf_map_lookup_elem(&flows, k);

	if (!v && k->proto == PROTO_TCP)
		v = bpf_map_lookup_elem(&half_open, k);
	return v;
}

/* synack_flow returns the entry a SYN-ACK of k's tuple is rewritten by, committing a half-open
 * candidate: the Pod answers a SYN with a SYN-ACK only for a new connection, so the candidate
 * the SYN left is now the tuple's flow, even over a flows entry naming another frontend (the
 * tuple's earlier connection is over: a Pod with a connection on the tuple answers a SYN with a
 * challenge ACK, which keeps the old frontend). A candidate of a tuple flows lacks stays in
 * half_open until the handshake's ACK (a SYN flood's SYN-ACKs never fill flows). */
static __always_inline struct flow_value *synack_flow(const struct flow_key *k, __u64 now)
{
	struct flow_value *h = bpf_map_lookup_elem(&half_open, k);
	struct flow_value *v = bpf_map_lookup_elem(&flows, k);
	struct flow_value nv;

	if (!h || !live(h, PROTO_TCP, now))
		return v ? v : h;
	if (!v)
		return h;
	if (!same_vip(v, &h->vip, h->vip_port)) {
		nv = *h;
		nv.seen_ns = now;
		if (bpf_map_update_elem(&flows, k, &nv, BPF_ANY) < 0)
			return v;
		count(STAT_FLOW_REPOINTED);
	}
	bpf_map_delete_elem(&half_open, k);
	return bpf_map_lookup_elem(&flows, k);
}

/* set_src4 writes IPv4 source address to into p's packet (a reply's or a fragment's, at l3 =
 * ETH_HLEN) with the header checksum, in one store (the checksum and the source are adjacent;
 * an IPv4 header checksum is always complete, never left to the NIC), and updates the L4
 * checksum at csum_off, when not 0, for the pseudo-header's change with l4flags. */
static __always_inline int set_src4(struct __sk_buff *skb, const struct pkt *p, __be32 to,
				    __u32 csum_off, __u64 l4flags)
{
	struct { __u16 check; __be32 saddr; } __attribute__((packed)) w = {
		.check = csum_apply(p->ip_check, diff32(0, p->src.w[0], to)), .saddr = to };

	if (bpf_skb_store_bytes(skb, ETH_HLEN + 10, &w, sizeof(w), 0) < 0)
		return -1;
	if (csum_off && bpf_l4_csum_replace(skb, csum_off, p->src.w[0], to,
					    l4flags | BPF_F_PSEUDO_HDR | sizeof(to)) < 0)
		return -1;
	return 0;
}

/* set_src6 is set_src4 for IPv6 (no header checksum). */
static __always_inline int set_src6(struct __sk_buff *skb, const struct addr *from,
				    const struct addr *to, __u32 csum_off, __u64 l4flags)
{
	if (bpf_skb_store_bytes(skb, ETH_HLEN + 8, to, sizeof(*to), 0) < 0)
		return -1;
	if (csum_off && bpf_l4_csum_replace(skb, csum_off, 0, diff_addr(0, from, to, FAMILY_V6),
					    l4flags | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	return 0;
}

/* remember_frag records a first fragment's datagram in frags, for its later fragments. */
static __always_inline void remember_frag(const struct pkt *p, const struct addr *vip, __u64 now)
{
	struct frag_key k = { .src = p->src, .dst = p->dst, .id = p->frag_id, .proto = p->proto,
			      .family = p->family };
	struct frag_value v = { .vip = *vip, .seen_ns = now };

	bpf_map_update_elem(&frags, &k, &v, BPF_ANY);
}

/* reply handles a TCP or UDP packet (or first fragment) p. */
static __always_inline int reply(struct __sk_buff *skb, const struct pkt *p)
{
	__u32 csum_off = p->l4 + (p->proto == PROTO_TCP ? TCP_CSUM_OFF : UDP_CSUM_OFF);
	__u64 l4flags = p->proto == PROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	struct flow_key k = { .pod = p->src, .client = p->dst, .proto = p->proto,
			      .family = p->family };
	struct flow_value *v;
	struct addr vip;
	__be16 vport, csum;
	__u64 now;
	int synack = 0;

	if (!maybe_endpoint(&p->src, p->family))
		return TC_ACT_OK;
	{
		__be16 *ports = hdr(skb, p->l4, 4);
		__be16 *c;

		if (!ports)
			return TC_ACT_OK;
		k.pod_port = ports[0];
		k.client_port = ports[1];
		/* The checksum must be in the packet before anything is written. */
		c = hdr(skb, csum_off, sizeof(*c));
		if (!c)
			return TC_ACT_OK;
		csum = *c;
		if (p->proto == PROTO_TCP) {
			__u8 *f = hdr(skb, p->l4 + TCP_FLAGS_OFF, 1);

			synack = f && (*f & (TCPF_SYN | TCPF_ACK)) == (TCPF_SYN | TCPF_ACK);
		}
	}
	now = bpf_ktime_get_coarse_ns();
	v = synack ? synack_flow(&k, now) : lookup_flow(&k);
	if (!v)
		return TC_ACT_OK;
	if (!live(v, p->proto, now))
		return verdict(STAT_REPLY_EXPIRED, TC_ACT_OK);
	if (p->family == FAMILY_V6 && p->proto == PROTO_UDP && csum == 0)
		return verdict(STAT_DROP_UDP6_ZERO_CSUM, TC_ACT_SHOT);
	vip = v->vip;
	vport = v->vip_port;
	if (now > v->seen_ns + REFRESH_NS)
		v->seen_ns = now;
	if (p->is_frag)
		remember_frag(p, &vip, now);

	if (p->family == FAMILY_V4) {
		if (set_src4(skb, p, vip.w[0], csum_off, l4flags) < 0)
			return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	} else if (set_src6(skb, &p->src, &vip, csum_off, l4flags) < 0) {
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	}
	if (vport != k.pod_port &&
	    (bpf_skb_store_bytes(skb, p->l4, &vport, sizeof(vport), 0) < 0 ||
	     bpf_l4_csum_replace(skb, csum_off, k.pod_port, vport, l4flags | sizeof(vport)) < 0))
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	return verdict(STAT_REPLY_REWRITTEN, TC_ACT_OK);
}

/* later_frag handles a fragment after the first (no ports): the source its first fragment got.
 * Only the IP header changes: the L4 checksum is in the first fragment. */
static __always_inline int later_frag(struct __sk_buff *skb, const struct pkt *p)
{
	struct frag_key k = { .src = p->src, .dst = p->dst, .id = p->frag_id, .proto = p->proto,
			      .family = p->family };
	struct frag_value *v;
	struct addr vip;
	__u64 now;

	if (!maybe_endpoint(&p->src, p->family))
		return TC_ACT_OK;
	v = bpf_map_lookup_elem(&frags, &k);
	if (!v)
		return TC_ACT_OK;
	now = bpf_ktime_get_coarse_ns();
	if (now > v->seen_ns && now - v->seen_ns > FRAG_TIMEOUT_NS)
		return TC_ACT_OK;
	vip = v->vip;
	if (p->family == FAMILY_V4) {
		if (set_src4(skb, p, vip.w[0], 0, 0) < 0)
			return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	} else if (set_src6(skb, &p->src, &vip, 0, 0) < 0) {
		return verdict(STAT_DROP_REWRITE_FAILED, TC_ACT_SHOT);
	}
	return verdict(STAT_FRAG_REWRITTEN, TC_ACT_OK);
}

#endif
