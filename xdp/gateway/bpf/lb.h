/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* lb.h: service lookups, Maglev selection and conntrack. */
#ifndef XLB_LB_H
#define XLB_LB_H

#include "parse.h"
#include "maps.h"
#include "hash.h"
#include "stats.h"

/* Load-time settings (the Go loader rewrites .rodata before loading). */
volatile const __u32 cfg_hash_seed = 0;
volatile const __u64 cfg_tcp_established_ns = 3600ull * 1000000000ull;
volatile const __u64 cfg_tcp_closing_ns = 10ull * 1000000000ull;
volatile const __u64 cfg_udp_ns = 60ull * 1000000000ull;
/* The flood budgets (budget.h), per RATE_WINDOW_NS over all CPUs; 0 = no limit:
 * BUDGET_NEW_FLOW and BUDGET_HANDSHAKE each get cfg_new_flow_rate, BUDGET_MID_FLOW
 * cfg_mid_flow_rate. */
volatile const __u64 cfg_new_flow_rate = 250000;
volatile const __u64 cfg_mid_flow_rate = 31250;
/* The tuple hash's key (tuple_hash), derived by Go from cfg_hash_seed: TUPLE_KEY_WORDS random
 * words, one added to each word of the tuple. */
volatile const __u32 cfg_tuple_key[TUPLE_KEY_WORDS] = {};
/* hs_slots' size minus one (a power of two minus one): a tuple's slot is tuple_hash & this. */
volatile const __u32 cfg_hs_mask = DEFAULT_HS_SIZE - 1;
/* How long a next-hop cache entry is trusted; 0 = always ask bpf_fib_lookup. */
volatile const __u64 cfg_nh_cache_ns = 500ull * 1000000ull;

/* flow_key_eq compares a stored key a with packet key b (whose family is a constant in each
 * inlined copy: IPv4 keys compare one address word, their padding being zero in both). */
static __always_inline int flow_key_eq(const struct flow_key *a, const struct flow_key *b)
{
	if (a->src.w[0] != b->src.w[0] || a->dst.w[0] != b->dst.w[0] || a->sport != b->sport ||
	    a->dport != b->dport || a->proto != b->proto || a->family != b->family)
		return 0;
	return b->family == FAMILY_V4 || (a->src.w[1] == b->src.w[1] && a->src.w[2] == b->src.w[2] &&
					  a->src.w[3] == b->src.w[3] && a->dst.w[1] == b->dst.w[1] &&
					  a->dst.w[2] == b->dst.w[2] && a->dst.w[3] == b->dst.w[3]);
}

/* tuple_nh is one term of tuple_hash: words a and b of the tuple, each plus its key word (key
 * words i and i + 1), multiplied as 64-bit numbers. */
static __always_inline __u64 tuple_nh(__u32 a, __u32 b, const int i)
{
	return (__u64)(__u32)(a + cfg_tuple_key[i]) * (__u32)(b + cfg_tuple_key[i + 1]);
}

/* tuple_hash is a keyed hash of every word of a forward flow key, for the live-flow filter (its
 * top bits, live.h) and the handshake table's slot (its low bits, hs.h). It only spreads tuples:
 * a collision costs a conntrack lookup, a handshake's slot or a connection's move from its slot
 * into conntrack, never a wrong answer; but a collision someone can aim (a SYN flood onto the
 * slot pair of a victim's connection) must need the key. So it is NH (the universal hash of
 * UMAC, RFC 4418): the words in pairs, each plus a secret key word (cfg_tuple_key, from the
 * seed), multiplied to 64 bits and summed; two different tuples of a family collide for about
 * one key in 2^32, whichever words differ — where a chain of multiplies and xors let a top-bit
 * difference in one word cancel one in the next whatever the seed (a client in the victim's /64,
 * or /24, could match its slot). The sum's halves folded, the last step is a full avalanche
 * (lowbias32's finalizer), so the slot's low bits depend on every bit. IPv4 costs two multiplies,
 * IPv6 five. Go computes the same (tupleKey.hash in xdp/gateway/live.go). */
