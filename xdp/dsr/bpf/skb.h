/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* skb.h: reading and writing a TC program's packet. Headers are read through pointers into the
 * packet's linear part (hdr); every write goes through a helper (bpf_skb_store_bytes, the
 * checksum helpers, bpf_skb_adjust_room). No direct write anywhere: a program that writes the
 * packet directly gets a prologue from the kernel that copies every cloned packet (one a
 * tcpdump or another tap also holds) before the program runs, even a packet it leaves alone;
 * the helpers copy only the packets they change. */
#ifndef XLB_DSR_SKB_H
#define XLB_DSR_SKB_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "datapath.h"

/* The programs run on Ethernet interfaces (the loader refuses others): the packet starts with
 * a 14-byte Ethernet header. A VLAN tag the NIC did not take off leaves skb->protocol 802.1Q:
 * such packets are left alone (attach to the VLAN interface instead). */
#define ETH_HLEN     14
#define ETH_P_IP_BE   bpf_htons(0x0800)
#define ETH_P_IPV6_BE bpf_htons(0x86DD)

#define IPV4_HLEN  20 /* an IPv4 header without options */
#define IPV6_HLEN  40
#define FRAG6_HLEN 8  /* an IPv6 Fragment header */
#define ICMP_HLEN  8  /* type, code, checksum, 4 more bytes; the quoted packet follows */

#define PROTO_ICMP     1
#define PROTO_FRAGMENT 44
#define PROTO_ICMPV6   58

/* IPv4 frag_off bits (host order); the IPv6 Fragment header's offset bits and M flag. */
#define IP_MF        0x2000
#define IP_OFFSET    0x1fff
#define IP6_OFFSET   0xfff8
#define IP6_MF       0x0001

/* Offsets of the checksum in a TCP and a UDP header. */
#define TCP_CSUM_OFF 16
#define UDP_CSUM_OFF 6

/* The TCP header's flags byte, and the flags SYNs and SYN-ACKs are told by. */
#define TCP_FLAGS_OFF 13
#define TCPF_SYN      0x02
#define TCPF_ACK      0x10

/* The largest offset hdr reads at: Ethernet, an IPv4 header with 40 bytes of options or IPv6
 * with the carrier and a Fragment header, an ICMP header, a quoted IPv4 header with options,
 * the quoted TCP checksum. */
#define MAX_HDR_OFF 256

/* hdr returns a pointer to len bytes of skb at off, or NULL when the packet is shorter. When
 * they are in the packet but not in its linear part (rare: drivers and the stack keep the
 * headers linear), it pulls them in first. A helper that changes the packet invalidates the
 * pointer: read what is needed before writing. */
static __always_inline void *hdr(struct __sk_buff *skb, __u32 off, const __u32 len)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;

	if (off > MAX_HDR_OFF)
		return NULL;
	if (data + off + len <= data_end)
		return data + off;
	if (off + len > skb->len || bpf_skb_pull_data(skb, off + len) < 0)
		return NULL;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (off > MAX_HDR_OFF || data + off + len > data_end)
		return NULL;
	return data + off;
}

/* A packet as the egress program parsed it. */
struct pkt {
	struct addr src;
	struct addr dst;
	__u32 l4;          /* offset of the L4 header */
	__u32 frag_id;     /* is_frag: the datagram's id */
	__u16 ip_check;    /* IPv4: the header checksum */
	__u8 family;
	__u8 proto;
	__u8 is_frag;      /* a fragment (first or later) */
	__u8 pad[3];
};

#endif
