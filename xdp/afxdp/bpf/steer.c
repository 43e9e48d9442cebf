// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* steer.c: the kernel half of xlb's AF_XDP datapath. Attached to every interface the datapath
 * serves, it hands the frames the userspace engine balances to its AF_XDP socket on the frame's
 * receive queue, and everything else to the kernel untouched:
 *   - to a VIP: IPv4/IPv6 TCP or UDP whose {dst, dport, proto} or {dst, 0, proto} is in steer
 *     with STEER_TO_VIP;
 *   - from a backend: {src, sport, proto} or {src, 0, proto} in steer with STEER_FROM_BACKEND,
 *     when the kernel would forward it (not a health-check reply to this host, see routed);
 *   - ICMP (ICMPv6), not fragmented: an echo request to a VIP address (the engine answers it,
 *     or drops it for the address's source ranges), an error (destination unreachable, packet
 *     too big, time exceeded) to a VIP address (a client-side error about a VIP flow), and an
 *     error whose quoted packet is to a backend endpoint (a cluster-side error about a flow the
 *     engine sent there: the quote's {dst, dport, proto} or {dst, 0, proto} with
 *     STEER_FROM_BACKEND). The engine relays an error about a flow it knows and drops the rest,
 *     as the XDP datapath's icmp.h does.
 * Frames of ours that the engine leaves to the kernel are passed here, as the XDP datapath passes
 * them: an expiring TTL (the kernel answers with ICMP) and a backend's IPv4 fragment. The
 * engine keeps no fragment state, so an IPv4 fragment to a VIP address is dropped (passed, it
 * would loop between the gateway and its router, or reach the gateway's own sockets). VLAN-tagged
 * frames, IPv6 extension headers and any other protocol are never steered; anything else to a
 * VIP address that no frontend has is dropped (another protocol or ICMP type: here; TCP/UDP:
 * by the engine). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* What every xlb program shares (FAMILY_*, ICMP types; xdp/datapath). */
#include "datapath.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Directions of a steer key. */
#define STEER_TO_VIP 1       /* match the destination: a VIP frontend */
#define STEER_FROM_BACKEND 2 /* match the source: a backend endpoint */
#define STEER_VIP_ADDR 3     /* port and proto 0: the address is a VIP's (echo requests) */

/* MAX_QUEUES bounds the receive queues of one interface the datapath serves. */
#define MAX_QUEUES 256

/* The IPv4 fragment bits: MF and the offset. */
#define IP_FRAG_MASK 0x3fff

/* A steer key: an address (IPv4 in addr[0], the rest zero), a port in network order (0: every
 * port), the IP protocol, the direction and the family. */
struct steer_key {
	__u32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 dir;
	__u8 family;
	__u8 pad[3];
};

/* steer: the frontends and backend endpoints the engine serves -> 1. Written by Go (the engine's
 * only writer), shared by the program of every interface. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct steer_key);
	__type(value, __u8);
	__uint(max_entries, 1 << 18);
} steer SEC(".maps");

/* xsks: receive queue -> the AF_XDP socket serving it on this interface (one map per
 * interface). A queue without a socket passes its frames to the kernel. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAX_QUEUES);
} xsks SEC(".maps");

/* Indexes of steered. */
#define STEERED_TO_SOCKET 0 /* handed to the socket of the frame's queue */
#define STEERED_PASSED 1    /* ours, passed to the kernel: a backend's IPv4 fragment or an
			     * expiring TTL */
#define STEERED_NO_SOCKET 2 /* ours, but its queue has no socket: passed to the kernel */
#define STEERED_ICMP 3      /* ICMP of ours (an echo request or an error), to the socket or,
			     * without one, passed: counted in TO_SOCKET/NO_SOCKET too */
#define STEERED_NOT_OURS 4  /* an IP packet for no VIP and from no backend: the kernel's */
#define STEERED_UNSERVED 5  /* to a VIP address, of a protocol no service has: dropped */
#define STEERED_FRAG 6      /* an IPv4 fragment to a VIP address: dropped (no fragment state) */
#define STEERED_MAX 7

/* steered: per CPU, STEERED_* -> frames. Written by the program, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, STEERED_MAX);
} steered SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&steered, &i);

	if (n)
		(*n)++;
}

/* vip_addr reports whether the destination of key k is a VIP address (any frontend). */
static __always_inline int vip_addr(const struct steer_key *k)
{
	struct steer_key a = { .family = k->family, .dir = STEER_VIP_ADDR };

	__builtin_memcpy(a.addr, k->addr, sizeof(a.addr));
	return bpf_map_lookup_elem(&steer, &a) != NULL;
}

static __always_inline int hit(struct steer_key *k, __be16 port)
{
	k->port = port;
	if (bpf_map_lookup_elem(&steer, k))
		return 1;
	k->port = 0;
	return bpf_map_lookup_elem(&steer, k) != NULL;
}

/* routed reports whether the kernel would forward a packet from src to dst out of an interface
 * (a route and a neighbour entry or one to resolve): the XDP datapath sends such a reply itself
 * and leaves the rest (local delivery, forwarding disabled, no route) to the kernel. */
static __always_inline int routed(struct xdp_md *ctx, struct steer_key *src, struct steer_key *dst)
{
	struct bpf_fib_lookup fib = {};

	fib.ifindex = ctx->ingress_ifindex;
	if (dst->family == FAMILY_V4) {
		fib.family = 2; /* AF_INET */
		fib.ipv4_src = src->addr[0];
		fib.ipv4_dst = dst->addr[0];
	} else {
		fib.family = 10; /* AF_INET6 */
		__builtin_memcpy(fib.ipv6_src, src->addr, 16);
		__builtin_memcpy(fib.ipv6_dst, dst->addr, 16);
	}
	switch (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return 1;
	}
	return 0;
}

/* not_ours hands an IP packet that is none of ours to the kernel, counted. */
static __always_inline int not_ours(void)
{
	count(STEERED_NOT_OURS);
	return XDP_PASS;
}

/* ICMP's first word: type, code, checksum. */
struct icmp_word {
	__u8 type;
	__u8 code;
	__u16 checksum;
};

/* to_socket hands a frame of ours to the socket of its receive queue (the kernel, counted, when
 * the queue has none). */
static __always_inline int to_socket(struct xdp_md *ctx)
{
	long rc = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);

	count(rc == XDP_REDIRECT ? STEERED_TO_SOCKET : STEERED_NO_SOCKET);
	return rc;
}

