/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* csum.h: incremental Internet checksum updates (RFC 1624). A "diff" accumulates, in ones'
 * complement, ~old + new for every changed 16/32-bit word, in memory order; csum_apply folds it
 * into a checksum field. Byte order does not matter as long as words are loaded as stored. */
#ifndef XLB_CSUM_H
#define XLB_CSUM_H

#include <linux/types.h>
#include "datapath.h"

static __always_inline __u32 csum_add(__u32 csum, __u32 addend)
{
	csum += addend;
	return csum + (csum < addend);
}

static __always_inline __u16 csum_fold(__u32 csum)
{
	csum = (csum & 0xffff) + (csum >> 16);
	csum = (csum & 0xffff) + (csum >> 16);
	return (__u16)csum;
}

/* diff32 adds the change of one 32-bit word. */
static __always_inline __u32 diff32(__u32 diff, __u32 from, __u32 to)
{
	return csum_add(csum_add(diff, ~from), to);
}

/* diff16 adds the change of one 16-bit word. */
static __always_inline __u32 diff16(__u32 diff, __u16 from, __u16 to)
{
	return csum_add(diff, ((__u32)(__u16)~from) + to);
}

/* diff_addr adds the change of an address (1 or 4 words). */
static __always_inline __u32 diff_addr(__u32 diff, const struct addr *from, const struct addr *to,
				       __u8 family)
{
	diff = diff32(diff, from->w[0], to->w[0]);
	if (family == FAMILY_V6) {
		diff = diff32(diff, from->w[1], to->w[1]);
		diff = diff32(diff, from->w[2], to->w[2]);
		diff = diff32(diff, from->w[3], to->w[3]);
	}
	return diff;
}

/* csum_apply returns checksum field value sum updated by diff. */
static __always_inline __u16 csum_apply(__u16 sum, __u32 diff)
{
	return ~csum_fold(csum_add((__u16)~sum, diff));
}

/* csum_apply_udp is csum_apply for a UDP checksum: 0 stays 0 over IPv4 ("no checksum"),
 * and a computed 0 is sent as 0xffff. */
static __always_inline __u16 csum_apply_udp(__u16 sum, __u32 diff)
{
	__u16 r;

	if (sum == 0)
		return 0;
	r = csum_apply(sum, diff);
	return r ? r : 0xffff;
}

#endif
