/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hs.h: the handshake table (map hs_slots; docs/datapath.md, "The handshake table"): where each
 * TCP handshake in flight sent its SYN, one direct-mapped slot per tuple hash. */
#ifndef XLB_HS_H
#define XLB_HS_H

#include "maps.h"
#include "lb.h"

/* HS_CHECK_MUL spreads the fields hs_check folds together. */
#define HS_CHECK_MUL 0x9e3779b1u

/* hs_check folds a tuple's hash and the backend, VIP and sequence number written for it into the
 * word an entry carries, so that a slot two CPUs wrote at once (fields of two SYNs) reads as no
 * entry rather than as a tuple with another SYN's backend. */
static __always_inline __u32 hs_check(__u32 hash, __u32 backend_id, __u32 vip_id, __u32 isn)
{
	return ((hash ^ backend_id) * HS_CHECK_MUL ^ vip_id) * HS_CHECK_MUL ^ isn;
}

/* hs_slot returns the slot of the tuple of hash (tuple_hash) in hs_slots. */
static __always_inline struct hs_entry *hs_slot(__u32 hash)
{
	__u32 i = hash & cfg_hs_mask;

	return bpf_map_lookup_elem(&hs_slots, &i);
}

/* HS_PROBE_HOLDS is set in hs_probe's result when the slot holds the tuple's entry. */
#define HS_PROBE_HOLDS (1ull << 32)

/* hs_probe asks the slot of fk (hash its tuple_hash) for a packet of VIP vip_id at time now:
 * HS_PROBE_HOLDS when the slot holds a whole entry for fk (its tuple, and a check word that
 * matches its fields), ored with the entry's backend if the packet may use it (hs_backend: match
 * and seq are mseq's high and low 32 bits). A global function: the verifier checks it once, and
 * the paths near its limits that call it see only its result. */
__noinline __u64 hs_probe(const struct flow_key *fk, __u32 hash, __u32 vip_id, __u64 now,
			  __u64 mseq)
{
	struct hs_entry *e;

	if (!fk)
		return 0;
	e = hs_slot(hash);
	if (!e || !flow_key_eq(&e->key, fk) ||
	    e->check != hs_check(hash, e->backend_id, e->vip_id, e->isn))
		return 0;
	return HS_PROBE_HOLDS | hs_backend(e, vip_id, now, mseq >> 32, (__u32)mseq);
}

/* hs_write records in slot e that the SYN of fk (hash its tuple_hash) went to backend bid of VIP
 * vip_id at time now, with sequence number isn, taking the slot over from whatever it held. */
static __always_inline void hs_write(struct hs_entry *e, const struct flow_key *fk, __u32 hash,
				     __u64 now, __u32 bid, __u32 vip_id, __u32 isn)
{
	e->key = *fk;
	e->syn_time = hs_time(now);
	e->backend_id = bid;
	e->vip_id = vip_id;
	e->isn = isn;
	e->check = hs_check(hash, bid, vip_id, isn);
}

/* hs_retire empties slot e: its handshake completed (the conntrack entry took over). The slot's
 * live-flow filter bits stay. */
static __always_inline void hs_retire(struct hs_entry *e)
{
	e->key.family = 0;
}

#endif
