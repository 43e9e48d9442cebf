// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xlb.c: the xlb XDP load balancer.
 *
 * Client -> VIP packets are DNATed to a backend (Pod IP : target port) chosen by conntrack or,
 * for new flows, by the VIP's Maglev table; backend -> client replies get the VIP back as their
 * source (stateless from the reverse map; when an endpoint serves several VIP:ports, from
 * conntrack, else from the candidates' Maglev tables). Everything else goes to the host untouched. See docs/datapath.md. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"
#include "csum.h"
#include "hash.h"
#include "stats.h"
#include "lb.h"
#include "frag.h"
#include "live.h"
#include "hs.h"
#include "budget.h"
#include "nat.h"
#include "fib.h"
#include "pmtu.h"
#include "side.h"
#include "icmp.h"
#include "dsr.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ct_store inserts or replaces the forward entry of flow fk in conntrack (unless only_reverse),
 * and the reverse entry in ct_reverse when the backend's endpoint serves several VIP:ports (its
 * replies cannot be mapped statelessly). The caller has paid for it from a budget (budget.h). */
static __always_inline void ct_store(const struct flow_key *fk, __u64 now, __u32 bid,
				     const struct backend *be, __u32 vip_id, __u8 flags,
				     int only_reverse)
{
	struct ct_entry e = { .last_seen = now, .backend_id = bid, .vip_id = vip_id,
			      .vip_port = fk->dport, .flags = flags };

	if (!only_reverse) {
		bpf_map_update_elem(&conntrack, fk, &e, BPF_ANY);
		live_mark(tuple_hash(fk)); /* a SYN and a datagram ask the filter (live.h) */
	}
	if (be->flags & BACKEND_F_REVERSE_CT) {
		struct flow_key rk = { .src = be->addr, .dst = fk->src,
				       .sport = be->port ? be->port : fk->dport,
				       .dport = fk->sport, .proto = fk->proto,
				       .family = fk->family };

		e.backend_id = 0;
		e.flags = flags | CT_F_REVERSE;
		bpf_map_update_elem(&ct_reverse, &rk, &e, BPF_ANY);
	}
}

/* hs_promote moves the connection slot i holds into conntrack (with its backend, VIP, closing
 * state and idle time) if it is worth keeping (hs_conn_worth) and not fk's own: called by a SYN
 * of fk about to take the slot over (paid from its handshake budget). Returns 1 when it
 * inserted. A global function: the verifier checks it once. */
__noinline int hs_promote(const struct flow_key *fk, __u32 i, __u64 now)
{
	struct hs_entry *e = bpf_map_lookup_elem(&hs_slots, &i);
	struct ct_scratch *sc;
	__u32 zero = 0, hash;
	__s32 age;

	if (!fk || !e || !e->key.family || !(hs_state(e) & HS_ST_CONN) || !hs_conn_worth(e, now) ||
	    flow_key_eq(&e->key, fk))
		return 0;
	sc = bpf_map_lookup_elem(&ct_scratch, &zero);
	if (!sc)
		return 0;
	sc->key = e->key;
	sc->key.pad[0] = 0; /* conntrack's keys are hashed whole: padding zero, as a packet's */
	sc->key.pad[1] = 0;
	hash = tuple_hash(&sc->key);
	if (e->check != hs_check(hash, e->backend_id, e->vip_id, e->isn))
		return 0; /* torn (two CPUs wrote the slot at once): no connection to trust */
	age = (__s32)(hs_time(now) - e->syn_time);
	__builtin_memset(&sc->val, 0, sizeof(sc->val));
	sc->val.last_seen = age > 0 ? now - ((__u64)age << HS_TIME_SHIFT) : now;
	sc->val.backend_id = e->backend_id;
	sc->val.vip_id = e->vip_id;
	sc->val.vip_port = sc->key.dport;
	sc->val.flags = (hs_state(e) & HS_ST_CLOSING) ? CT_F_CLOSING : 0;
	bpf_map_update_elem(&conntrack, &sc->key, &sc->val, BPF_ANY);
	live_mark(hash);
	return 1;
}

/* ct_vip returns the VIP of a conntrack entry if it still is the frontend this packet is for
 * (the VIP may have been deleted or its id given to another frontend since). */
static __always_inline struct vip_ref *ct_vip(struct packet *p, __u32 vip_id)
{
	struct vip_ref *ref = bpf_map_lookup_elem(&vip_by_id, &vip_id);

	if (!ref || ref->key.family != p->family || ref->key.proto != p->proto ||
	    (ref->key.port && ref->key.port != p->dport) || !addr_eq(&ref->key.addr, &p->dst))
		return NULL;
	return ref;
}

/* flow_key_of fills the key of p's flow, as conntrack and flow_cache store it. */
static __always_inline void flow_key_of(struct flow_key *k, const struct packet *p)
{
	k->src = p->src;
	k->dst = p->dst;
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
	k->family = p->family;
}

/* flow_cache_slot returns this CPU's flow_cache entry for the tuple of fk (NULL on a CPU beyond
 * the map's size). The slot comes from a cheap seeded multiplicative hash (two multiplications;
 * the top bits are the well-mixed ones): it only spreads tuples over this CPU's cache, where a
 * collision costs the full path, never a wrong answer, so it need not match anything in Go. */
