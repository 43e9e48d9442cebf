/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hs.h: the handshake table (map hs_slots; docs/datapath.md, "The handshake table"): where each
 * TCP handshake in flight sent its SYN, one direct-mapped slot per tuple hash. */
#ifndef XLB_HS_H
#define XLB_HS_H

#include "maps.h"
#include "lb.h"

/* HS_CHECK_MUL spreads the fields hs_check folds together. */
#define HS_CHECK_MUL 0x9e3779b1u

/* hs_check folds a tuple's hash and the backend, VIP and sequence number written for it into the
 * word an entry carries, so that a slot two CPUs wrote at once (fields of two SYNs) reads as no
 * entry rather than as a tuple with another SYN's backend. */
static __always_inline __u32 hs_check(__u32 hash, __u32 backend_id, __u32 vip_id, __u32 isn)
{
	return ((hash ^ backend_id) * HS_CHECK_MUL ^ vip_id) * HS_CHECK_MUL ^ isn;
}

/* A tuple's entry may sit in either slot of a pair: its home slot (tuple_hash & cfg_hs_mask),
 * which also keeps its live-flow filter bit, or the other slot of the same 128-byte pair (home ^
 * 1, the adjacent cache line, which CPUs tend to fetch with the first). Two choices make a
 * slot's collisions rare where one made them common: a SYN takes the slot of the pair whose
 * entry is cheaper to lose (hs_syn_slot), so it moves a connection into conntrack only when both
 * hold one. A tuple is in at most one slot of its pair: whoever writes it writes the slot already
 * holding it, if one does. */

/* hs_slot returns the home slot of the tuple of hash (tuple_hash) in hs_slots. */
static __always_inline struct hs_entry *hs_slot(__u32 hash)
{
	__u32 i = hash & cfg_hs_mask;

	return bpf_map_lookup_elem(&hs_slots, &i);
}

/* hs_alt returns the other slot of the home slot's pair. */
static __always_inline struct hs_entry *hs_alt(__u32 hash)
{
	__u32 i = (hash & cfg_hs_mask) ^ 1;

	return bpf_map_lookup_elem(&hs_slots, &i);
}

/* hs_whole says whether slot e holds a whole entry for fk (hash its tuple_hash): its tuple, and a
 * check word that matches its fields. */
static __always_inline int hs_whole(const struct hs_entry *e, const struct flow_key *fk,
				    __u32 hash)
{
	return e && flow_key_eq(&e->key, fk) &&
	       e->check == hs_check(hash, e->backend_id, e->vip_id, e->isn);
}

/* hs_held returns the slot of fk's pair (hash its tuple_hash) that holds a whole entry for fk
 * (hs_whole), the home slot first. Else NULL. */
static __always_inline struct hs_entry *hs_held(const struct flow_key *fk, __u32 hash)
{
	struct hs_entry *e = hs_slot(hash);

	if (hs_whole(e, fk, hash))
		return e;
	e = hs_alt(hash);
	return hs_whole(e, fk, hash) ? e : NULL;
}

/* hs_state returns slot e's state (HS_ST_*): its key's first padding byte, which a packet's key
 * (zeroed, then filled) always has 0, so that hs_write starts a slot at 0 and flow_key_eq, which
 * compares no padding, ignores it. */
#define hs_state(e) ((e)->key.pad[0])

/* hs_conn_live says whether slot e holds a connection (HS_ST_CONN) not idle past conntrack's
 * timeout for it (established, or closing after a FIN or RST) at time now. */
static __always_inline int hs_conn_live(const struct hs_entry *e, __u64 now)
{
	__s32 age = (__s32)(hs_time(now) - e->syn_time);
	__u64 timeout = (hs_state(e) & HS_ST_CLOSING) ? cfg_tcp_closing_ns : cfg_tcp_established_ns;

	if (!(hs_state(e) & HS_ST_CONN) || age < -(__s32)HS_SKEW_UNITS)
		return 0;
	return age <= 0 || (__u64)age <= (timeout >> HS_TIME_SHIFT);
}

/* hs_conn_worth says whether the connection slot e holds must be moved into conntrack before
 * another tuple takes the slot at time now: it is live, and if closing, its last packet was less
 * than HS_CLOSING_PROMOTE_NS ago. */
