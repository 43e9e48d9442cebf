/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* parse.h: Ethernet (+ one 802.1Q/802.1ad tag), IPv4, IPv6 with its extension headers, and the
 * first bytes of TCP/UDP/ICMP. Parsing never writes the packet. */
#ifndef XLB_PARSE_H
#define XLB_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"

/* be16_len returns a 16-bit big-endian length field (IPv4 tot_len, IPv6 payload_len, UDP len) in
 * host order, bounded to 0..0xffff for every kernel's verifier. Older verifiers (Debian 12's
 * backported 6.12 rejected xlb's object; 6.18 does not) know nothing of a byte swap's result: the
 * swapped value is an unbounded scalar, and adding it to a packet pointer ("math between pkt
 * pointer and register with unbounded min value") fails the load. The mask restores the bound;
 * the empty asm keeps clang from dropping the mask, which it knows to be redundant (not volatile:
 * clang may still merge two of them, and a volatile one made the object a quarter larger). */
static __always_inline __u32 be16_len(__be16 v)
{
	__u32 x = bpf_ntohs(v);

	asm("" : "+r"(x));
	return x & 0xffff;
}

/* What the parser learned about a packet. */
struct packet {
	struct ethhdr *eth;
	void *l3;            /* struct iphdr or struct ipv6hdr */
	void *l4;            /* L4 header, or NULL in a non-first fragment */
	void *l3_end;        /* end of the IP datagram as its length field says */
	struct addr src;
	struct addr dst;
	__be16 sport;        /* for ICMP: 0 */
	__be16 dport;
	__u32 tcp_seq;       /* TCP: the sequence number, host order */
	__u32 frag_id;       /* valid when is_frag */
	__u16 pkt_len;       /* bytes from Ethernet header to data_end */
	__u8 family;
	__u8 proto;          /* L4 protocol after extension headers */
	__u8 tcp_flags;
	__u8 is_frag;        /* a fragment (first or not) */
	__u8 vlan;           /* one VLAN tag present */
};

enum parse_result {
	PARSE_OK = 0,
	PARSE_NOT_IP,        /* pass: not IP */
	PARSE_BAD_L3,        /* pass: IP header does not add up */
	PARSE_IPV6_EXT,      /* pass: extension headers we do not walk */
};

/* Largest offset of an L4 header after IPv6 extension headers that we handle. */
#define IPV6_L4_MAX_OFF 1024

/* ipv6_walk walks the IPv6 extension headers starting at cur (next = the IPv6 next header) and
 * leaves what it found in the per-CPU scratch x: the offset of the upper-layer header, the
 * protocol, the fragment fields, and a parse_result. Its many paths (one per header sequence)
 * all end by storing into x; the caller reads x back, so the verifier continues with a single
 * state whatever the headers were. */
static __always_inline void ipv6_walk(void *data, void *data_end, void *cur, __u8 next,
				      struct ipv6_ext *x)
{
	x->result = PARSE_IPV6_EXT;
#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX; i++) {
		struct { __u8 next; __u8 len; __be16 frag_off; __be32 id; } *ext = cur;

		switch (next) {
		case PROTO_ROUTING:
			/* With segments left, the destination is not the final one and the L4
			 * checksum covers another address: not ours to rewrite. */
			if ((void *)ext + 8 > data_end) {
				x->result = PARSE_BAD_L3;
				return;
			}
			if (((__u8 *)ext)[3]) {
				x->result = PARSE_IPV6_EXT;
				return;
			}
			next = ext->next;
			cur += (ext->len + 1) * 8;
			break;
		case PROTO_HOPOPTS:
		case PROTO_DSTOPTS:
			if ((void *)ext + 8 > data_end) {
				x->result = PARSE_BAD_L3;
				return;
			}
			next = ext->next;
			cur += (ext->len + 1) * 8;
			break;
		case PROTO_AH:
			if ((void *)ext + 8 > data_end) {
				x->result = PARSE_BAD_L3;
				return;
			}
			next = ext->next;
			cur += (ext->len + 2) * 4;
			break;
		case PROTO_FRAGMENT:
			if ((void *)(ext + 1) > data_end) {
				x->result = PARSE_BAD_L3;
				return;
			}
			next = ext->next;
			x->is_frag = 1;
			x->frag_id = ext->id;
			cur += 8;
			if (ext->frag_off & bpf_htons(0xFFF8)) {
				x->nonfirst = 1;
				x->proto = next;
				x->off = cur - data;
				x->result = PARSE_OK;
				return;
			}
			break;
		default:
			x->proto = next;
			x->off = cur - data;
			x->result = PARSE_OK;
			return;
		}
	}
}