static __always_inline struct flow_cache_entry *flow_cache_slot(const struct flow_key *fk)
{
	__u32 x = fk->src.w[0] ^ rotl32(fk->dst.w[0], 16);
	__u32 slot;

	if (fk->family == FAMILY_V6)
		x ^= fk->src.w[1] ^ fk->src.w[2] ^ fk->src.w[3] ^ fk->dst.w[3];
	x = (x ^ cfg_hash_seed) * 0x9e3779b1u;
	x = (x ^ ((__u32)fk->sport << 16 | fk->dport) ^ fk->proto) * 0x85ebca6bu;
	slot = bpf_get_smp_processor_id() * FLOW_CACHE_SLOTS + (x >> (32 - FLOW_CACHE_BITS));
	return bpf_map_lookup_elem(&flow_cache, &slot);
}

/* record_hop writes into flow_cache entry rec what was done to packet p, which XDP is about to
 * send by h: its destination went from (from, fport) to p's, and its next hop. The record is
 * replayed until until (see flow_replay). */
static __always_inline void record_hop(struct flow_cache_entry *rec, struct packet *p,
				       const struct addr *from, __be16 fport, struct hop *h,
				       __u64 until)
{
	rec->fast_until = h->expires < until ? h->expires : until;
	rec->to_addr = p->dst;
	rec->to_port = p->dport;
	rec->mtu = h->mtu;
	rec->ifindex = h->ifindex;
	__builtin_memcpy(rec->smac, h->smac, ETH_ALEN);
	__builtin_memcpy(rec->dmac, h->dmac, ETH_ALEN);
	dnat_diffs(from, fport, &p->dst, p->dport, p->family, &rec->ip_diff, &rec->l4_diff);
}

/* forward DNATs a packet of VIP vip_id to backend bid and sends it on its way. rec, when not
 * NULL, is the flow's flow_cache entry (an established flow): when XDP sends the packet, what
 * was done to it is recorded there for the flow's next packets (flow_replay). carry says the
 * packet has no conntrack entry: to a backend of direct server return it carries its frontend
 * (xlb_dsr, by tail call) if it opens the flow here — a TCP packet (a SYN, its ACK, a flow ECMP
 * moved here), a datagram that is a new flow (new_flow); not a datagram flow's second datagram,
 * which the node has seen the first of (as before first datagrams went to the handshake slots;
 * and the same whatever the slot held: the AF_XDP engine, which has no slots, decides alike).
 * Tested on new_flow, which forward has anyway: one more flag carried in cost the verifier
 * ~93,000 instructions, a second call site for the second datagram more. */
static __always_inline int forward(struct xdp_md *ctx, struct packet *p, void *data_end,
				   __u32 vip_id, __u32 bid, struct backend *be, int new_flow,
				   __u64 now, __u32 gen, struct flow_cache_entry *rec,
				   __u32 vip_flags, const int carry)
{
	struct addr vip = p->dst;
	__be16 vport = p->dport;
	struct hop h = {};
	int hop;

	frag_remember(p, now); /* a first fragment: accepted here, its ports still the client's */
	count_traffic(&vip_stats, vip_id, p->pkt_len, new_flow);
	count_traffic(&backend_stats, bid, p->pkt_len, new_flow);
	count_reason(REASON_NAT_FORWARD);
	rewrite_endpoint(p, data_end, 0, &be->addr, be->port);
	if (carry && (be->flags & BACKEND_F_DSR) && (new_flow || p->proto == PROTO_TCP)) {
		struct dsr_meta *m = dsr_meta_get();

		if (m) {
			m->vip = vip;
			m->vport = vport;
			m->family = p->family;
			bpf_tail_call(ctx, &progs, PROG_DSR);
			/* No xlb_dsr in progs (never once loaded). The packet is not touched after
			 * a tail call: some verifiers (Debian 12's 6.12) take packet pointers for
			 * invalid after one. */
			return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
		}
		count_reason(REASON_DSR_NO_ROOM); /* no scratch: without the carrier */
	}
	hop = next_hop(ctx, p, data_end, now, gen, &h);
	if (hop == HOP_TOO_BIG) { /* the client is told, if it may not be fragmented (pmtu.h) */
		int rc = too_big_call(ctx, p, data_end, &vip, vport, h.mtu, PROG_TOO_BIG_CLIENT);

		if (rc >= 0)
			return rc;
	}
	if (rec && hop == HOP_SEND && h.expires && p->l4 && !p->is_frag) {
		rec->vip_flags = vip_flags;
		record_hop(rec, p, &vip, vport, &h, rec->refreshed + CT_REFRESH_NS);
	}
	return send_hop(ctx, p, data_end, hop, &h);
}

/* flow_replay is the fast path: a packet whose tuple has a fresh record in this CPU's
 * flow_cache (what forward did to the flow's previous packet) gets the same counters, rewrite
 * and next hop, without a VIP, backend, conntrack or next-hop lookup and without computing a
 * checksum difference. Records live at most CT_REFRESH_NS after the conntrack read and never past
 * the next hop's expiry; the generation covers every change of VIPs, backends and attachments.
 * Whatever a record does not cover (a SYN, a flow's first FIN or RST, a VLAN tag, a fragment, a
 * longer packet, an expiring TTL, an IPv6 UDP datagram without checksum) returns -1: the full
 * path decides, as it does for a packet that arrived on an interface of another role than the
 * flow's first (role: side.h; the record's source passed the side checks on its own). */
