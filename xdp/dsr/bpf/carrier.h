/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* carrier.h: the ingress side. A gateway that DNATed a client's packet to a Pod on this node
 * carries the VIP frontend in it (datapath.h, DSR_OPT*). The carrier is read, checked against
 * services, the flow recorded (in flows, or for a SYN in half_open: record), and the carrier removed before anything else on the
 * node (the Pod included) sees the packet.
 *
 * What is a carrier:
 * - IPv4: an option of type DSR_OPT4_TYPE anywhere in the options (found by walking them). It
 *   is accepted only as the one option of the header: IHL 7, first, length DSR_OPT4_LEN.
 * - IPv6: a Destination Options header right after the fixed header whose first option is of
 *   type DSR_OPT6_TYPE. It is accepted only in the exact 24-byte layout. A DSR_OPT6_TYPE
 *   option elsewhere (later in that header, or in another header) is not looked for: its packet
 *   passes untouched and records nothing (the option's type tells a receiver to skip it).
 * A carrier that is not accepted drops its packet, counted by reason: the node must never
 * rewrite replies to come from an address a packet's sender chose, unless services says that
 * frontend may send to that endpoint.
 *
 * Why the L4 checksums stay valid when the carrier goes: the TCP and UDP checksums cover a
 * pseudo-header of the source and destination addresses, the protocol and the L4 length, and
 * the L4 bytes. Removing an IPv4 option or an IPv6 Destination Options header changes none of
 * them: the L4 length is the datagram's length minus its IP headers, the same before and after
 * (and an IPv6 Destination Options header, unlike a Routing header, does not change which
 * destination the pseudo-header holds). Only the IP header's own fields change. */
#ifndef XLB_DSR_CARRIER_H
#define XLB_DSR_CARRIER_H

#include "skb.h"
#include "csum.h"
#include "stats.h"

/* How far the IPv4 option walk goes: the most options a header holds. */
#define IPV4_MAX_OPTS 40

/* Offsets in the IPv4 carrier option, and in the IPv6 Destination Options header. */
#define OPT4_PORT 2
#define OPT4_ADDR 4
#define DOH_NEXT     0
#define DOH_LEN      1
#define DOH_OPT      2
#define DOH_OPTLEN   3
#define DOH_PORT     4
#define DOH_ADDR     6
#define DOH_PADN     22
#define DOH_HDRLEN_FIELD 2 /* (DSR_OPT6_HDRLEN / 8) - 1 */
#define IPV6_OPT_PADN 1

/* L4 bytes a carried first packet must hold: the TCP header, the UDP header. */
#define TCP_MIN 20
#define UDP_MIN 8

/* opt_at returns o[i & 63], the mask applied in the compiled program: clang would drop it where
 * it proves i < 64, and the verifier needs it to bound a read at a variable offset. */
static __always_inline __u8 opt_at(const __u8 *o, __u64 i)
{
	asm volatile("%0 &= 63" : "+r"(i));
	return o[i];
}

/* The state of the IPv4 option walk (find_opt4). */
struct opt_walk {
	__u8 o[64];  /* the options, zero after the ones present */
	__u32 olen;  /* how many are present */
	__u32 i;     /* where the next option starts */
	__s32 at;    /* where ours starts; -1 until found */
};

/* opt_step reads the option at w->i, and moves past it: 1 ends the walk (ours found, End of
 * Options, the end, or a length that cannot be). bpf_loop's callback, verified once rather than
 * once per option and path. */
static long opt_step(__u64 n, struct opt_walk *w)
{
	__u32 i = w->i;
	__u8 t, l;

	if (i >= w->olen || i >= IPV4_MAX_OPTS)
		return 1;
	t = opt_at(w->o, i);
	if (t == DSR_OPT4_TYPE) {
		w->at = i;
		return 1;
	}
	if (t == 0) /* End of Options */
		return 1;
	if (t == 1) { /* No Operation */
		w->i = i + 1;
		return 0;
	}
	if (i + 1 >= w->olen)
		return 1;
	l = opt_at(w->o, i + 1);
	if (l < 2)
		return 1;
	w->i = i + l;
	return 0;
}

/* find_opt4 walks the w->olen bytes of IPv4 options in w->o and leaves in w->at the offset of
 * the first of type DSR_OPT4_TYPE, or -1. */
static __always_inline void find_opt4(struct opt_walk *w)
{
	w->i = 0;
	w->at = -1;
	bpf_loop(IPV4_MAX_OPTS, opt_step, w, 0);
}

/* allowed reports whether services holds {vip, port, proto} -> {ep, ep_port}, or the all-ports
 * frontend {vip, 0, proto} -> {ep, 0} when the gateway kept the port (port == ep_port). */
static __always_inline int allowed(const struct addr *vip, __be16 port, __u8 proto, __u8 family,
				   const struct addr *ep, __be16 ep_port)
{
	struct dsr_svc_key k = { .vip = { .addr = *vip, .port = port, .proto = proto,
					  .family = family },
				 .ep = *ep, .ep_port = ep_port };

	if (bpf_map_lookup_elem(&services, &k))
		return 1;
	if (port != ep_port)
		return 0;
	k.vip.port = 0;
	k.ep_port = 0;
	return bpf_map_lookup_elem(&services, &k) != NULL;
}


/* window_full resets window b when now is past it (also when now is behind its start: a clock
 * set back) and reports whether it already holds limit flows. */
static __always_inline int window_full(struct budget *b, __u32 limit, __u64 now)
{
	if (now - b->start >= BUDGET_WINDOW_NS) {
		b->start = now;
		b->count = 0;
	}
	return b->count >= limit;
}

/* mix32 is a 32-bit finalizer (xorshift-multiply): every input bit reaches every output bit. */
static __always_inline __u32 mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	h *= 0x846ca68b;
	h ^= h >> 16;
	return h;
}