/* parse_l3 parses up to the start of L4 and fills p. */
static __always_inline int parse_l3(void *data, void *data_end, struct packet *p)
{
	struct ethhdr *eth = data;
	__be16 proto;
	void *cur;

	if ((void *)(eth + 1) > data_end)
		return PARSE_NOT_IP;
	p->eth = eth;
	p->pkt_len = data_end - data;
	proto = eth->h_proto;
	cur = eth + 1;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		struct { __be16 tci; __be16 proto; } *vh = cur;

		if ((void *)(vh + 1) > data_end)
			return PARSE_NOT_IP;
		proto = vh->proto;
		cur = vh + 1;
		p->vlan = 1;
	}

	if (proto == ETH_P_IP_BE) {
		struct iphdr *iph = cur;
		__u32 hlen, tot;

		if ((void *)(iph + 1) > data_end)
			return PARSE_BAD_L3;
		hlen = iph->ihl * 4;
		tot = be16_len(iph->tot_len);
		if (iph->version != 4 || hlen < sizeof(*iph) || tot < hlen ||
		    cur + tot > data_end)
			return PARSE_BAD_L3;
		p->family = FAMILY_V4;
		p->l3 = iph;
		p->l3_end = cur + tot;
		p->proto = iph->protocol;
		p->src.w[0] = iph->saddr;
		p->dst.w[0] = iph->daddr;
		if (iph->frag_off & (IP_MF_BE | IP_OFFSET_BE)) {
			p->is_frag = 1;
			p->frag_id = iph->id;
			if (iph->frag_off & IP_OFFSET_BE)
				return PARSE_OK; /* l4 stays NULL */
		}
		p->l4 = cur + hlen;
		return PARSE_OK;
	}

	if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return PARSE_BAD_L3;
		if (ip6->version != 6 ||
		    (void *)(ip6 + 1) + be16_len(ip6->payload_len) > data_end)
			return PARSE_BAD_L3;
		p->family = FAMILY_V6;
		p->l3 = ip6;
		p->l3_end = (void *)(ip6 + 1) + be16_len(ip6->payload_len);
		__builtin_memcpy(&p->src, &ip6->saddr, sizeof(p->src));
		__builtin_memcpy(&p->dst, &ip6->daddr, sizeof(p->dst));
		{
			__u32 zero = 0;
			struct ipv6_ext *x = bpf_map_lookup_elem(&v6_scratch, &zero);
			__u32 off;

			if (!x)
				return PARSE_BAD_L3;
			*x = (struct ipv6_ext){};
			ipv6_walk(data, data_end, ip6 + 1, ip6->nexthdr, x);
			barrier_var(x);
			if (x->result != PARSE_OK)
				return x->result;
			p->proto = x->proto;
			p->is_frag = x->is_frag;
			p->frag_id = x->frag_id;
			if (x->nonfirst)
				return PARSE_OK; /* non-first fragment: l4 stays NULL */
			off = x->off;
			if (off > IPV6_L4_MAX_OFF)
				return PARSE_BAD_L3;
			cur = data + off;
			if (cur > p->l3_end)
				return PARSE_BAD_L3;
			p->l4 = cur;
			return PARSE_OK;
		}
	}
	return PARSE_NOT_IP;
}

/* parse_ports reads the ports (and TCP flags) of a packet with an L4 header. It returns 0 on
 * success, -1 when the header is truncated or its lengths lie. ICMP needs 8 bytes. */
static __always_inline int parse_ports(void *data_end, struct packet *p)
{
	void *l4 = p->l4;

	if (p->proto == PROTO_TCP) {
		struct tcphdr *th = l4;
		__u32 doff;

		if ((void *)(th + 1) > data_end || (void *)(th + 1) > p->l3_end)
			return -1;
		doff = th->doff * 4;
		if (doff < sizeof(*th) || l4 + doff > p->l3_end)
			return -1;
		p->sport = th->source;
		p->dport = th->dest;
		p->tcp_flags = ((__u8 *)th)[13];
		p->tcp_seq = bpf_ntohl(th->seq);
		return 0;
	}
	if (p->proto == PROTO_UDP) {
		struct udphdr *uh = l4;
		__u32 len;

		if ((void *)(uh + 1) > data_end || (void *)(uh + 1) > p->l3_end)
			return -1;
		len = be16_len(uh->len);
		/* A fragment's UDP length covers the whole datagram; otherwise it must fit. */
		if (len < sizeof(*uh) || (!p->is_frag && l4 + len > p->l3_end))
			return -1;
		p->sport = uh->source;
		p->dport = uh->dest;
		return 0;
	}
	if (p->proto == PROTO_ICMP || p->proto == PROTO_ICMPV6) {
		if (l4 + 8 > data_end || l4 + 8 > p->l3_end)
			return -1;
		return 0;
	}
	return -1;
}

#endif