static __always_inline int hs_conn_worth(const struct hs_entry *e, __u64 now)
{
	__s32 age = (__s32)(hs_time(now) - e->syn_time);

	if (!hs_conn_live(e, now))
		return 0;
	return !(hs_state(e) & HS_ST_CLOSING) || age <= (__s32)(HS_CLOSING_PROMOTE_NS >> HS_TIME_SHIFT);
}

/* What a slot's entry costs whoever takes the slot over (hs_rank), least first: nothing (empty,
 * a stale handshake or first datagram, a connection not worth keeping); another datagram flow's
 * first datagram, older than HS_DATAGRAM_HOLD_NS, then a recent one (its second datagram would be
 * balanced as a first again); a fresh TCP handshake's record (its ACK falls back to Maglev); a
 * connection worth keeping (hs_conn_worth), which hs_promote must move into conntrack first. */
enum hs_rank {
	HS_RANK_FREE,
	HS_RANK_DATAGRAM_OLD,
	HS_RANK_DATAGRAM,
	HS_RANK_HANDSHAKE,
	HS_RANK_CONN,
};

/* hs_datagram_live says whether slot e's first-datagram entry may still be its flow's at time
 * now: fresh (hs_fresh) and younger than the datagram timeout (cfg_udp_ns) — a datagram flow idle
 * past it is a new flow, as its conntrack entry would be expired. */
static __always_inline int hs_datagram_live(const struct hs_entry *e, __u64 now)
{
	__s32 age = (__s32)(hs_time(now) - e->syn_time);

	return hs_fresh(e->syn_time, now) && (age <= 0 || (__u64)age <= (cfg_udp_ns >> HS_TIME_SHIFT));
}

/* hs_rank returns what slot e's entry costs whoever takes the slot over at time now. */
static __always_inline enum hs_rank hs_rank(const struct hs_entry *e, __u64 now)
{
	__s32 age = (__s32)(hs_time(now) - e->syn_time);

	if (!e->key.family)
		return HS_RANK_FREE;
	if (e->key.proto != PROTO_TCP) {
		if (!hs_datagram_live(e, now))
			return HS_RANK_FREE;
		return age <= (__s32)(HS_DATAGRAM_HOLD_NS >> HS_TIME_SHIFT) ? HS_RANK_DATAGRAM :
									      HS_RANK_DATAGRAM_OLD;
	}
	if (hs_state(e) & HS_ST_CONN)
		return hs_conn_worth(e, now) ? HS_RANK_CONN : HS_RANK_FREE;
	return hs_fresh(e->syn_time, now) ? HS_RANK_HANDSHAKE : HS_RANK_FREE;
}

/* HS_NO_SLOT is hs_pick's answer when neither slot of the pair may be taken. */
#define HS_NO_SLOT 0xffffffffu

/* hs_pick returns the index of the slot of fk's pair (hash its tuple_hash) that fk's entry is to
 * be written to at time now: the one already holding fk, if one does (whatever it holds: a new
 * SYN or datagram of the tuple replaces its old entry); else the one whose entry costs less to
 * lose (hs_rank), the home slot on a tie, if that cost is at most max; else HS_NO_SLOT. A global
 * function: the verifier checks it once. */
__noinline __u32 hs_pick(const struct flow_key *fk, __u32 hash, __u64 now, __u32 max)
{
	__u32 home = hash & cfg_hs_mask, alt = home ^ 1;
	struct hs_entry *a = bpf_map_lookup_elem(&hs_slots, &home);
	struct hs_entry *b = bpf_map_lookup_elem(&hs_slots, &alt);
	__u32 ra, rb;

	if (!fk || !a || !b)
		return HS_NO_SLOT;
	if (a->key.family && flow_key_eq(&a->key, fk))
		return home;
	if (b->key.family && flow_key_eq(&b->key, fk))
		return alt;
	ra = hs_rank(a, now);
	rb = hs_rank(b, now);
	if (rb < ra) {
		ra = rb;
		home = alt;
	}
	return ra <= max ? home : HS_NO_SLOT;
}

