/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* flow_cache.h: a flow's key, its per-CPU flow_cache slot and its frontend check, shared by the stages that read or fill the flow cache. */
#ifndef XLB_FLOW_CACHE_H
#define XLB_FLOW_CACHE_H

/* ct_vip returns the VIP of a conntrack entry if it still is the frontend this packet is for
 * (the VIP may have been deleted or its id given to another frontend since). */
static __always_inline struct vip_ref *ct_vip(struct packet *p, __u32 vip_id)
{
	struct vip_ref *ref = bpf_map_lookup_elem(&vip_by_id, &vip_id);

	if (!ref || ref->key.family != p->family || ref->key.proto != p->proto ||
	    (ref->key.port && ref->key.port != p->dport) || !addr_eq(&ref->key.addr, &p->dst))
		return NULL;
	return ref;
}

/* flow_key_of fills the key of p's flow, as conntrack and flow_cache store it. */
static __always_inline void flow_key_of(struct flow_key *k, const struct packet *p)
{
	k->src = p->src;
	k->dst = p->dst;
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
	k->family = p->family;
}

/* flow_cache_slot returns this CPU's flow_cache entry for the tuple of fk (NULL on a CPU beyond
 * the map's size). The slot comes from a cheap seeded multiplicative hash (two multiplications;
 * the top bits are the well-mixed ones): it only spreads tuples over this CPU's cache, where a
 * collision costs the full path, never a wrong answer, so it need not match anything in Go. */
static __always_inline struct flow_cache_entry *flow_cache_slot(const struct flow_key *fk)
{
	__u32 x = fk->src.w[0] ^ rotl32(fk->dst.w[0], 16);
	__u32 slot;

	if (fk->family == FAMILY_V6)
		x ^= fk->src.w[1] ^ fk->src.w[2] ^ fk->src.w[3] ^ fk->dst.w[3];
	x = (x ^ cfg_hash_seed) * 0x9e3779b1u;
	x = (x ^ ((__u32)fk->sport << 16 | fk->dport) ^ fk->proto) * 0x85ebca6bu;
	slot = bpf_get_smp_processor_id() * FLOW_CACHE_SLOTS + (x >> (32 - FLOW_CACHE_BITS));
	return bpf_map_lookup_elem(&flow_cache, &slot);
}
/* fc_fill makes fc, this CPU's flow_cache slot for flow fk, name the flow's backend bid, VIP
 * vip_id and conntrack flags (CT_F_*) as read at time now from the table that holds the flow
 * (conntrack, or its handshake slot), for packets arriving on an interface of role, and returns
 * it (NULL when there is no slot or no cache generation yet): forward records the packet's hop
 * in it. */
static __always_inline struct flow_cache_entry *fc_fill(struct flow_cache_entry *fc,
							const struct flow_key *fk, __u64 now,
							__u32 bid, __u32 vip_id, __u8 flags,
							__u32 role, __u32 gen)
{
	if (!fc || !gen)
		return NULL;
	fc->key = *fk;
	fc->refreshed = now;
	fc->backend_id = bid;
	fc->vip_id = vip_id;
	fc->flags = flags;
	fc->in_role = role;
	fc->gen = gen;
	fc->fast_until = 0; /* forward records anew */
	return fc;
}

#endif