/* The budget shares a carried packet's flow would take from: its frontend's and its client
 * prefix's buckets in budget_shares (maps.h). */
struct shares {
	__u32 frontend;
	__u32 prefix;
};

/* shares_of returns the buckets of frontend {vip, vport, proto} and of client's prefix (IPv4
 * /24, IPv6 /48), hashed under cfg_budget_seed. */
static __always_inline struct shares shares_of(const struct addr *vip, __be16 vport, __u8 proto,
					       const struct addr *client, __u8 family)
{
	__u32 f = cfg_budget_seed, c = cfg_budget_seed ^ 0x9e3779b9;
	struct shares s;

	f = mix32(f ^ vip->w[0]);
	f = mix32(f ^ vip->w[1]);
	f = mix32(f ^ vip->w[2]);
	f = mix32(f ^ vip->w[3]);
	f = mix32(f ^ ((__u32)vport << 8) ^ proto);
	if (family == FAMILY_V4) {
		c = mix32(c ^ (client->w[0] & bpf_htonl(0xffffff00)));
	} else {
		c = mix32(c ^ client->w[0]);
		c = mix32(c ^ (client->w[1] & bpf_htonl(0xffff0000)));
	}
	s.frontend = f % FRONTEND_SHARES;
	s.prefix = FRONTEND_SHARES + c % PREFIX_SHARES;
	return s;
}

/* share_limit is a kind's limit's share of div, at least 1. */
static __always_inline __u32 share_limit(__u32 limit, __u32 div)
{
	return limit / div ? limit / div : 1;
}

/* budget_take takes one flow out of budget kind's window (limit a window) and out of its
 * frontend's and client prefix's shares at now: STAT_CARRIER_ACCEPTED if it may be recorded,
 * else over (the kind's over-budget stat), with the spent share counted. A window is reset by
 * whichever CPU sees it over; two CPUs racing at the reset or at the last unit may each take
 * one, so a budget holds give or take the CPUs' count. Mirrors the gateway's
 * frag_budget_allow. */