/* HS_PROBE_HOLDS is set in hs_probe's result when the slot holds the tuple's entry; HS_PROBE_CONN
 * when that entry is a live connection (HS_ST_CONN) whose backend the packet keeps; HS_PROBE_ALT
 * when the entry is in the pair's other slot (hs_alt), not the home slot. */
#define HS_PROBE_HOLDS (1ull << 32)
#define HS_PROBE_CONN  (1ull << 33)
#define HS_PROBE_ALT   (1ull << 34)

/* hs_probe asks the slot of fk (hash its tuple_hash) for a packet of VIP vip_id at time now:
 * HS_PROBE_HOLDS when the slot holds a whole entry for fk (its tuple, and a check word that
 * matches its fields), ored with the entry's backend if the packet may use it (hs_backend: match
 * and seq are mseq's high and low 32 bits). Of a connection the slot holds (HS_ST_CONN), any
 * packet may use the backend while the connection is live (hs_conn_live: a closing one for the
 * closing timeout), of this VIP and the backend usable: then HS_PROBE_CONN is set too, and a SYN
 * makes a closing connection live again (its time refreshed), as it does a conntrack entry
 * (stage_new.h: a FIN or RST with any sequence number marks a connection closing, so a SYN after
 * a forged one must not move it). A global function: the verifier checks it once, and the paths
 * near its limits that call it see only its result. */
__noinline __u64 hs_probe(const struct flow_key *fk, __u32 hash, __u32 vip_id, __u64 now,
			  __u64 mseq)
{
	struct hs_entry *e;
	__u64 holds = HS_PROBE_HOLDS;

	if (!fk)
		return 0;
	e = hs_slot(hash);
	if (!hs_whole(e, fk, hash)) {
		e = hs_alt(hash);
		holds |= HS_PROBE_ALT;
	}
	if (!e || !hs_whole(e, fk, hash))
		return 0;
	if (hs_state(e) & HS_ST_CONN) {
		if (!hs_conn_live(e, now) || e->vip_id != vip_id || !backend_get(e->backend_id))
			return holds;
		if ((mseq >> 32) == HS_MATCH_SYN && (hs_state(e) & HS_ST_CLOSING)) {
			hs_state(e) &= ~HS_ST_CLOSING;
			e->syn_time = hs_time(now);
		}
		return holds | HS_PROBE_CONN | e->backend_id;
	}
	return holds | hs_backend(e, vip_id, now, mseq >> 32, (__u32)mseq);
}

/* HS_CONN_STALE and HS_CONN_CLOSING are flags of hs_conn's result. */
#define HS_CONN_STALE   (1ull << 62)
#define HS_CONN_CLOSING (1ull << 63)

/* hs_conn asks the slot of fk (hash its tuple_hash) for the connection it holds (HS_ST_CONN), for
 * a packet without SYN that missed the flow cache at time now: it returns the connection's VIP
 * (bits 32-61) and backend (bits 0-31), with HS_CONN_CLOSING when it is closing, or 0 when the
 * slot holds no connection of fk. A live connection is refreshed (its time, and closing, the
 * packet's FIN or RST: CT_F_CLOSING) as conntrack's entry would be; one idle past its timeout is
 * returned with HS_CONN_STALE, untouched, for the caller to count as conntrack's would be
 * (ct_reselect). Whether the VIP and backend still hold is the caller's to check. A global
 * function: the verifier checks it once. */
__noinline __u64 hs_conn(const struct flow_key *fk, __u32 hash, __u64 now, __u32 closing)
{
	struct hs_entry *e;
	__u8 st;

	if (!fk)
		return 0;
	e = hs_held(fk, hash);
	if (!e || !(hs_state(e) & HS_ST_CONN))
		return 0;
	if (!hs_conn_live(e, now))
		return HS_CONN_STALE | (__u64)e->vip_id << 32 | e->backend_id;
	st = hs_state(e) | (closing ? HS_ST_CLOSING : 0);
	if (st != hs_state(e))
		hs_state(e) = st;
	if (e->syn_time != hs_time(now))
		e->syn_time = hs_time(now);
	return (__u64)e->vip_id << 32 | e->backend_id |
	       ((st & HS_ST_CLOSING) ? HS_CONN_CLOSING : 0);
}

