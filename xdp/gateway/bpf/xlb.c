// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xlb.c: the xlb XDP load balancer, its entry program and its stages.
 *
 * Client -> VIP packets are DNATed to a backend (Pod IP : target port) chosen by conntrack or,
 * for new flows, by the VIP's Maglev table; backend -> client replies get the VIP back as their
 * source (stateless from the reverse map; when an endpoint serves several VIP:ports, from
 * conntrack, else from the candidates' Maglev tables). Everything else goes to the host untouched.
 *
 * The datapath is cut into programs, one per stage and address family, so that the verifier
 * walks each on its own (stage.h; docs/datapath.md draws the graph):
 *   xlb_xdp (attached)          stage_fast.h    established flows' replays, replies, not ours
 *   xlb_full4, xlb_full6        stage_full.h    full parse, established flows, dispatch
 *   xlb_new4, xlb_new6          stage_new.h     VIP lookup, source checks, Maglev, budgets,
 *                                               the handshake table
 *   xlb_reply4, xlb_reply6      stage_reply.h   backend -> client
 *   xlb_egress4, xlb_egress6    stage_egress.h  DNAT, flow-cache record, next hop, send
 *   xlb_icmp4, xlb_icmp6        icmp.h          ICMP errors about VIP flows, echo
 *   xlb_dsr                     dsr.h           the carrier of direct server return
 *   xlb_too_big_client/_backend pmtu.h          "too big" answers
 * Every program but xlb_xdp is reached by tail call through progs (maps.h). */
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
#include "stage.h"
#include "flow_cache.h"
#include "stage_egress.h"
#include "stage_reply.h"
#include "stage_fast.h"
#include "stage_full.h"
#include "stage_new.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* full_prog returns the full path for the frame at data: xlb_full6 for IPv6 (after one VLAN tag
 * at most, as parse_l3 reads it), else xlb_full4, which gives non-IP frames their verdict too. */
static __always_inline int full_prog(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return PROG_FULL4;
	proto = eth->h_proto;
	if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE) {
		struct { __be16 tci; __be16 proto; } *vh = (void *)(eth + 1);

		if ((void *)(vh + 1) > data_end)
			return PROG_FULL4;
		proto = vh->proto;
	}
	return proto == ETH_P_IPV6_BE ? PROG_FULL6 : PROG_FULL4;
}

/* xlb_xdp is the program attached to interfaces: fast_path, else the full path of the packet's
 * family (by tail call: programs of their own, so the verifier explores them apart, and the fast
 * path runs on a small stack). */
SEC("xdp")
int xlb_xdp(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	int rc = fast_path(ctx, data, data_end);

	if (rc >= 0)
		return rc;
	if (full_prog(data, data_end) == PROG_FULL6)
		bpf_tail_call(ctx, &progs, PROG_FULL6);
	else
		bpf_tail_call(ctx, &progs, PROG_FULL4);
	return verdict(REASON_PASS_TAIL_CALL, XDP_PASS);
}

/* xlb_full4, xlb_full6: the full path (stage_full.h), reached by tail call from xlb_xdp. */
SEC("xdp")
int xlb_full4(struct xdp_md *ctx)
{
	return full_path(ctx, FAMILY_V4);
}

SEC("xdp")
int xlb_full6(struct xdp_md *ctx)
{
	return full_path(ctx, FAMILY_V6);
}

/* xlb_new4, xlb_new6: new flows (stage_new.h), reached by tail call from the full path. */
SEC("xdp")
int xlb_new4(struct xdp_md *ctx)
{
	return new_flow_stage(ctx, FAMILY_V4);
}

SEC("xdp")
int xlb_new6(struct xdp_md *ctx)
{
	return new_flow_stage(ctx, FAMILY_V6);
}

/* xlb_reply4, xlb_reply6: backends' replies (stage_reply.h), reached by tail call from the full
 * path or the new-flow stage. */
SEC("xdp")
int xlb_reply4(struct xdp_md *ctx)
{
	return reply_stage(ctx, FAMILY_V4);
}

SEC("xdp")
int xlb_reply6(struct xdp_md *ctx)
{
	return reply_stage(ctx, FAMILY_V6);
}

/* xlb_egress4, xlb_egress6: DNAT and send (stage_egress.h), reached by tail call from the full
 * path (an established flow) and the new-flow stage. */
SEC("xdp")
int xlb_egress4(struct xdp_md *ctx)
{
	return egress_stage(ctx, FAMILY_V4);
}

SEC("xdp")
int xlb_egress6(struct xdp_md *ctx)
{
	return egress_stage(ctx, FAMILY_V6);
}

/* icmp_stage is the program of family fam's ICMP (icmp.h), reached by tail call from the full
 * path. */
static __always_inline int icmp_stage(struct xdp_md *ctx, const __u8 fam)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct packet p = {};

	if (parse_l3(data, data_end, &p) != PARSE_OK || p.family != fam)
		return verdict(REASON_PASS_ICMP, XDP_PASS);
	p.family = fam;
	return handle_icmp(ctx, &p, data_end);
}

SEC("xdp")
int xlb_icmp4(struct xdp_md *ctx)
{
	return icmp_stage(ctx, FAMILY_V4);
}

SEC("xdp")
int xlb_icmp6(struct xdp_md *ctx)
{
	return icmp_stage(ctx, FAMILY_V6);
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
