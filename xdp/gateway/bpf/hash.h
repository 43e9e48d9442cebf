/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hash.h: the address-filter hash (one multiply), and the flow hash (flowhash.h, shared with
 * the other datapaths). xdp/gateway/hash.go implements filter_bit bit for bit. */
#ifndef XLB_HASH_H
#define XLB_HASH_H

#include <linux/types.h>
#include "flowhash.h"
#include "consts.h"

/* ADDR_FILTER_MUL: the address filter's multiplier, 2^32/φ made odd (Fibonacci hashing:
 * addresses that differ in any bit land far apart in the product's top bits). */
#define ADDR_FILTER_MUL 0x9e3779b1u

/* filter_bit: the address filter's bit index for an address: its word times ADDR_FILTER_MUL,
 * the product's top ADDR_FILTER_LOG2 bits (an IPv6 address's four words are chained, each
 * product xored with the next word, so that no two words can cancel out). Every packet pays it
 * first: one multiply for IPv4, four for IPv6, where a murmur hash takes five (eight). */
static __always_inline __u32 filter_bit(const struct addr *a, __u8 family)
{
	__u32 x = a->w[0];

	if (family == FAMILY_V6) {
		x = (x * ADDR_FILTER_MUL) ^ a->w[1];
		x = (x * ADDR_FILTER_MUL) ^ a->w[2];
		x = (x * ADDR_FILTER_MUL) ^ a->w[3];
	}
	return (x * ADDR_FILTER_MUL) >> (32 - ADDR_FILTER_LOG2);
}

#endif
