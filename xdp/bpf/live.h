/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* live.h: the live-flow filter (docs/datapath.md, "Conntrack and the flood policy").
 *
 * A SYN must know whether its tuple has a live conntrack entry (ct_syn_kept): in a conntrack of a
 * million entries that lookup is a miss in a hash of a million buckets for nearly every new
 * tuple, the single largest cost of a new connection. ct_live answers first: one bit per hash of
 * the tuple, set whenever the datapath creates or revives a forward TCP entry (only a SYN asks,
 * and a SYN is TCP). A clear bit proves there is no entry that could be live (a
 * set one may be a collision or an entry since evicted: conntrack decides), so the lookup is made
 * only behind a set bit. Bits are never cleared here: the loader rebuilds the idle half from
 * conntrack and switches to it (xdp/live.go), and the datapath sets bits in both halves so that
 * no entry made during a rebuild is missed. */
#ifndef XLB_LIVE_H
#define XLB_LIVE_H

#include "maps.h"
#include "lb.h"

/* live_bit returns fk's bit in a half of ct_live: tuple_hash's top LIVE_FILTER_LOG2 bits. */
static __always_inline __u32 live_bit(__u32 hash)
{
	return hash >> (32 - LIVE_FILTER_LOG2);
}

/* live_mark sets the bit of the tuple of hash (tuple_hash) in both halves of ct_live: called
 * wherever a forward conntrack entry is created or revived. The atomic or is skipped when the bit
 * is set already, so a busy tuple does not keep writing a cache line other CPUs read. A global
 * function: the verifier checks it once. */
__noinline int live_mark(__u32 hash)
{
	__u32 bit = live_bit(hash), word = bit / 64 * 2;
	__u64 mask = 1ull << (bit % 64), *w;

	w = bpf_map_lookup_elem(&ct_live, &word);
	if (w && !(*w & mask))
		__sync_fetch_and_or(w, mask);
	word++;
	w = bpf_map_lookup_elem(&ct_live, &word);
	if (w && !(*w & mask))
		__sync_fetch_and_or(w, mask);
	return 0;
}

/* live_maybe reports whether conntrack may hold a live forward entry for the tuple of hash
 * (tuple_hash): 0 proves it does not. It reads the half of ct_live that map clock names. */
static __always_inline int live_maybe(__u32 hash)
{
	__u32 zero = 0, bit = live_bit(hash), word;
	struct clock_value *c = bpf_map_lookup_elem(&clock, &zero);
	__u64 *w;

	if (!c)
		return 1;
	word = bit / 64 * 2 + (c->live_half & 1);
	w = bpf_map_lookup_elem(&ct_live, &word);
	if (!w)
		return 1;
	return (*w >> (bit % 64)) & 1;
}

#endif