static __always_inline __u32 tuple_hash(const struct flow_key *fk)
{
	__u32 ports = (__u32)fk->sport << 16 | fk->dport, x;
	__u64 h = tuple_nh(fk->src.w[0], fk->dst.w[0], 0) + tuple_nh(ports, fk->proto, 8);

	if (fk->family == FAMILY_V6)
		h += tuple_nh(fk->src.w[1], fk->dst.w[1], 2) + tuple_nh(fk->src.w[2], fk->dst.w[2], 4) +
		     tuple_nh(fk->src.w[3], fk->dst.w[3], 6);
	x = (__u32)(h >> 32) ^ (__u32)h;
	x = (x ^ (x >> 16)) * 0x7feb352du;
	x = (x ^ (x >> 15)) * 0x846ca68bu;
	return x ^ (x >> 16);
}

/* filter_has reports whether addr may be in the VIP (backend == 0) or backend address set. */
static __always_inline int filter_has(int backend, const struct addr *a, __u8 family)
{
	__u32 bit = filter_bit(a, family);
	__u32 word = bit / 64 + (backend ? ADDR_FILTER_WORDS : 0);
	__u64 *w = bpf_map_lookup_elem(&addr_bitmap, &word);

	if (!w)
		return 1;
	return (*w >> (bit % 64)) & 1;
}

/* svc_lookup looks up {a, port, proto} in map, then {a, 0, proto} (all ports). */
static __always_inline void *svc_lookup(void *map, const struct addr *a, __u8 family,
					__be16 port, __u8 proto)
{
	struct svc_key k = { .addr = *a, .port = port, .proto = proto, .family = family };
	void *v = bpf_map_lookup_elem(map, &k);

	if (v || !port)
		return v;
	k.port = 0;
	return bpf_map_lookup_elem(map, &k);
}

/* cache_gen returns the current cache generation (0 when the loader has not started). */
static __always_inline __u32 cache_gen(void)
{
	__u32 zero = 0;
	struct clock_value *c = bpf_map_lookup_elem(&clock, &zero);

	return c ? c->gen : 0;
}

/* svc_lookup_cached is svc_lookup (of vips when which is SVC_CACHE_VIPS, else reverse) through
 * the per-CPU svc_cache. It returns a pointer to this CPU's copy of the value, or NULL. */
static __always_inline void *svc_lookup_cached(int which, const struct addr *a, __u8 family,
					       __be16 port, __u8 proto, __u32 gen)
{
	struct svc_key k = { .addr = *a, .port = port, .proto = proto, .family = family };
	__u32 slot = murmur_final(murmur_mix(murmur_mix(hash_addr(which, a, family), port), proto),
				  24) % SVC_CACHE_SLOTS;
	struct svc_cache_entry *e = bpf_map_lookup_elem(&svc_cache, &slot);
	void *v;

	if (!e || !gen)
		return svc_lookup(which == SVC_CACHE_VIPS ? (void *)&vips : (void *)&reverse, a,
				  family, port, proto);
	if (e->gen == gen && e->map == which && svc_key_eq(&e->key, &k))
		return e->found ? &e->vip : NULL;
	v = svc_lookup(which == SVC_CACHE_VIPS ? (void *)&vips : (void *)&reverse, a, family,
		       port, proto);
	e->key = k;
	e->gen = gen;
	e->map = which;
	e->found = v != NULL;
	if (!v)
		return NULL;
	if (which == SVC_CACHE_VIPS)
		e->vip = *(struct vip_info *)v;
	else
		e->rev = *(struct rev_value *)v;
	return &e->vip;
}

/* is_vip_addr reports whether a is the address of any VIP (the marker entry). */
static __always_inline int is_vip_addr(const struct addr *a, __u8 family)
{
	struct svc_key k = { .addr = *a, .family = family };

	if (!filter_has(0, a, family))
		return 0;
	return bpf_map_lookup_elem(&vips, &k) != NULL;
}

/* backend_get returns the usable backend with this id, or NULL. */
static __always_inline struct backend *backend_get(__u32 id)
{
	struct backend *be;

	if (!id)
		return NULL;
	be = bpf_map_lookup_elem(&backends, &id);
	if (!be || !be->family || (be->flags & BACKEND_F_DOWN))
		return NULL;
	return be;
}

/* maglev_pick returns the backend id in the slot of vi's table chosen by hash, 0 if none. */
static __always_inline __u32 maglev_pick(const struct vip_info *vi, __u32 hash)
{
	__u32 slot, *id;

	if (!vi->table_size)
		return 0;
	slot = vi->table_off + hash % vi->table_size;
	id = bpf_map_lookup_elem(&maglev_slots, &slot);
	return id ? *id : 0;
}

