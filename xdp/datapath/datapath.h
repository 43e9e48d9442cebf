/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* datapath.h: what every xlb BPF program shares (the XDP datapath xdp/gateway/bpf/xlb.c, the AF_XDP
 * steer program xdp/afxdp/bpf/steer.c, the node agent's socket load balancer
 * xdp/socklb/bpf/socklb.c and reap.c): address families and protocols as keys store them, an
 * address, a service key, the id limits and the ICMP numbers the echo replies use. The Go half
 * of the contract is package datapath in this directory; TestHeaderMatchesGo checks that the two
 * agree. Each program's build adds this directory to its include path. */
#ifndef XLB_DATAPATH_H
#define XLB_DATAPATH_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* Address families as keys store them. Our own values, not AF_*: a key is a wire format, and
 * one byte. */
#define FAMILY_V4 4
#define FAMILY_V6 6

/* IP protocol numbers of the balanced protocols (datapath.TCP, datapath.UDP). */
#define PROTO_TCP 6
#define PROTO_UDP 17

/* Upper bounds of the id spaces (datapath.MaxVIPs, datapath.MaxBackends). VIP ids index
 * vip_by_id, vip_stats and the VIPs' Maglev regions; backend ids index backends and
 * backend_stats. Id 0 is never used: a zero in a Maglev slot means "empty". */
#define MAX_VIPS     65536  /* VIP:port:proto entries (10,000 services x several ports) */
#define MAX_BACKENDS 262144 /* 10,000 services x 10 backends, with room to spare */

/* The largest Maglev table of one VIP, a prime (datapath.MaxMaglevM). */
#define MAX_MAGLEV_M 1048573

/* How many frontends an ambiguous endpoint's reverse entry lists in rev_value.cand (written by
 * Go from lb.ReversePlan.Candidates; datapath.MaxReverseCandidates). A reply without conntrack
 * entry is translated when exactly one of them would have sent its forward tuple to this
 * endpoint: every gateway has the same Maglev tables, so any gateway can tell. An endpoint
 * serving more frontends gets no candidates (conntrack only): each candidate costs the reply
 * ~4 map lookups. */
#define REV_MAX_CANDIDATES 4

/* ICMP and ICMPv6 types the programs answer or relay. */
#define ICMP_ECHOREPLY       0
#define ICMP_DEST_UNREACH    3
#define ICMP_ECHO            8
#define ICMP_TIME_EXCEEDED   11
#define ICMPV6_DEST_UNREACH  1
#define ICMPV6_PKT_TOOBIG    2
#define ICMPV6_TIME_EXCEED   3
#define ICMPV6_ECHO_REQUEST  128
#define ICMPV6_ECHO_REPLY    129

/* The TTL (hop limit) of an echo reply a program sends for a VIP address. */
#define ECHO_REPLY_TTL 64

/* Direct server return's carrier: how a gateway tells a backend's node which VIP frontend a
 * packet it DNATed to the backend was sent to (datapath.Carrier*; docs/dsr.md). The gateway adds
 * it to the packets of a flow it has no conntrack entry for (a SYN, a first datagram, a flow
 * ECMP moved to it) when it fits the egress MTU; the node's program reads it, checks it against
 * the frontends whose endpoints run on the node, records the flow, removes the carrier before
 * the Pod sees the packet, and rewrites the Pod's replies to come from the VIP.
 *
 * IPv4: one option, the first after the 20-byte header (IHL 7):
 *   type DSR_OPT4_TYPE, length DSR_OPT4_LEN, the VIP's port (network order), the VIP (4 bytes).
 *   0x9e is RFC 4727's experimental option 30 with the copy bit set (every fragment carries it).
 * IPv6: a Destination Options header right after the fixed header (next header 60), 24 bytes:
 *   next header, length 2 (3 x 8 bytes), option type DSR_OPT6_TYPE (RFC 4727 experimental:
 *   skip if unknown, not changed en route), option length 18, the VIP's port, the VIP (16 bytes),
 *   then a PadN of 0 bytes (type 1, length 0). */
#define DSR_OPT4_TYPE   0x9e
#define DSR_OPT4_LEN    8
#define DSR_OPT6_TYPE   0x1e
#define DSR_OPT6_DATA   18 /* port + address */
#define DSR_OPT6_HDRLEN 24 /* the whole Destination Options header */
#define PROTO_DSTOPTS_HDR 60 /* IPv6 next header value of a Destination Options header */

/* Interface roles: which side of the gateway an interface faces (if_roles; Go's datapath.Role).
 * docs/datapath.md, "Security model". */
#define ROLE_NONE    0 /* not attached by xlb: VIP traffic and replies are dropped */
#define ROLE_CLIENT  1 /* clients: packets to VIPs are balanced, nothing is reverse-NATed */
#define ROLE_CLUSTER 2 /* the cluster: replies are reverse-NATed; packets to VIPs only from
			* the site's own prefixes (in-cluster clients) */
#define ROLE_BOTH    3 /* one-armed: the source decides (site_sources' SITE_CLUSTER or not) */
#define MAX_IFINDEX  65536 /* interfaces with an index at or above it cannot be attached */

/* Kinds of site source (site_sources; Go's datapath.SiteKind): addresses that belong to the
 * site, and so never arrive from the client side. */
#define SITE_CLUSTER 1 /* Pods, nodes, the cluster's prefixes, every backend */
#define SITE_GATEWAY 2 /* the gateway's own addresses: never a packet's source on arrival */
#define MAX_SITE_SOURCES 300000 /* prefixes: every backend of MAX_BACKENDS and room for more */

/* An IPv4 or IPv6 address. IPv4 uses w[0] (network order) and leaves w[1..3] zero. */
struct addr {
	__u32 w[4];
};

/* addr_eq compares two addresses (IPv4 ones have zero padding, so this works for both). */
static __always_inline int addr_eq(const struct addr *a, const struct addr *b)
{
	return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[2] == b->w[2] && a->w[3] == b->w[3];
}

/* A service or endpoint: {address, port, protocol} (datapath.Frontend, datapath.Endpoint).
 * Key of the XDP datapath's vips and reverse, and of the socket load balancer's services.
 * Port 0 in vips = all ports; {addr, 0, proto 0} in vips = the address marker. */
struct svc_key {
	struct addr addr;
	__be16 port;  /* network order */
	__u8 proto;   /* PROTO_TCP or PROTO_UDP */
	__u8 family;  /* FAMILY_V4 or FAMILY_V6 */
};

/* svc_key_eq compares two service keys. */
static __always_inline int svc_key_eq(const struct svc_key *a, const struct svc_key *b)
{
	return addr_eq(&a->addr, &b->addr) && a->port == b->port && a->proto == b->proto &&
	       a->family == b->family;
}

#endif