static __always_inline __u32 budget_take(__u32 kind, __u32 limit, __u64 now, struct shares sh, __u32 over)
{
	__u32 fk = kind * SHARES_PER_KIND + sh.frontend, pk = kind * SHARES_PER_KIND + sh.prefix;
	struct budget *b = bpf_map_lookup_elem(&budgets, &kind);
	struct budget *f = bpf_map_lookup_elem(&budget_shares, &fk);
	struct budget *p = bpf_map_lookup_elem(&budget_shares, &pk);

	if (!b || !f || !p)
		return over;
	if (window_full(b, limit, now))
		return over;
	if (window_full(f, share_limit(limit, FRONTEND_SHARE_DIV), now)) {
		count(STAT_BUDGET_FRONTEND_SPENT);
		return over;
	}
	if (window_full(p, share_limit(limit, PREFIX_SHARE_DIV), now)) {
		count(STAT_BUDGET_PREFIX_SPENT);
		return over;
	}
	__sync_fetch_and_add(&b->count, 1);
	__sync_fetch_and_add(&f->count, 1);
	__sync_fetch_and_add(&p->count, 1);
	return STAT_CARRIER_ACCEPTED;
}

/* touch refreshes v's last-seen time, at most once per REFRESH_NS. */
static __always_inline void touch(struct flow_value *v, __u64 now)
{
	if (now > v->seen_ns + REFRESH_NS)
		v->seen_ns = now;
}

/* record records the flow whose replies carry k, with its VIP frontend, by the node's policy
 * (docs/dsr.md, The flood policy and What is trusted), and returns the stat its packet counts
 * (the packet is passed in every case). syn: a TCP SYN without ACK.
 * - An entry of flows naming the same frontend is refreshed: never any budget.
 * - A live entry of flows naming another frontend is never replaced by a carried packet: a
 *   carrier names a frontend that services allows for the Pod, but not that the tuple's
 *   connection is the one it says (STAT_CARRIER_CONFLICT). Only the Pod's SYN-ACK for a new
 *   connection on the tuple moves it (reply.h, commit_synack).
 * - A TCP SYN adds a candidate to half_open within cfg_syn, and deletes nothing: a SYN flood
 *   churns only half_open, and a forged SYN on a live tuple never commits (the Pod answers it
 *   with a challenge ACK, not a SYN-ACK).
 * - Another carried TCP packet whose flow half_open holds for its frontend (the handshake's ACK,
 *   which the gateway always carries) moves it into flows, without budget.
 * - Another carried TCP packet of no known flow is recorded within cfg_tcp_pickup a second; a
 *   UDP datagram of a flow flows lacks within cfg_udp_new a second. An expired entry naming
 *   another frontend is overwritten without budget (its key is there: nothing is evicted).
 * Every budget is shared by frontend and client prefix (budget_take). */
static __always_inline __u32 record(struct flow_key *k, const struct addr *vip, __be16 vport, int syn)
{
	__u64 now = bpf_ktime_get_coarse_ns();
	struct flow_value *v = bpf_map_lookup_elem(&flows, k);
	struct flow_value *h;
	struct flow_value nv = {};
	__u32 st;

	if (v && same_vip(v, vip, vport)) {
		touch(v, now);
		/* A SYN names the tuple's frontend again (a new connection through the same one, or a
		 * retransmission): a candidate of another frontend a SYN left is not it. */
		if (syn && k->proto == PROTO_TCP)
			bpf_map_delete_elem(&half_open, k);
		return STAT_CARRIER_ACCEPTED;
	}
	nv.vip = *vip;
	nv.vip_port = vport;
	nv.seen_ns = now;
	if (k->proto == PROTO_TCP) {
		h = bpf_map_lookup_elem(&half_open, k);
		if (syn) {
			if (h && same_vip(h, vip, vport)) {
				touch(h, now);
				return STAT_CARRIER_ACCEPTED;
			}
			st = budget_take(BUDGET_SYN, cfg_syn, now,
					 shares_of(vip, vport, k->proto, &k->client, k->family),
					 STAT_SYN_OVER_BUDGET);
			if (st != STAT_CARRIER_ACCEPTED)
				return st;
			if (bpf_map_update_elem(&half_open, k, &nv, BPF_ANY) < 0)
				return STAT_RECORD_FAILED;
			return STAT_CARRIER_ACCEPTED;
		}
		if (v && live(v, k->proto, now))
			return STAT_CARRIER_CONFLICT;
		if (h && same_vip(h, vip, vport)) {
			if (bpf_map_update_elem(&flows, k, &nv, BPF_ANY) < 0)
				return STAT_RECORD_FAILED;
			bpf_map_delete_elem(&half_open, k);
			return STAT_CARRIER_ACCEPTED;
		}
		if (!v) {
			st = budget_take(BUDGET_TCP_PICKUP, cfg_tcp_pickup, now,
					 shares_of(vip, vport, k->proto, &k->client, k->family),
					 STAT_TCP_PICKUP_OVER_BUDGET);
			if (st != STAT_CARRIER_ACCEPTED)
				return st;
		}
	} else {
		if (v && live(v, k->proto, now))
			return STAT_CARRIER_CONFLICT;
		if (!v) {
			st = budget_take(BUDGET_UDP_NEW, cfg_udp_new, now,
					 shares_of(vip, vport, k->proto, &k->client, k->family),
					 STAT_UDP_NEW_OVER_BUDGET);
			if (st != STAT_CARRIER_ACCEPTED)
				return st;
		}
	}
	if (bpf_map_update_elem(&flows, k, &nv, BPF_ANY) < 0)
		return STAT_RECORD_FAILED;
	return STAT_CARRIER_ACCEPTED;
}

