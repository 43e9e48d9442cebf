/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* kernel.h: the few kernel types reap.c reads, declared with only the fields it uses. They are
 * CO-RE types (preserve_access_index): the loader relocates every field access against the
 * running kernel's BTF, so their layout here does not matter, only the names. A whole
 * vmlinux.h would tie the committed object to the kernel it was generated on. */
#ifndef XLB_SOCKLB_KERNEL_H
#define XLB_SOCKLB_KERNEL_H

#include <linux/types.h>
#include <linux/in6.h>

/* Socket families and the state of a connected UDP socket, as the kernel has them. */
#define SK_AF_INET 2
#define SK_AF_INET6 10
#define SK_TCP_ESTABLISHED 1

struct sock_common {
	union {
		struct {
			__be32 skc_daddr; /* the peer (IPv4) */
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport; /* the peer's port */
			__u16 skc_num;
		};
	};
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr; /* the peer (IPv6) */
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct udp_sock;
struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

/* The context of an iter/udp program: one socket per call, NULL at the end of the walk. */
struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

#endif