static __always_inline int flow_replay(struct xdp_md *ctx, struct packet *p, void *data_end,
				       struct flow_cache_entry *fc, const struct flow_key *fk,
				       __u64 now, __u32 gen, __u32 role)
{
	/* A SYN is never replayed: asked before the record is read, so that a new connection's SYN
	 * (a tuple this CPU's cache has not seen) does not wait for the record's cache line. */
	if (p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN)
		return -1;
	if (!fc || !gen || fc->gen != gen || now >= fc->fast_until || !flow_key_eq(&fc->key, fk) ||
	    fc->in_role != role)
		return -1;
	if (p->vlan || p->is_frag || ip_len(p) > fc->mtu || ttl_expiring(p, data_end))
		return -1;
	if (p->proto == PROTO_TCP && (p->tcp_flags & (TH_FIN | TH_RST)) && !(fc->flags & CT_F_CLOSING))
		return -1;
	if (p->proto == PROTO_UDP && p->family == FAMILY_V6 &&
	    ((struct udphdr *)p->l4)->check == 0)
		return -1;
	if ((fc->vip_flags & VIP_F_SRC_RANGES) && !src_allowed(p, fc->vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	count_traffic(&vip_stats, fc->vip_id, p->pkt_len, 0);
	count_traffic(&backend_stats, fc->backend_id, p->pkt_len, 0);
	count_reason(REASON_NAT_FORWARD);
	nat_replay(p, data_end, &fc->to_addr, fc->to_port, fc->ip_diff, fc->l4_diff);
	return send_to(ctx, p, fc->ifindex, fc->smac, fc->dmac);
}

/* fc_fill makes fc, this CPU's flow_cache slot for flow fk, name the flow's backend bid, VIP
 * vip_id and conntrack flags (CT_F_*) as read at time now from the table that holds the flow
 * (conntrack, or its handshake slot), for packets arriving on an interface of role, and returns
 * it (NULL when there is no slot or no cache generation yet): forward records the packet's hop
 * in it. */
static __always_inline struct flow_cache_entry *fc_fill(struct flow_cache_entry *fc,
							const struct flow_key *fk, __u64 now,
							__u32 bid, __u32 vip_id, __u8 flags,
							__u32 role, __u32 gen)
{
	if (!fc || !gen)
		return NULL;
	fc->key = *fk;
	fc->refreshed = now;
	fc->backend_id = bid;
	fc->vip_id = vip_id;
	fc->flags = flags;
	fc->in_role = role;
	fc->gen = gen;
	fc->fast_until = 0; /* forward records anew */
	return fc;
}

/* lb_forward handles a packet to a VIP address that flow_replay did not take, arrived on an
 * interface of role: fk is its flow, fc this CPU's flow_cache slot for it (NULL for a non-first
 * fragment). Whatever frontend it finds, the packet must pass vip_side_check (side.h). An established flow is usually found
 * in fc, else in conntrack (and then copied to fc); anything else looks up the VIP (through
 * svc_cache) and picks a backend with its Maglev table. Returns -1 when the packet is for no VIP. */
static __always_inline int lb_forward(struct xdp_md *ctx, struct packet *p, void *data_end,
				      const struct flow_key *fk, struct flow_cache_entry *fc,
				      struct cpu_state *cs, __u64 now, __u32 gen, __u32 role)
{
	int syn = p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN;
	__u8 closing = (p->tcp_flags & (TH_FIN | TH_RST)) ? CT_F_CLOSING : 0;
	struct flow_cache_entry *rec = NULL;
	struct ct_entry *ct = NULL;
	struct hs_entry *hs = NULL, *slot;
	struct backend *be;
	struct vip_info *vi;
	struct vip_ref *ref;
	__u32 bid, vip_id, th;
	int rc, hs_hit = 0, udp_first = 0, new_flow;

	/* A SYN never inserts into conntrack (it writes hs_slots): a SYN flood cannot evict
	 * established flows. */
	if (!syn) {
		if (fc && gen && fc->gen == gen && flow_key_eq(&fc->key, fk) &&
		    elapsed(now, fc->refreshed) <= CT_REFRESH_NS && !(closing & ~fc->flags)) {
			ref = ct_vip(p, fc->vip_id);
			be = ref ? backend_get(fc->backend_id) : NULL;
			if (be) {
				vip_id = fc->vip_id;
				bid = fc->backend_id;
				rec = fc;
				goto established;
			}
		}
		/* The tuple's handshake slot next: a TCP connection whose handshake completed may live
		 * there instead of in conntrack (HS_ST_CONN, hs_conn), as its conntrack entry would.
		 * The slot also holds the live-flow filter's bits (live.h): a packet whose bit is
		 * clear skips the conntrack lookup (a miss in a big hash), so a handshake's ACK and a
		 * flow's first datagram read no conntrack line. */
		th = tuple_hash(fk);
		if (p->proto == PROTO_TCP) {
			__u64 c = hs_conn(fk, th, now, closing);

			if (c) {
				vip_id = (__u32)(c >> 32) & 0x3fffffff;
				bid = (__u32)c;
				ref = ct_vip(p, vip_id);
				be = ref && !(c & HS_CONN_STALE) ? backend_get(bid) : NULL;
				if (be) {
					rec = fc_fill(fc, fk, now, bid, vip_id,
						      (c & HS_CONN_CLOSING) ? CT_F_CLOSING : 0, role,
						      gen);
					goto established;
				}
				if (ref)
					count_reason(REASON_CT_RESELECT);
			}
		}
		ct = live_maybe(th) ? bpf_map_lookup_elem(&conntrack, fk) : NULL;
		if (ct && !(ct->flags & CT_F_REVERSE)) {
			ref = ct_vip(p, ct->vip_id);
			be = NULL;
			if (ref && elapsed(now, ct->last_seen) <= ct_timeout(p->proto, ct->flags))
				be = backend_get(ct->backend_id);
			if (be) {
				vip_id = ct->vip_id;
				bid = ct->backend_id;
				ct->flags |= closing;
				ct->last_seen = now;
				rec = fc_fill(fc, fk, now, bid, vip_id, ct->flags, role, gen);
				goto established;
			}
			if (ref)
				count_reason(REASON_CT_RESELECT);
		}
	} else {
		th = tuple_hash(fk);
	}

	vi = svc_lookup_cached(SVC_CACHE_VIPS, &p->dst, p->family, p->dport, p->proto, gen);
	if (!vi || (vi->flags & VIP_F_MARKER))
		return -1;
	rc = side_verdict(ctx, role, 0);
	if (rc >= 0)
		return rc;
	vip_id = vi->id;
	if ((vi->flags & VIP_F_SRC_RANGES) && !src_allowed(p, vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	/* A TCP flow without a conntrack entry (a SYN, a retransmitted SYN, the handshake's ACK) first
	 * asks the handshake table (hs.h) which backend its SYN went to: the VIP's table may have changed since, and
	 * that backend is the one holding the half-open connection. Otherwise Maglev chooses. */
	bid = 0;
	if (syn) {
		/* A SYN on the tuple of a live flow (not closing, not idle past its timeout, its
		 * backend usable) goes to that flow's backend, which answers it with a challenge ACK
		 * (RFC 5961) while the connection lives: one spoofed SYN must not re-point an
		 * established flow. Only a closing or idle entry is balanced again (below). */
		ct = live_maybe(th) ? bpf_map_lookup_elem(&conntrack, fk) : NULL; /* also below */
		if (ct && !(ct->flags & (CT_F_REVERSE | CT_F_CLOSING)) && ct->vip_id == vip_id &&
		    elapsed(now, ct->last_seen) <= ct_timeout(p->proto, 0) &&
		    backend_get(ct->backend_id)) {
			bid = ct->backend_id;
			count_reason(REASON_CT_SYN_KEPT);
		}
	}
	if (!bid && p->proto == PROTO_TCP) {
		__u64 r = hs_probe(fk, th, vip_id, now,
				   (__u64)(syn ? HS_MATCH_SYN : HS_MATCH_DATA) << 32 | p->tcp_seq);

		if (r & HS_PROBE_HOLDS)
			hs = (r & HS_PROBE_ALT) ? hs_alt(th) : hs_slot(th);
		bid = (__u32)r;
		if (syn && (r & HS_PROBE_CONN)) {
			/* A SYN on the tuple of a live connection its slot holds: ct_syn_kept, as
			 * above, and the slot keeps the connection (nothing to record). */
			count_reason(REASON_CT_SYN_KEPT);
			be = backend_get(bid);
			if (!be)
				return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
			if (fc)
				fc->gen = 0;
			return forward(ctx, p, data_end, vip_id, bid, be, 1, now, gen, NULL, 0, 1);
		} else if (bid) {
			count_reason(REASON_HS_HIT);
			hs_hit = 1;
		}
	} else if (!bid) {
		/* A datagram without a conntrack entry: if its tuple's slot says where the flow's
		 * first datagram went (hs_udp_record), this is its second: it goes there, and
		 * conntrack takes the flow over (below). */
		bid = hs_udp_take(fk, th, vip_id, now);
		hs_hit = bid != 0;
	}
	if (!bid)
		bid = maglev_pick(vi, flow_hash(cfg_hash_seed, &p->src, p->family, p->sport,
						p->dport, p->proto,
						vi->flags & VIP_F_AFFINITY_CLIENTIP));
	be = backend_get(bid);
	if (!be)
		return verdict(REASON_DROP_NO_BACKEND, XDP_DROP);
	/* A datagram that opens its flow here records it in its slot, not in conntrack, when the
	 * slot may take it (hs_udp_record): one-shot datagrams and floods of random tuples never
	 * insert into conntrack. An ambiguous backend's reply still needs the reverse entry, from
	 * the new-flow budget. */
	new_flow = syn || (p->proto != PROTO_TCP && !hs_hit);
	if (p->proto != PROTO_TCP && !hs_hit)
		udp_first = hs_udp_record(fk, th, now, (__u64)bid << 32 | vip_id);
	/* The TCP packet completing a handshake this gateway saw (a handshake_hit) marks its slot
	 * as holding the connection (hs_establish): no conntrack insert, until a SYN of another
	 * tuple needs the slot (hs_promote, below). Otherwise the flow is remembered from its first
	 * non-SYN packet, paid from a budget (budget.h): a datagram flow's second datagram from the
	 * new-flow budget; any other TCP packet (a flow ECMP moved here mid-way, or a forged ACK)
	 * from the smaller mid-flow budget. Once the conntrack entry exists the slot is emptied
	 * (and a flush of the flow is not undone by it). */
	if (udp_first) {
		if ((be->flags & BACKEND_F_REVERSE_CT) && budget_take(BUDGET_NEW_FLOW, now))
			ct_store(fk, now, bid, be, vip_id, 0, 1);
	} else if (!syn && hs_hit && hs && p->proto == PROTO_TCP) {
		hs_establish(hs, now, closing);
	} else if (!syn && budget_take(p->proto == PROTO_TCP && !hs_hit ? BUDGET_MID_FLOW :
									  BUDGET_NEW_FLOW, now)) {
		ct_store(fk, now, bid, be, vip_id, closing, 0);
		if (hs)
			hs_retire(hs);
	}
	if (syn) {
		/* The SYN records its backend in its slot for its ACK (and its retransmissions):
		 * refreshed in place when the entry already names it, else written from the
		 * handshake budget, with the reverse entry an ambiguous backend's SYN-ACK needs. */
		int again = hs && !hs_state(hs) && hs->backend_id == bid && hs->vip_id == vip_id &&
			    hs->isn == p->tcp_seq;

		if (again)
			hs->syn_time = hs_time(now);
		/* A SYN takes the slot of its pair whose entry costs least to lose (hs_pick); one
		 * that holds another tuple's connection, it moves into conntrack first (hs_promote),
		 * paid from this SYN's handshake budget. */
		if (again || budget_take(BUDGET_HANDSHAKE, now)) {
			__u32 i = again ? HS_NO_SLOT : hs_pick(fk, th, now, HS_RANK_CONN);

			slot = bpf_map_lookup_elem(&hs_slots, &i);
			if (slot) {
				hs_promote(fk, i, now);
				hs_write(slot, fk, th, now, bid, vip_id, p->tcp_seq);
			}
			if (be->flags & BACKEND_F_REVERSE_CT)
				ct_store(fk, now, bid, be, vip_id, 0, 1);
		}
		/* A SYN on a tuple conntrack still holds but closing or idle (client port reuse after
		 * a FIN, or a FIN that went through another gateway) starts a new connection: the
		 * entry takes the SYN's backend in place, so the handshake's ACK follows it (a live
		 * entry already names it, above). Nothing is inserted: a SYN flood still cannot evict
		 * conntrack entries. ct is the entry looked up above (nothing since wrote conntrack). */
		if (ct && !(ct->flags & CT_F_REVERSE) &&
		    (ct->backend_id != bid || ct->vip_id != vip_id || ct->flags)) {
			ct->backend_id = bid;
			ct->vip_id = vip_id;
			ct->flags = 0;
			ct->last_seen = now;
			live_mark(th); /* revived: a rebuild may have left it out as idle */
		}
		if (fc)
			fc->gen = 0;
		ct = NULL;
	}
	/* A flow's opening packets carry the frontend to a DSR backend's node: a SYN, its ACK (the
	 * node's half-open entry becomes a flow), a first datagram; not a datagram flow's second,
	 * which the node has seen the first of (as it was before first datagrams went to the slots,
	 * and whatever the slot held, so the AF_XDP engine, which has no slots, decides the same). */
	return forward(ctx, p, data_end, vip_id, bid, be, new_flow, now, gen, NULL, 0, 1);

established:
	rc = side_verdict(ctx, role, 0);
	if (rc >= 0)
		return rc;
	if ((ref->flags & VIP_F_SRC_RANGES) && !src_allowed(p, vip_id))
		return verdict(REASON_DROP_SRC_RANGE, XDP_DROP);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	return forward(ctx, p, data_end, vip_id, bid, be, 0, now, gen, rec, ref->flags, 0);
}

/* lb_reverse handles a reply from a backend, arrived on an interface of role: the VIP becomes its
 * source if it passes reply_side_check (side.h). Returns -1 when the packet is not a backend
 * reply. */
static __always_inline int lb_reverse(struct xdp_md *ctx, struct packet *p, void *data_end,
				      __u64 now, __u32 gen, __u32 role)
{
	struct svc_key *vip;
	struct hop h = {};
	__be16 vport;
	int hop;
	int rc = reverse_vip(&p->src, &p->dst, p->sport, p->dport, p->proto, p->family, now,
			     &vip, &vport);

	if (rc == -1)
		return -1;
	if (role != ROLE_CLUSTER) {
		hop = side_verdict(ctx, role, 1);
		if (hop >= 0)
			return hop;
	}
	if (rc == -2)
		return verdict(REASON_PASS_REVERSE_NO_CT, XDP_PASS);
	if (ttl_expiring(p, data_end))
		return verdict(REASON_PASS_TTL, XDP_PASS);
	/* The destination does not change: route first, so that a backend's packet to this host
	 * (a health-check reply) is left alone. */
	hop = next_hop(ctx, p, data_end, now, gen, &h);
	if (hop == HOP_LOCAL)
		return verdict(REASON_PASS_LOCAL, XDP_PASS);
	if (hop == HOP_TOO_BIG) { /* the backend is told, if it may not be fragmented (pmtu.h) */
		int v = too_big_call(ctx, p, data_end, &vip->addr, vport, h.mtu, PROG_TOO_BIG_BACKEND);

		if (v >= 0)
			return v;
	}
	frag_remember(p, now); /* a backend's first fragment, before its source becomes the VIP */
	count_reason(REASON_NAT_REVERSE);
	if (rc == 1)
		count_reason(REASON_NAT_REVERSE_MAGLEV);
	rewrite_endpoint(p, data_end, 1, &vip->addr, vport);
	return send_hop(ctx, p, data_end, hop, &h);
}

/* process balances a parsed packet; fam is a constant in each inlined copy, so the compiler
 * drops the other family's code and the verifier never mixes IPv4 and IPv6 states. */
static __always_inline int process(struct xdp_md *ctx, struct packet *p, void *data_end,
				   const __u8 fam)
{
	struct flow_cache_entry *fc = NULL;
	struct flow_key fk = {};
	int to_vip, from_backend, rc, ports = -1;
	struct cpu_state *cs;
	__u32 gen, role;
	__u64 now;

	p->family = fam; /* a constant from here on */
	if (p->proto != PROTO_TCP && p->proto != PROTO_UDP) {
		/* No service is of another protocol: never the gateway's own (see below). */
		if (is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_VIP_UNSERVED, XDP_DROP);
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}

	/* The backend bitmap is only asked when the VIP one says no (or lb_forward finds no VIP):
	 * to_vip alone decides everything in between. Traffic that is none of ours stops here. */
	to_vip = filter_has(0, &p->dst, fam);
	from_backend = to_vip ? 0 : filter_has(1, &p->src, fam);
	if (!to_vip && !from_backend)
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);

	role = in_role(ctx);
	cs = cpu_state_get();
	now = now_gen(cs, &gen);
	if (p->l4)
		ports = parse_ports(data_end, p);
	if (ports == 0) {
		flow_key_of(&fk, p);
		if (to_vip)
			fc = flow_cache_slot(&fk);
	}
	/* The fast path: an established flow with a fresh record. */
	if (fc && !p->is_frag) {
		rc = flow_replay(ctx, p, data_end, fc, &fk, now, gen, role);
		if (rc >= 0)
			return rc;
	}

	if (p->l4) {
		if (ports < 0) {
			if (to_vip && is_vip_addr(&p->dst, fam))
				return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
			return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
		}
		if (fam == FAMILY_V6 && p->proto == PROTO_UDP &&
		    ((struct udphdr *)p->l4)->check == 0 && to_vip &&
		    is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_UDP6_ZERO_CSUM, XDP_DROP);
		/* A first fragment is remembered only once accepted: forward() or lb_reverse
		 * (frag.h). */
	} else if (frag_recall(p, now) < 0) {
		/* Non-first fragment of no datagram this gateway forwarded lately. */
		if (to_vip && is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_FRAG_UNKNOWN, XDP_DROP);
		return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}

	if (ports != 0) {
		/* A non-first fragment: its ports are known now. It skips the flow cache (it carries
		 * no TCP flags, so it never has to clear a slot as a SYN does): conntrack decides. */
		flow_key_of(&fk, p);
	}
	if (to_vip) {
		rc = lb_forward(ctx, p, data_end, &fk, fc, cs, now, gen, role);
		if (rc >= 0)
			return rc;
		/* A VIP address, but no service on this port or protocol. Passed on, it would reach
		 * the gateway's own services on an internet-announced address, or loop between the
		 * gateway and its router until its TTL ran out (the gateway routes VIPs upstream). */
		if (is_vip_addr(&p->dst, fam))
			return verdict(REASON_DROP_VIP_UNSERVED, XDP_DROP);
		from_backend = filter_has(1, &p->src, fam);
	}
	if (from_backend) {
		rc = lb_reverse(ctx, p, data_end, now, gen, role);
		if (rc >= 0)
			return rc;
	}
	return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
}

/* fast_process is process() for a packet fast_path parsed (its L4 header follows the IP header
 * directly; fam is a constant in each inlined copy), for the cases that need no more: traffic of
 * no VIP or backend address, a backend's reply, and a packet to a VIP that flow_replay takes. The
 * same checks in the same order. Returns -1 for the full path (a packet to a VIP that flow_replay
 * does not take, after reading flow_cache; a SYN before), having changed nothing the full path
 * reads but now_gen's per-CPU clock bookkeeping. */
static __always_inline int fast_process(struct xdp_md *ctx, struct packet *p, void *data_end,
					const __u8 fam)
{
	struct flow_cache_entry *fc;
	struct flow_key fk = {};
	struct cpu_state *cs;
	__u64 now;
	__u32 gen;
	int rc;

	p->family = fam;
	if (p->proto != PROTO_TCP && p->proto != PROTO_UDP)
		return -1;
	if (!filter_has(0, &p->dst, fam)) {
		if (!filter_has(1, &p->src, fam) || parse_ports(data_end, p))
			return verdict(REASON_PASS_NOT_VIP, XDP_PASS);
		cs = cpu_state_get();
		now = now_gen(cs, &gen);
		rc = lb_reverse(ctx, p, data_end, now, gen, in_role(ctx));
		return rc >= 0 ? rc : verdict(REASON_PASS_NOT_VIP, XDP_PASS);
	}
	if (parse_ports(data_end, p) ||
	    (p->proto == PROTO_TCP && (p->tcp_flags & (TH_SYN | TH_ACK)) == TH_SYN))
		return -1;
	flow_key_of(&fk, p);
	fc = flow_cache_slot(&fk);
	cs = cpu_state_get();
	now = now_gen(cs, &gen);
	return flow_replay(ctx, p, data_end, fc, &fk, now, gen, in_role(ctx));
}

/* fast_path is tried on every packet before anything else. It parses only the common packet:
 * untagged, not fragmented, TCP or UDP right after an IPv4 header without options or an IPv6
 * header without extension headers, into a packet and a flow key that the compiler keeps in
 * registers (the full path's stay on its stack), and hands it to fast_process. Returns -1 for
 * anything else: the full path then decides. */
static __always_inline int fast_path(struct xdp_md *ctx, void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct packet p = {};

	if ((void *)(eth + 1) > data_end)
		return -1;
	p.eth = eth;
	p.pkt_len = data_end - data;
	if (eth->h_proto == ETH_P_IP_BE) {
		struct iphdr *iph = (void *)(eth + 1);
		__u32 tot;

		if ((void *)(iph + 1) > data_end || *(__u8 *)iph != IPV4_NO_OPTIONS ||
		    (iph->frag_off & (IP_MF_BE | IP_OFFSET_BE)))
			return -1;
		tot = be16_len(iph->tot_len);
		if (tot < sizeof(*iph) || (void *)iph + tot > data_end)
			return -1;
		p.l3 = iph;
		p.l3_end = (void *)iph + tot;
		p.l4 = iph + 1;
		p.proto = iph->protocol;
		p.src.w[0] = iph->saddr;
		p.dst.w[0] = iph->daddr;
		return fast_process(ctx, &p, data_end, FAMILY_V4);
	}
	if (eth->h_proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end || ip6->version != 6 ||
		    (void *)(ip6 + 1) + be16_len(ip6->payload_len) > data_end)
			return -1;
		p.l3 = ip6;
		p.l3_end = (void *)(ip6 + 1) + be16_len(ip6->payload_len);
		p.l4 = ip6 + 1;
		p.proto = ip6->nexthdr;
		__builtin_memcpy(&p.src, &ip6->saddr, sizeof(p.src));
		__builtin_memcpy(&p.dst, &ip6->daddr, sizeof(p.dst));
		return fast_process(ctx, &p, data_end, FAMILY_V6);
	}
	return -1;
}

/* xlb_xdp is the program attached to interfaces: fast_path, else the full path (xlb_full, by tail
 * call: a program of its own, so the verifier explores the two apart, and the fast path runs on a
 * small stack). */
SEC("xdp")
int xlb_xdp(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	int rc = fast_path(ctx, data, data_end);

	if (rc >= 0)
		return rc;
	bpf_tail_call(ctx, &progs, PROG_FULL);
	return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
}

/* forged_carrier reports whether the packet in ctx is addressed to a VIP and arrived with a carrier
 * (carrier_forged). fast_path takes no packet with IPv4 options or IPv6 extension headers, so only
 * the full path asks. A global function: the verifier checks it once, on its own, and the full
 * path (near the verifier's limits) sees only its result. */
__noinline int forged_carrier(struct xdp_md *ctx)
{
	void *data_end, *data, *cur;
	struct ethhdr *eth;
	struct packet p = {};
	__be16 proto;

	if (!ctx)
		return 0;
	data_end = (void *)(long)ctx->data_end;
	data = (void *)(long)ctx->data;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return 0;
	proto = eth->h_proto;
	cur = eth + 1;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		struct { __be16 tci; __be16 proto; } *vh = cur;

		if ((void *)(vh + 1) > data_end)
			return 0;
		proto = vh->proto;
		cur = vh + 1;
	}
	p.l3 = cur;
	if (proto == ETH_P_IP_BE) {
		struct iphdr *iph = cur;

		if ((void *)(iph + 1) > data_end)
			return 0;
		p.family = FAMILY_V4;
		p.dst.w[0] = iph->daddr;
	} else if (proto == ETH_P_IPV6_BE) {
		struct ipv6hdr *ip6 = cur;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		p.family = FAMILY_V6;
		__builtin_memcpy(&p.dst, &ip6->daddr, sizeof(p.dst));
	} else {
		return 0;
	}
	return carrier_forged(&p, data_end) && is_vip_addr(&p.dst, p.family);
}

/* xlb_full is the full path: every packet fast_path did not take. */
SEC("xdp")
int xlb_full(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct packet p = {};

	switch (parse_l3(data, data_end, &p)) {
	case PARSE_OK:
		break;
	case PARSE_NOT_IP:
		return verdict(REASON_PASS_NOT_IP, XDP_PASS);
	case PARSE_IPV6_EXT:
		return verdict(REASON_PASS_IPV6_EXT, XDP_PASS);
	default:
		return verdict(REASON_PASS_MALFORMED_L3, XDP_PASS);
	}
	if (forged_carrier(ctx))
		return verdict(REASON_DROP_CARRIER_FORGED, XDP_DROP);

	if (p.proto == PROTO_ICMP || p.proto == PROTO_ICMPV6) {
		/* ICMP is rare: its own program, so this one stays small for the verifier. */
		bpf_tail_call(ctx, &progs, PROG_ICMP);
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	}
	if (p.family == FAMILY_V4)
		return process(ctx, &p, data_end, FAMILY_V4);
	return process(ctx, &p, data_end, FAMILY_V6);
}

/* xlb_icmp handles ICMP and ICMPv6 (icmp.h), reached by tail call from xlb_full. */
SEC("xdp")
int xlb_icmp(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct packet p = {};

	if (parse_l3(data, data_end, &p) != PARSE_OK)
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	if (p.family == FAMILY_V4) {
		p.family = FAMILY_V4;
		return handle_icmp(ctx, &p, data_end);
	}
	p.family = FAMILY_V6;
	return handle_icmp(ctx, &p, data_end);
}

/* xlb_dsr is the carrier of direct server return (dsr.h), reached by tail call from forward()
 * with a packet DNATed to a backend of direct server return that opens its flow here, and its
 * frontend in dsr_scratch. */
SEC("xdp")
int xlb_dsr(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct dsr_meta *m = dsr_meta_get();
	struct packet p = {};
	struct cpu_state *cs;
	struct hop h = {};
	int hop, l2, clen, fits, rc;
	__u64 now;
	__u32 gen;

	if (parse_l3(data, data_end, &p) != PARSE_OK || !m || m->family != p.family)
		return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
	if (p.l4 && parse_ports(data_end, &p))
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	cs = cpu_state_get();
	now = now_gen(cs, &gen);
	hop = next_hop(ctx, &p, data_end, now, gen, &h);
	if (hop == HOP_DROP)
		return send_hop(ctx, &p, data_end, hop, &h);
	if (hop == HOP_TOO_BIG) { /* too big even without the carrier (pmtu.h) */
		rc = too_big_call(ctx, &p, data_end, &m->vip, m->vport, h.mtu, PROG_TOO_BIG_CLIENT);
		if (rc >= 0)
			return rc;
	}
	l2 = p.vlan ? sizeof(struct ethhdr) + 4 : sizeof(struct ethhdr);
	if ((void *)p.eth + l2 != p.l3)
		return send_hop(ctx, &p, data_end, hop, &h);
	if (p.family == FAMILY_V4) {
		struct iphdr *iph = p.l3;

		clen = DSR_OPT4_LEN;
		/* Options already there: the node expects the carrier to be the only one. */
		if ((void *)(iph + 1) > data_end || iph->ihl != 5) {
			count_reason(REASON_DSR_NO_ROOM);
			return send_hop(ctx, &p, data_end, hop, &h);
		}
	} else {
		clen = DSR_OPT6_HDRLEN;
	}
	/* Handed to the kernel, the packet's MTU is unknown here: only the least IPv6 allows. */
	fits = ip_len(&p) + clen <= (hop == HOP_SEND ? h.mtu : 1280);
	if (!fits) {
		if (hop == HOP_SEND && p.proto == PROTO_UDP && !p.is_frag && h.mtu > clen) {
			rc = -1;
			if (p.family == FAMILY_V4 && (((struct iphdr *)p.l3)->frag_off & IP_DF_BE))
				rc = dsr_too_big4(ctx, m, l2, h.mtu - clen);
			else if (p.family == FAMILY_V6 && p.l4 == p.l3 + sizeof(struct ipv6hdr))
				rc = dsr_too_big6(ctx, m, l2, h.mtu - clen);
			if (rc >= 0)
				return rc;
		}
		count_reason(REASON_DSR_NO_ROOM);
		return send_hop(ctx, &p, data_end, hop, &h);
	}
	if (p.family == FAMILY_V4)
		rc = l2 == sizeof(struct ethhdr) ? dsr_insert4(ctx, m, sizeof(struct ethhdr)) :
						   dsr_insert4(ctx, m, sizeof(struct ethhdr) + 4);
	else
		rc = l2 == sizeof(struct ethhdr) ? dsr_insert6(ctx, m, sizeof(struct ethhdr)) :
						   dsr_insert6(ctx, m, sizeof(struct ethhdr) + 4);
	/* The frame moved (or may have): its pointers are taken again. send_hop needs the MACs and,
	 * to give the kernel the TTL back, the IP header. */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (rc == -2 || data + l2 + (p.family == FAMILY_V4 ? sizeof(struct iphdr) :
						   sizeof(struct ipv6hdr)) > data_end)
		return verdict(REASON_DROP_MALFORMED_L4, XDP_DROP);
	p.eth = data;
	p.l3 = data + l2;
	count_reason(rc ? REASON_DSR_NO_ROOM : REASON_DSR_CARRIED);
	return send_hop(ctx, &p, data_end, hop, &h);
}

/* xlb_too_big_client answers a client's packet that forward() DNATed and found too big for the
 * path to its backend (pmtu.h), reached by tail call with its frontend in dsr_scratch. */
SEC("xdp")
int xlb_too_big_client(struct xdp_md *ctx)
{
	return too_big(ctx, 1);
}

/* xlb_too_big_backend answers a backend's reply that lb_reverse found too big for the path to its
 * client (pmtu.h), reached by tail call before the reply was rewritten. */
SEC("xdp")
int xlb_too_big_backend(struct xdp_md *ctx)
{
	return too_big(ctx, 0);
}