/* elapsed is now - then, or 0 when then is later (CPUs may read slightly different clocks). */
static __always_inline __u64 elapsed(__u64 now, __u64 then)
{
	return now > then ? now - then : 0;
}

/* ct_timeout is the idle timeout of an entry. */
static __always_inline __u64 ct_timeout(__u8 proto, __u8 flags)
{
	if (proto != PROTO_TCP)
		return cfg_udp_ns;
	return (flags & CT_F_CLOSING) ? cfg_tcp_closing_ns : cfg_tcp_established_ns;
}

/* cpu_state_get returns this CPU's bookkeeping (never NULL in practice). */
static __always_inline struct cpu_state *cpu_state_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_state, &zero);
}

/* now_gen returns CLOCK_MONOTONIC in ns, from the loader's clock when it is fresh (see consts.h),
 * and stores the cache generation (cache_gen) in *gen: one read of map clock for both. */
static __always_inline __u64 now_gen(struct cpu_state *cs, __u32 *gen)
{
	__u32 zero = 0;
	struct clock_value *c = bpf_map_lookup_elem(&clock, &zero);
	__u64 t = c ? c->ns : 0;

	*gen = c ? c->gen : 0;

	if (!t || !cs)
		return bpf_ktime_get_coarse_ns();
	if (t != cs->last_clock) {
		cs->last_clock = t;
		cs->same = 0;
		cs->clock_stale = 0;
	} else {
		__u32 n = ++cs->same;

		if ((n & (n - 1)) == 0)
			cs->clock_stale = bpf_ktime_get_coarse_ns() > t + CLOCK_STALE_NS;
	}
	if (cs->clock_stale)
		return bpf_ktime_get_coarse_ns();
	return t;
}

/* now_ns is now_gen without the generation. */
static __always_inline __u64 now_ns(struct cpu_state *cs)
{
	__u32 gen;

	return now_gen(cs, &gen);
}

/* hs_time is clock reading now in a handshake slot's units (hs_entry.syn_time). */
static __always_inline __u32 hs_time(__u64 now)
{
	return (__u32)(now >> HS_TIME_SHIFT);
}

/* hs_fresh says whether a handshake slot's SYN time t is less than HS_TIMEOUT_NS before now (or
 * at most HS_SKEW_UNITS after it: another CPU may have read the clock a little later). */
static __always_inline int hs_fresh(__u32 t, __u64 now)
{
	__s32 age = (__s32)(hs_time(now) - t);

	return age <= (__s32)HS_TIMEOUT_UNITS && age >= -(__s32)HS_SKEW_UNITS;
}

/* hs_backend returns the backend of handshake-table entry e if a packet of VIP vip_id may still use
 * it at time now (entry fresh, same VIP, backend neither down nor deleted, and the packet of
 * the same connection: see enum hs_match), else 0. */
static __always_inline __u32 hs_backend(const struct hs_entry *e, __u32 vip_id, __u64 now,
					enum hs_match match, __u32 seq)
{
	if (!e || e->vip_id != vip_id || !hs_fresh(e->syn_time, now) ||
	    !backend_get(e->backend_id))
		return 0;
	if (match == HS_MATCH_SYN && seq != e->isn)
		return 0;
	if (match == HS_MATCH_DATA && seq - e->isn >= HS_SEQ_WINDOW)
		return 0;
	return e->backend_id;
}

/* src_allowed checks a client against VIP vip_id's loadBalancerSourceRanges. */
static __always_inline int src_allowed(struct packet *p, __u32 vip_id)
{
	struct src_range_key k = { .prefixlen = 32 + (p->family == FAMILY_V6 ? 128 : 32),
				   .vip_id = bpf_htonl(vip_id), .addr = p->src };

	return bpf_map_lookup_elem(&src_ranges, &k) != NULL;
}

/* frag_key_of fills the datagram key of a fragment. */
static __always_inline void frag_key_of(struct frag_key *k, struct packet *p)
{
	k->src = p->src;
	k->dst = p->dst;
	k->id = p->frag_id;
	k->proto = p->proto;
	k->family = p->family;
}

/* reverse_maglev re-derives the frontend of an ambiguous endpoint's reply (be_addr:bport ->
 * client:cport) that has no conntrack entry: the frontend among rv's candidates whose Maglev
 * table maps the forward tuple (client:cport -> VIP:vport) to this endpoint, hashed exactly as
 * lb_forward hashes a new flow. Every gateway has the same tables, so this works on a gateway that
 * never saw the flow. Returns 1 and sets *vip_id, *vport when exactly one candidate matches; 0
 * when none does (the flow was pinned to an older choice, or no candidates) or several do (a
 * true collision): the caller then gives up as before. Bounded: REV_MAX_CANDIDATES iterations. */
