/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* frag.h: the fragments of one datagram follow its first fragment. Only the first fragment
 * carries the L4 ports, so the datapath remembers them in frags, keyed by the datagram
 * {src, dst, IP ID, proto}, and a later fragment takes them from there: it is then balanced (or
 * reverse-NATed) as its first fragment was, to the same backend.
 *
 * What is remembered, and when (written for any first fragment before the VIP, side and
 * source-range checks, without expiry or budget, the table would be a flood's to fill):
 * - only a first fragment the datapath is about to DNAT to a backend (forward(): it passed the
 *   VIP lookup, the side checks and the VIP's source ranges) or to reverse-NAT (lb_reverse: a
 *   backend's reply from the cluster side). Anything dropped, passed, or of no VIP leaves nothing;
 * - with its time: a later fragment ignores (and deletes) an entry older than FRAG_TIMEOUT_NS;
 * - at most FRAG_BUDGET first fragments per RATE_WINDOW_NS over all CPUs; above it the first
 *   fragment is still forwarded, not remembered (frag_rate_limited): its later fragments are
 *   dropped as of an unknown datagram. */
#ifndef XLB_FRAG_H
#define XLB_FRAG_H

#include "lb.h"
#include "stats.h"

/* frag_budget_allow takes one first fragment out of the global budget: 1 if it may be
 * remembered. The window is reset by whichever CPU sees it over; without atomic fetch (BPF v1) two
 * racing CPUs may each take the last unit, so the budget holds give or take the CPUs' count. */
static __always_inline int frag_budget_allow(__u64 now)
{
	__u32 zero = 0;
	struct frag_budget *b = bpf_map_lookup_elem(&frag_budget, &zero);

	if (!b)
		return 0;
	if (now - b->start >= RATE_WINDOW_NS) { /* also when now < start (a clock set back) */
		b->start = now;
		b->count = 0;
	}
	if (b->count >= FRAG_BUDGET) {
		count_reason(REASON_FRAG_RATE_LIMITED);
		return 0;
	}
	__sync_fetch_and_add(&b->count, 1);
	return 1;
}

/* frag_remember records the ports of p, if it is a first fragment, for its later fragments, at
 * time now. Called only where the datapath has accepted p and is about to rewrite it (forward,
 * lb_reverse), before the rewrite: the key and the ports are the ones the later fragments carry.
 * The entry is built in frag_scratch, not on the stack: its callers have none to spare. */
static __always_inline void frag_remember(struct packet *p, __u64 now)
{
	__u32 zero = 0;
	struct frag_scratch *sc;

	if (!p->is_frag || !p->l4 || !frag_budget_allow(now))
		return;
	sc = bpf_map_lookup_elem(&frag_scratch, &zero);
	if (!sc)
		return;
	__builtin_memset(&sc->key, 0, sizeof(sc->key));
	frag_key_of(&sc->key, p);
	sc->ports.seen = now;
	sc->ports.sport = p->sport;
	sc->ports.dport = p->dport;
	sc->ports.pad = 0;
	bpf_map_update_elem(&frags, &sc->key, &sc->ports, BPF_ANY);
}

/* frag_recall gives a non-first fragment p the ports of its first fragment: 0 when known and
 * fresh, -1 otherwise (an entry older than FRAG_TIMEOUT_NS is deleted: frag_expired). */
static __always_inline int frag_recall(struct packet *p, __u64 now)
{
	struct frag_key k = {};
	struct frag_ports *fp;

	frag_key_of(&k, p);
	fp = bpf_map_lookup_elem(&frags, &k);
	if (!fp)
		return -1;
	if (elapsed(now, fp->seen) > FRAG_TIMEOUT_NS) {
		bpf_map_delete_elem(&frags, &k);
		count_reason(REASON_FRAG_EXPIRED);
		return -1;
	}
	p->sport = fp->sport;
	p->dport = fp->dport;
	return 0;
}

#endif
