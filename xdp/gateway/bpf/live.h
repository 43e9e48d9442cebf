/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* live.h: the live-flow filter (docs/datapath.md, "Conntrack and the flood policy").
 *
 * A SYN must know whether its tuple has a live conntrack entry (ct_syn_kept), and a datagram
 * whether its flow has one: in a conntrack of a million entries that lookup is a miss in a hash
 * of a million buckets for nearly every new tuple, the single largest cost of a new connection or
 * datagram flow. The filter answers first: one bit per hash of the tuple, set whenever the
 * datapath creates or revives a forward conntrack entry. A clear bit proves there is no entry
 * that could be live (a set one may be a collision or an entry since evicted: conntrack decides),
 * so the lookup is made only behind a set bit. The bits live in the tuple's own handshake slot
 * (hs_entry.live), a cache line a new flow's first packets read and write anyway (a SYN and its
 * ACK, a first datagram and its second), so asking the filter and marking it cost no line of
 * their own. Bits are never cleared here: the loader rebuilds the idle half from conntrack and
 * switches to it (xdp/gateway/live.go), and the datapath sets bits in both halves so that no entry made
 * during a rebuild is missed. */
#ifndef XLB_LIVE_H
#define XLB_LIVE_H

#include "maps.h"
#include "lb.h"
#include "hs.h"

/* live_bit returns the bit of the tuple of hash (tuple_hash) in a half of its slot's live word:
 * tuple_hash's top LIVE_SLOT_LOG2 bits pick it (its low bits pick the slot). */
static __always_inline __u32 live_bit(__u32 hash)
{
	return 1u << (hash >> (32 - LIVE_SLOT_LOG2));
}

/* live_mask returns the tuple's bit in both halves of its slot's live word. */
static __always_inline __u32 live_mask(__u32 hash)
{
	return live_bit(hash) * (1u | 1u << LIVE_SLOT_BITS);
}

/* live_mark sets the bit of the tuple of hash (tuple_hash) in both halves: called wherever a
 * forward conntrack entry is created or revived. The atomic or is skipped when the bits are set
 * already, so a busy tuple does not keep writing a cache line other CPUs read. The object is
 * built for BPF v1, which has 64-bit atomics only: the or is made on the aligned 64-bit word of
 * check and live, live its high half (the object is little-endian, bpfel), which leaves check as
 * it is even when a SYN writes it at the same moment. A global function: the verifier checks it
 * once. */
__noinline int live_mark(__u32 hash)
{
	struct hs_entry *e = hs_slot(hash);
	__u32 mask = live_mask(hash);

	if (e && (e->live & mask) != mask)
		__sync_fetch_and_or((__u64 *)&e->check, (__u64)mask << 32);
	return 0;
}

/* live_maybe reports whether conntrack may hold a live forward entry for the tuple of hash
 * (tuple_hash): 0 proves it does not. It reads the half that map clock names. */
static __always_inline int live_maybe(__u32 hash)
{
	__u32 zero = 0;
	struct clock_value *c = bpf_map_lookup_elem(&clock, &zero);
	struct hs_entry *e = hs_slot(hash);

	if (!c || !e)
		return 1;
	return ((e->live >> ((c->live_half & 1) * LIVE_SLOT_BITS)) & live_bit(hash)) != 0;
}

#endif