/* tcp_syn reports whether the TCP header at l4 (in the packet: the caller checked its length)
 * is a SYN without ACK; 0 for another protocol. */
static __always_inline int tcp_syn(struct __sk_buff *skb, __u32 l4, __u8 proto)
{
	__u8 *f;

	if (proto != PROTO_TCP)
		return 0;
	f = hdr(skb, l4 + TCP_FLAGS_OFF, 1);
	return f && (*f & (TCPF_SYN | TCPF_ACK)) == TCPF_SYN;
}

/* shrink removes len bytes right after the fixed IP header (BPF_ADJ_ROOM_NET): the carrier.
 * FIXED_GSO: a packet the NIC merged (GRO) keeps its segments' payload size. */
static __always_inline int shrink(struct __sk_buff *skb, __u32 len)
{
	return bpf_skb_adjust_room(skb, -(__s32)len, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO);
}

/* strip4 removes the IPv4 carrier: IHL back to 5, the total length 8 bytes less, the header
 * checksum updated for both and for the option's bytes, which it no longer covers. The header
 * bytes go through bpf_skb_store_bytes with BPF_F_RECOMPUTE_CSUM, which keeps a NIC's
 * whole-packet checksum (CHECKSUM_COMPLETE) right; bpf_skb_adjust_room does so for the bytes it
 * removes. opt is the option's 8 bytes. */
static __always_inline int strip4(struct __sk_buff *skb, const struct iphdr *ip0, const __u8 *opt)
{
	/* The header's first 12 bytes, up to and with the checksum, written in one store. */
	union { struct { __u8 vihl; __u8 tos; __be16 tot; __u32 w1; __u16 w2; __u16 check; } f;
		__u32 w[3]; } old, new;
	__u32 o0, o1, d;

	__builtin_memcpy(&old, ip0, sizeof(old));
	__builtin_memcpy(&o0, opt, 4);
	__builtin_memcpy(&o1, opt + 4, 4);
	new = old;
	new.f.vihl = 0x45;
	new.f.tot = bpf_htons(bpf_ntohs(old.f.tot) - DSR_OPT4_LEN);
	d = diff32(0, old.w[0], new.w[0]);
	d = diff32(d, o0, 0);
	d = diff32(d, o1, 0);
	new.f.check = csum_apply(old.f.check, d);
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &new, sizeof(new), BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	return shrink(skb, DSR_OPT4_LEN);
}

