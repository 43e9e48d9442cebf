/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* filter.h: the endpoint filter. Every TCP or UDP packet an interface sends goes through the
 * egress program, and almost none is a reply of a recorded flow; looking each up in flows is a
 * kernel call (~40 ns on CPUs with return-thunk mitigations, where every call pays them). A
 * bitmap indexed by a hash of the source address, with a bit set for every address that is an
 * allowed pair's endpoint (or, after a restart, a recorded flow's Pod), lets the rest go after
 * an inlined array read. A set bit may be a collision: flows decides. Go (xdp/dsr's epBit)
 * computes the same index. */
#ifndef XLB_DSR_FILTER_H
#define XLB_DSR_FILTER_H

#include "maps.h"

/* EP_FILTER_MUL: 2^32/φ made odd (Fibonacci hashing: addresses that differ in any bit land
 * far apart in the product's top bits). */
#define EP_FILTER_MUL 0x9e3779b1u

/* ep_bit is the filter's bit index of address a: its word times EP_FILTER_MUL, the product's
 * top EP_FILTER_LOG2 bits (an IPv6 address's words chained, each product xored with the next
 * word). */
static __always_inline __u32 ep_bit(const struct addr *a, __u8 family)
{
	__u32 x = a->w[0];

	if (family == FAMILY_V6) {
		x = (x * EP_FILTER_MUL) ^ a->w[1];
		x = (x * EP_FILTER_MUL) ^ a->w[2];
		x = (x * EP_FILTER_MUL) ^ a->w[3];
	}
	return (x * EP_FILTER_MUL) >> (32 - EP_FILTER_LOG2);
}

/* maybe_endpoint reports whether a may be an endpoint's address (its bit is set). */
static __always_inline int maybe_endpoint(const struct addr *a, __u8 family)
{
	__u32 bit = ep_bit(a, family);
	__u32 word = bit / 64;
	__u64 *w = bpf_map_lookup_elem(&ep_filter, &word);

	return w && (*w & (1ull << (bit % 64)));
}

#endif
