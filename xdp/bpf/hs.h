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

/* hs_slot returns the slot of the tuple of hash (tuple_hash) in hs_slots. */
static __always_inline struct hs_entry *hs_slot(__u32 hash)
{
	__u32 i = hash & cfg_hs_mask;

	return bpf_map_lookup_elem(&hs_slots, &i);
}

/* hs_held returns the slot of fk (hash its tuple_hash) if it holds a whole entry for fk: its
 * tuple, and a check word that matches its fields. Else NULL. */
static __always_inline struct hs_entry *hs_held(const struct flow_key *fk, __u32 hash)
{
	struct hs_entry *e = hs_slot(hash);

	if (!e || !flow_key_eq(&e->key, fk) ||
	    e->check != hs_check(hash, e->backend_id, e->vip_id, e->isn))
		return NULL;
	return e;
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

/* hs_busy says whether slot e holds something a new tuple must not simply overwrite at time now:
 * a fresh TCP handshake, or a connection worth keeping (hs_conn_worth: hs_promote moves it into
 * conntrack first). */
static __always_inline int hs_busy(const struct hs_entry *e, __u64 now)
{
	if (!e->key.family || e->key.proto != PROTO_TCP)
		return 0;
	return (hs_state(e) & HS_ST_CONN) ? hs_conn_worth(e, now) : hs_fresh(e->syn_time, now);
}

/* HS_PROBE_HOLDS is set in hs_probe's result when the slot holds the tuple's entry; HS_PROBE_CONN
 * when that entry is a live connection (HS_ST_CONN) whose backend the packet keeps. */
#define HS_PROBE_HOLDS (1ull << 32)
#define HS_PROBE_CONN  (1ull << 33)

/* hs_probe asks the slot of fk (hash its tuple_hash) for a packet of VIP vip_id at time now:
 * HS_PROBE_HOLDS when the slot holds a whole entry for fk (its tuple, and a check word that
 * matches its fields), ored with the entry's backend if the packet may use it (hs_backend: match
 * and seq are mseq's high and low 32 bits). Of a connection the slot holds (HS_ST_CONN), any
 * packet may use the backend while the connection is live, of this VIP and the backend usable,
 * except a SYN once the connection is closing (a new connection on a reused port): then
 * HS_PROBE_CONN is set too. A global function: the verifier checks it once, and the paths near
 * its limits that call it see only its result. */
__noinline __u64 hs_probe(const struct flow_key *fk, __u32 hash, __u32 vip_id, __u64 now,
			  __u64 mseq)
{
	struct hs_entry *e;

	if (!fk)
		return 0;
	e = hs_held(fk, hash);
	if (!e)
		return 0;
	if (hs_state(e) & HS_ST_CONN) {
		if (!hs_conn_live(e, now) || e->vip_id != vip_id || !backend_get(e->backend_id) ||
		    ((mseq >> 32) == HS_MATCH_SYN && (hs_state(e) & HS_ST_CLOSING)))
			return HS_PROBE_HOLDS;
		return HS_PROBE_HOLDS | HS_PROBE_CONN | e->backend_id;
	}
	return HS_PROBE_HOLDS | hs_backend(e, vip_id, now, mseq >> 32, (__u32)mseq);
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
 * conntrack entry) went to, if its slot holds that (hs_udp_record) and a datagram of VIP vip_id
 * may still use it at time now (hs_backend, and within the datagram timeout, cfg_udp_ns), and
 * empties the slot: conntrack takes the flow over. Else 0. A global function: the verifier checks it once. */
__noinline __u32 hs_udp_take(const struct flow_key *fk, __u32 hash, __u32 vip_id, __u64 now)
{
	struct hs_entry *e;
	__u32 bid;
	__s32 age;

	if (!fk)
		return 0;
	e = hs_held(fk, hash);
	if (!e)
		return 0;
	bid = hs_backend(e, vip_id, now, HS_MATCH_ANY, 0);
	/* A datagram flow idle past the datagram timeout is a new flow, as its conntrack entry
	 * would be expired. */
	age = (__s32)(hs_time(now) - e->syn_time);
	if (!bid || (age > 0 && (__u64)age > (cfg_udp_ns >> HS_TIME_SHIFT)))
		return 0;
	e->key.family = 0; /* hs_retire */
	return bid;
}

/* hs_udp_record records in the slot of fk (hash its tuple_hash) that the first datagram of a
 * flow without a conntrack entry went to backend bid of VIP vip_id (bid_vip's high and low 32
 * bits) at time now, and returns 1, if the slot may take it: when it is empty, holds a datagram
 * flow's first (the tuple's own unusable one, or another flow's: that flow, if it sends again, is
 * balanced as new, by Maglev, the same backend unless the table changed meanwhile), or a
 * handshake no longer fresh. A fresh handshake is never taken over by a datagram, so a flood of
 * datagrams cannot cost a connection its SYN's record: then it returns 0 and the datagram goes
 * into conntrack at once. A global function: the verifier checks it once. */
__noinline int hs_udp_record(const struct flow_key *fk, __u32 hash, __u64 now, __u64 bid_vip)
{
	struct hs_entry *e = hs_slot(hash);

	if (!fk || !e)
		return 0;
	if (hs_busy(e, now))
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
