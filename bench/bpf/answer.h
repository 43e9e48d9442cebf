/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* answer.h: turning a received TCP segment into the answer of a stateless peer, in place (the
 * connections-per-second mix: the sink's SYN-ACK, the client's ACK). Frames are Ethernet + IPv4
 * without options + TCP (consts.h offsets); the caller has checked TCP_HDR_END <= data_end. */
#ifndef BENCH_ANSWER_H
#define BENCH_ANSWER_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"

/* ANSWER_WORDS is the TCP header's words that change in an answer: sequence, acknowledgment,
 * data offset + flags, window (12 bytes from L4 + 4). */
#define ANSWER_WORDS 3

/* answer_fold turns a 32-bit ones' complement sum into the 16-bit checksum field. */
static __always_inline __u16 answer_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* answer swaps the frame's MACs, addresses and ports and writes seq, ack (host order) and flags
 * into its TCP header, updating the TCP checksum incrementally (swapping the addresses and ports
 * changes no sum; the IPv4 header's checksum stays valid). Returns 0, or -1 when the checksum
 * helper fails. */
static __always_inline int answer(void *data, __u32 seq, __u32 ack, __u8 flags)
{
	__u32 old[ANSWER_WORDS], neu[ANSWER_WORDS];
	__u8 mac[6];

	__builtin_memcpy(mac, data, 6);
	__builtin_memcpy(data, data + 6, 6);
	__builtin_memcpy(data + 6, mac, 6);
	__u32 a = *(__u32 *)(data + OFF_IP_SADDR);
	*(__u32 *)(data + OFF_IP_SADDR) = *(__u32 *)(data + OFF_IP_DADDR);
	*(__u32 *)(data + OFF_IP_DADDR) = a;
	__u16 p = *(__u16 *)(data + OFF_SPORT);
	*(__u16 *)(data + OFF_SPORT) = *(__u16 *)(data + OFF_DPORT);
	*(__u16 *)(data + OFF_DPORT) = p;

	__builtin_memcpy(old, data + OFF_TCP_SEQ, sizeof(old));
	neu[0] = bpf_htonl(seq);
	neu[1] = bpf_htonl(ack);
	neu[2] = old[2];
	((__u8 *)neu)[9] = flags; /* the flags byte: L4 + 13 = word 2, byte 1 */
	__builtin_memcpy(data + OFF_TCP_SEQ, neu, sizeof(neu));
	__u16 *csum = data + OFF_TCP_CSUM;
	__s64 s = bpf_csum_diff(old, sizeof(old), neu, sizeof(neu), (__u32)(__u16)~*csum);
	if (s < 0)
		return -1;
	*csum = answer_fold((__u64)s);
	return 0;
}

#endif