/* carrier4 handles an IPv4 packet with options (IHL > 5). */
static __always_inline int carrier4(struct __sk_buff *skb)
{
	struct opt_walk w = {};
	__u8 *o = w.o;
	struct iphdr ip;
	struct flow_key fk = {};
	struct addr vip = {}, ep = {};
	__be16 vport, *ports;
	__u32 olen, avail, tot;
	__u16 fo;
	int at, syn;

	{
		struct iphdr *p = hdr(skb, ETH_HLEN, IPV4_HLEN);

		if (!p || p->version != 4 || p->ihl <= 5)
			return TC_ACT_OK;
		ip = *p;
	}
	olen = ip.ihl * 4 - IPV4_HLEN;
	if (skb->len < ETH_HLEN + IPV4_HLEN)
		return TC_ACT_OK;
	avail = skb->len - ETH_HLEN - IPV4_HLEN;
	if (avail > olen)
		avail = olen;
	if (avail > IPV4_MAX_OPTS)
		avail = IPV4_MAX_OPTS;
	/* The options present (all of them unless the packet is cut short): a carrier cut in the
	 * middle is found and dropped, one cut before its type byte cannot be seen (the stack
	 * drops such a packet). */
	if (avail == 0 || bpf_skb_load_bytes(skb, ETH_HLEN + IPV4_HLEN, o, avail) < 0)
		return TC_ACT_OK;
	w.olen = avail;
	find_opt4(&w);
	at = w.at;
	if (at < 0)
		return TC_ACT_OK;

	if (at + 1 >= avail) /* no room for the option's length */
		return verdict(avail < olen ? STAT_DROP_TRUNCATED : STAT_DROP_MALFORMED, TC_ACT_SHOT);
	if (opt_at(o, at + 1) != DSR_OPT4_LEN || ip.ihl < 7)
		return verdict(STAT_DROP_MALFORMED, TC_ACT_SHOT);
	if (at != 0 || ip.ihl != 7)
		return verdict(STAT_DROP_OPTIONS, TC_ACT_SHOT);
	tot = bpf_ntohs(ip.tot_len);
	if (tot < IPV4_HLEN + DSR_OPT4_LEN || ETH_HLEN + tot > skb->len)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	if (ip.protocol != PROTO_TCP && ip.protocol != PROTO_UDP)
		return verdict(STAT_DROP_NOT_L4, TC_ACT_SHOT);
	fo = bpf_ntohs(ip.frag_off);
	if (fo & IP_OFFSET) {
		/* A later fragment: the option is copied into every fragment, but there are no
		 * ports to check or record. The first fragment's carrier decides. */
		if (strip4(skb, &ip, o) < 0)
			return verdict(STAT_DROP_STRIP_FAILED, TC_ACT_SHOT);
		return verdict(STAT_CARRIER_FRAG_STRIPPED, TC_ACT_OK);
	}
	if (tot < IPV4_HLEN + DSR_OPT4_LEN + (ip.protocol == PROTO_TCP ? TCP_MIN : UDP_MIN))
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	ports = hdr(skb, ETH_HLEN + IPV4_HLEN + DSR_OPT4_LEN, 4);
	if (!ports)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	fk.pod.w[0] = ip.daddr;
	fk.client.w[0] = ip.saddr;
	fk.client_port = ports[0];
	fk.pod_port = ports[1];
	fk.proto = ip.protocol;
	fk.family = FAMILY_V4;
	__builtin_memcpy(&vport, &o[OPT4_PORT], sizeof(vport));
	__builtin_memcpy(&vip.w[0], &o[OPT4_ADDR], 4);
	ep.w[0] = ip.daddr;
	if (!allowed(&vip, vport, ip.protocol, FAMILY_V4, &ep, fk.pod_port))
		return verdict(STAT_DROP_NOT_ALLOWED, TC_ACT_SHOT);
	syn = tcp_syn(skb, ETH_HLEN + IPV4_HLEN + DSR_OPT4_LEN, ip.protocol);
	if (strip4(skb, &ip, o) < 0)
		return verdict(STAT_DROP_STRIP_FAILED, TC_ACT_SHOT);
	return verdict(record(&fk, &vip, vport, syn), TC_ACT_OK);
}

/* strip6 removes the IPv6 carrier: the fixed header's next header becomes the carrier's, its
 * payload length 24 bytes less (no header checksum in IPv6). */
static __always_inline int strip6(struct __sk_buff *skb, __be16 plen, __u8 next)
{
	struct { __be16 plen; __u8 next; } __attribute__((packed)) w = {
		.plen = bpf_htons(bpf_ntohs(plen) - DSR_OPT6_HDRLEN), .next = next };

	if (bpf_skb_store_bytes(skb, ETH_HLEN + 4, &w, sizeof(w), BPF_F_RECOMPUTE_CSUM) < 0)
		return -1;
	return shrink(skb, DSR_OPT6_HDRLEN);
}