/* icmp_is_error reports whether an ICMP (v6: ICMPv6) type is an error the datapath relays. */
static __always_inline int icmp_is_error(__u8 type, int v6)
{
	if (!v6)
		return type == ICMP_DEST_UNREACH || type == ICMP_TIME_EXCEEDED;
	return type == ICMPV6_DEST_UNREACH || type == ICMPV6_PKT_TOOBIG ||
	       type == ICMPV6_TIME_EXCEED;
}

/* quote_to_backend reports whether the packet an ICMP error quotes (its header at q) is to a
 * backend endpoint the engine serves: its {dst, dport, proto} or {dst, 0, proto} in steer with
 * STEER_FROM_BACKEND (the error is about a reply's flow). */
static __always_inline int quote_to_backend(void *q, void *data_end, int v6)
{
	struct steer_key k = { .dir = STEER_FROM_BACKEND };
	__be16 *ports;

	if (!v6) {
		struct iphdr *ih = q;

		if ((void *)(ih + 1) > data_end || ih->version != 4 || ih->ihl < 5)
			return 0;
		k.proto = ih->protocol;
		k.addr[0] = ih->daddr;
		k.family = FAMILY_V4;
		ports = q + ih->ihl * 4;
	} else {
		struct ipv6hdr *ih = q;

		if ((void *)(ih + 1) > data_end)
			return 0;
		k.proto = ih->nexthdr;
		__builtin_memcpy(k.addr, &ih->daddr, 16);
		k.family = FAMILY_V6;
		ports = (void *)(ih + 1);
	}
	if ((k.proto != IPPROTO_TCP && k.proto != IPPROTO_UDP) || (void *)(ports + 2) > data_end)
		return 0;
	return hit(&k, ports[1]);
}

/* steer_icmp decides a non-fragment ICMP (v6: ICMPv6) packet whose header is at ic. */
static __always_inline int steer_icmp(struct xdp_md *ctx, struct icmp_word *ic, void *data_end,
				      struct steer_key *to)
{
	int v6 = to->family == FAMILY_V6;

	if ((void *)ic + 8 > data_end)
		return not_ours();
	if (ic->type == (v6 ? ICMPV6_ECHO_REQUEST : ICMP_ECHO)) {
		if (!vip_addr(to))
			return not_ours();
	} else if (!icmp_is_error(ic->type, v6) ||
		   (!vip_addr(to) && !quote_to_backend((void *)ic + 8, data_end, v6))) {
		return not_ours();
	}
	count(STEERED_ICMP);
	return to_socket(ctx);
}

SEC("xdp")
int xlb_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct steer_key to = {}, from = {};
	__be16 *ports;
	int expiring, frag;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);

		if ((void *)(iph + 1) > data_end || iph->version != 4 || iph->ihl < 5)
			return XDP_PASS;
		proto = iph->protocol;
		ports = (void *)iph + iph->ihl * 4;
		to.addr[0] = iph->daddr;
		from.addr[0] = iph->saddr;
		to.family = from.family = FAMILY_V4;
		expiring = iph->ttl <= 1;
		frag = (iph->frag_off & bpf_htons(IP_FRAG_MASK)) != 0;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		proto = ip6->nexthdr; /* an extension header is no TCP/UDP: passed below */
		ports = (void *)(ip6 + 1);
		__builtin_memcpy(to.addr, &ip6->daddr, 16);
		__builtin_memcpy(from.addr, &ip6->saddr, 16);
		to.family = from.family = FAMILY_V6;
		expiring = ip6->hop_limit <= 1;
		frag = 0;
	} else {
		return XDP_PASS;
	}
	if (proto == (to.family == FAMILY_V4 ? IPPROTO_ICMP : IPPROTO_ICMPV6) && !frag)
		return steer_icmp(ctx, (struct icmp_word *)ports, data_end, &to);
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) {
		/* No service is of another protocol: never the gateway's own, as in the XDP datapath. */
		if (vip_addr(&to)) {
			count(STEERED_UNSERVED);
			return XDP_DROP;
		}
		return not_ours();
	}
	if ((void *)(ports + 2) > data_end)
		return not_ours();
	to.proto = from.proto = proto;
	to.dir = STEER_TO_VIP;
	from.dir = STEER_FROM_BACKEND;
	/* A VIP address on a port no service has goes to the engine too, which drops it
	 * (drop_vip_unserved): passed, it would reach the gateway's own services or loop. */
	if (!hit(&to, ports[1]) && (!hit(&from, ports[0]) || !routed(ctx, &from, &to)) && !vip_addr(&to))
		return not_ours();
	if (frag && vip_addr(&to)) {
		count(STEERED_FRAG);
		return XDP_DROP;
	}
	if (expiring || frag) {
		count(STEERED_PASSED);
		return XDP_PASS;
	}
	return to_socket(ctx);
}