/* hs_establish marks slot e, which holds the handshake whose ACK (or first data) just came at
 * time now, as holding the connection from now on (HS_ST_CONN, closing when the packet carried
 * FIN or RST: closing is CT_F_CLOSING or 0): the connection needs no conntrack entry until its
 * slot is needed (hs_promote), and one that ends before then never has one. */
static __always_inline void hs_establish(struct hs_entry *e, __u64 now, __u8 closing)
{
	hs_state(e) |= HS_ST_CONN | (closing ? HS_ST_CLOSING : 0);
	e->syn_time = hs_time(now);
}

/* hs_write records in slot e that the SYN of fk (hash its tuple_hash) went to backend bid of VIP
 * vip_id at time now, with sequence number isn, taking the slot over from whatever it held. */
static __always_inline void hs_write(struct hs_entry *e, const struct flow_key *fk, __u32 hash,
				     __u64 now, __u32 bid, __u32 vip_id, __u32 isn)
{
	e->key = *fk;
	e->syn_time = hs_time(now);
	e->backend_id = bid;
	e->vip_id = vip_id;
	e->isn = isn;
	e->check = hs_check(hash, bid, vip_id, isn);
}

/* hs_udp_take returns the backend the first datagram of flow fk (hash its tuple_hash, no
 * conntrack entry) went to, if its home slot holds that (hs_udp_record) and a datagram of VIP
 * vip_id may still use it at time now (hs_backend, and within the datagram timeout, cfg_udp_ns),
 * and empties the slot: conntrack takes the flow over. Else 0. A datagram flow's first datagram
 * only ever takes its home slot, not the other of its pair: reading a second line for every new
 * datagram measured ~130 ns of a first datagram's ~400 (a SYN pays it, for the connections it
 * keeps out of conntrack; a datagram would not). A global function: the verifier checks it
 * once. */
__noinline __u32 hs_udp_take(const struct flow_key *fk, __u32 hash, __u32 vip_id, __u64 now)
{
	struct hs_entry *e;
	__u32 bid;

	if (!fk)
		return 0;
	e = hs_slot(hash);
	if (!hs_whole(e, fk, hash))
		return 0;
	bid = hs_backend(e, vip_id, now, HS_MATCH_ANY, 0);
	if (!bid || !hs_datagram_live(e, now))
		return 0;
	e->key.family = 0; /* hs_retire */
	return bid;
}

/* hs_udp_record records in fk's home slot (hash its tuple_hash) that the first datagram of a flow
 * without a conntrack entry went to backend bid of VIP vip_id (bid_vip's high and low 32 bits) at
 * time now, and returns 1, if the slot may take it: when it holds the tuple's own unusable entry,
 * or costs at most HS_RANK_DATAGRAM_OLD to take (hs_rank: empty, a stale entry, a connection not
 * worth keeping, another datagram flow's first datagram older than HS_DATAGRAM_HOLD_NS — that
 * flow, if it sends again, is balanced as new, by Maglev, the same backend unless the table
 * changed meanwhile). A fresh handshake, a live connection or another flow's recent first
 * datagram is never taken over by a datagram: a flood of datagrams cannot cost a connection its
 * SYN's record nor move connections into conntrack, and two datagram flows sharing a slot do not
 * take each other's entry in turn (the second, within the hold, goes to conntrack). Otherwise it
 * returns 0 and the datagram goes into conntrack at once. A global function: the verifier checks
 * it once. */
__noinline int hs_udp_record(const struct flow_key *fk, __u32 hash, __u64 now, __u64 bid_vip)
{
	struct hs_entry *e = hs_slot(hash);

	if (!fk || !e)
		return 0;
	if (!(e->key.family && flow_key_eq(&e->key, fk)) && hs_rank(e, now) > HS_RANK_DATAGRAM_OLD)
		return 0;
	hs_write(e, fk, hash, now, bid_vip >> 32, (__u32)bid_vip, 0);
	return 1;
}

/* hs_retire empties slot e: its handshake completed (the conntrack entry took over). The slot's
 * live-flow filter bits stay. */
static __always_inline void hs_retire(struct hs_entry *e)
{
	e->key.family = 0;
}

#endif
