/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* flowhash.h: the flow hash that picks a Maglev slot (MurmurHash3 x86_32). It reads addresses
 * as 32-bit words in memory order (little-endian loads of the wire bytes). datapath.FlowHash
 * (flowhash.go) implements the same function bit for bit; every gateway datapath picks with it. */
#ifndef XLB_FLOWHASH_H
#define XLB_FLOWHASH_H

#include "datapath.h"

#define MURMUR_C1 0xcc9e2d51u
#define MURMUR_C2 0x1b873593u

static __always_inline __u32 rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

/* murmur_mix folds one 32-bit word into the running hash h. */
static __always_inline __u32 murmur_mix(__u32 h, __u32 k)
{
	k *= MURMUR_C1;
	k = rotl32(k, 15);
	k *= MURMUR_C2;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64u;
}

/* murmur_final finishes a hash over nbytes bytes. */
static __always_inline __u32 murmur_final(__u32 h, __u32 nbytes)
{
	h ^= nbytes;
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* hash_addr hashes the words of an address: 1 for IPv4, 4 for IPv6. */
static __always_inline __u32 hash_addr(__u32 h, const struct addr *a, __u8 family)
{
	h = murmur_mix(h, a->w[0]);
	if (family == FAMILY_V6) {
		h = murmur_mix(h, a->w[1]);
		h = murmur_mix(h, a->w[2]);
		h = murmur_mix(h, a->w[3]);
	}
	return h;
}

/* flow_hash: the Maglev hash of a new flow. Words: client address, then (unless only the
 * address counts, for ClientIP affinity) the port word {sport, dport} as on the wire and the
 * protocol. */
static __always_inline __u32 flow_hash(__u32 seed, const struct addr *src, __u8 family,
				       __be16 sport, __be16 dport, __u8 proto, int addr_only)
{
	__u32 n = family == FAMILY_V6 ? 16 : 4;
	__u32 h = hash_addr(seed, src, family);

	if (!addr_only) {
		h = murmur_mix(h, (__u32)sport | ((__u32)dport << 16));
		h = murmur_mix(h, proto);
		n += 8;
	}
	return murmur_final(h, n);
}

#endif