/* carrier6 handles an IPv6 packet whose first extension header is Destination Options. */
static __always_inline int carrier6(struct __sk_buff *skb)
{
	__u8 d[DSR_OPT6_HDRLEN];
	struct flow_key fk = {};
	struct addr vip;
	__be16 vport, plen, *ports;
	__u32 l4 = ETH_HLEN + IPV6_HLEN + DSR_OPT6_HDRLEN, need;
	__u8 next, proto, later = 0;
	int syn;

	{
		struct ipv6hdr *p = hdr(skb, ETH_HLEN, IPV6_HLEN);
		__u8 *o;

		if (!p || p->version != 6)
			return TC_ACT_OK;
		plen = p->payload_len;
		__builtin_memcpy(&fk.client, &p->saddr, sizeof(fk.client));
		__builtin_memcpy(&fk.pod, &p->daddr, sizeof(fk.pod));
		/* Not a carrier unless its first option is ours. */
		o = hdr(skb, ETH_HLEN + IPV6_HLEN, DOH_OPT + 1);
		if (!o || o[DOH_OPT] != DSR_OPT6_TYPE)
			return TC_ACT_OK;
	}
	if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_HLEN, d, sizeof(d)) < 0)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	if (d[DOH_LEN] != DOH_HDRLEN_FIELD || d[DOH_OPTLEN] != DSR_OPT6_DATA ||
	    d[DOH_PADN] != IPV6_OPT_PADN || d[DOH_PADN + 1] != 0)
		return verdict(STAT_DROP_MALFORMED, TC_ACT_SHOT);
	if (bpf_ntohs(plen) < DSR_OPT6_HDRLEN || ETH_HLEN + IPV6_HLEN + bpf_ntohs(plen) > skb->len)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	next = d[DOH_NEXT];
	proto = next;
	if (next == PROTO_FRAGMENT) {
		struct { __u8 next; __u8 res; __be16 off; __be32 id; } *fh = hdr(skb, l4, FRAG6_HLEN);

		if (!fh || bpf_ntohs(plen) < DSR_OPT6_HDRLEN + FRAG6_HLEN)
			return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
		proto = fh->next;
		later = (bpf_ntohs(fh->off) & IP6_OFFSET) != 0;
		l4 += FRAG6_HLEN;
	}
	if (proto != PROTO_TCP && proto != PROTO_UDP)
		return verdict(STAT_DROP_NOT_L4, TC_ACT_SHOT);
	if (later) {
		if (strip6(skb, plen, next) < 0)
			return verdict(STAT_DROP_STRIP_FAILED, TC_ACT_SHOT);
		return verdict(STAT_CARRIER_FRAG_STRIPPED, TC_ACT_OK);
	}
	need = l4 - ETH_HLEN - IPV6_HLEN + (proto == PROTO_TCP ? TCP_MIN : UDP_MIN);
	if (bpf_ntohs(plen) < need)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	ports = hdr(skb, l4, 4);
	if (!ports)
		return verdict(STAT_DROP_TRUNCATED, TC_ACT_SHOT);
	fk.client_port = ports[0];
	fk.pod_port = ports[1];
	fk.proto = proto;
	fk.family = FAMILY_V6;
	__builtin_memcpy(&vport, &d[DOH_PORT], sizeof(vport));
	__builtin_memcpy(&vip, &d[DOH_ADDR], sizeof(vip));
	if (!allowed(&vip, vport, proto, FAMILY_V6, &fk.pod, fk.pod_port))
		return verdict(STAT_DROP_NOT_ALLOWED, TC_ACT_SHOT);
	syn = tcp_syn(skb, l4, proto);
	if (strip6(skb, plen, next) < 0)
		return verdict(STAT_DROP_STRIP_FAILED, TC_ACT_SHOT);
	return verdict(record(&fk, &vip, vport, syn), TC_ACT_OK);
}

#endif