static __always_inline int reverse_maglev(const struct rev_value *rv, const struct addr *be_addr,
					  const struct addr *client, __be16 bport, __be16 cport,
					  __u8 proto, __u8 family, __u32 *vip_id, __be16 *vport)
{
	__u32 found = 0;
	__be16 found_port = 0;
	int i;

	for (i = 0; i < REV_MAX_CANDIDATES; i++) {
		__u32 id = rv->cand[i], bid;
		struct vip_ref *ref;
		struct vip_info *vi;
		struct backend *be;
		__be16 dport, want;

		if (!id)
			break;
		ref = bpf_map_lookup_elem(&vip_by_id, &id);
		if (!ref || ref->key.family != family || ref->key.proto != proto)
			continue;
		vi = bpf_map_lookup_elem(&vips, &ref->key);
		if (!vi || (vi->flags & VIP_F_MARKER))
			continue;
		/* The forward packet's destination port: the service port, or for an all-ports VIP
		 * the port it kept through DNAT, which the reply carries as its source. */
		dport = ref->key.port ? ref->key.port : bport;
		bid = maglev_pick(vi, flow_hash(cfg_hash_seed, client, family, cport, dport, proto,
						vi->flags & VIP_F_AFFINITY_CLIENTIP));
		if (!bid)
			continue;
		be = bpf_map_lookup_elem(&backends, &bid);
		if (!be || be->family != family || !addr_eq(&be->addr, be_addr))
			continue;
		want = be->port ? be->port : dport; /* the port the forward packet was sent to */
		if (want != bport)
			continue;
		if (found)
			return 0; /* several frontends send this tuple here */
		found = id;
		found_port = ref->key.port;
	}
	if (!found)
		return 0;
	*vip_id = found;
	*vport = found_port ? found_port : bport;
	return 1;
}

/* reverse_vip finds the VIP (address, port) that a backend endpoint's packet to a client must
 * appear to come from, at time now. Returns 0 when found (reverse map or ct_reverse), 1 when
 * found by reverse_maglev (an ambiguous backend without a live ct_reverse entry), -1 when the
 * endpoint is not a backend, -2 when it is an ambiguous backend whose frontend neither ct_reverse
 * nor Maglev gives. */
static __always_inline int reverse_vip(const struct addr *be_addr, const struct addr *client,
				       __be16 bport, __be16 cport, __u8 proto, __u8 family,
				       __u64 now, struct svc_key **vip, __be16 *vport)
{
	struct rev_value *rv = svc_lookup_cached(SVC_CACHE_REVERSE, be_addr, family, bport, proto,
						 cache_gen());
	struct vip_ref *ref;
	__u32 vip_id;
	int rc = 0;

	if (!rv)
		return -1;
	if (rv->flags & REV_F_AMBIGUOUS) {
		/* The reverse entry first: the gateway that saw the flow knows its frontend for
		 * certain (even when the flow was pinned to an older Maglev choice). Only a live
		 * one: an entry idle past its timeout (its flow gone, the tuple perhaps reused) is
		 * not trusted; one in use is refreshed, as its forward entry is. */
		struct flow_key rk = { .src = *be_addr, .dst = *client, .sport = bport,
				       .dport = cport, .proto = proto, .family = family };
		struct ct_entry *ct = bpf_map_lookup_elem(&ct_reverse, &rk);

		if (ct && elapsed(now, ct->last_seen) > ct_timeout(proto, ct->flags))
			ct = NULL;
		if (ct) {
			vip_id = ct->vip_id;
			*vport = ct->vip_port;
			if (elapsed(now, ct->last_seen) > CT_REFRESH_NS)
				ct->last_seen = now;
		} else if (reverse_maglev(rv, be_addr, client, bport, cport, proto, family, &vip_id,
					  vport)) {
			rc = 1;
		} else {
			return -2;
		}
	} else {
		vip_id = rv->vip_id;
		*vport = rv->vip_port ? rv->vip_port : bport;
	}
	ref = bpf_map_lookup_elem(&vip_by_id, &vip_id);
	if (!ref || ref->key.family != family)
		return -1;
	*vip = &ref->key;
	return rc;
}

#endif
