// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* gen.c: the traffic generator. Run with BPF_PROG_RUN in live-frames mode
 * (BPF_F_TEST_XDP_LIVE_FRAMES) with the generator's veth as the ingress interface: every run
 * writes one complete frame from the template in gen_cfg and returns XDP_TX, which the kernel
 * turns into a transmit on that veth, so the frame arrives at its peer (the gateway).
 *
 * Live-frames mode recycles its pages without refilling them: whatever a program downstream
 * rewrote in place (the gateway's DNAT, MACs) is what the next run finds. So nothing of the
 * previous frame is trusted: all headers are copied from the template on every run, and the
 * per-flow fields and both checksums are written after.
 *
 * Closed loop (gen_cfg.window > 0): a frame is only sent while fewer than window frames are
 * unacknowledged by the sink (map progress); otherwise the program waits, spinning in bpf_loop
 * on the acknowledgement counter, and sends when it moves. An open-loop generator overruns the
 * gateway's 256-frame ring, and the frames the kernel then fails to transmit are freed into the
 * page pool's shared ring, whose lock the gateway's CPU takes for every frame the sink frees:
 * lock contention on the gateway that no real NIC would cause (it drops in hardware). Waiting
 * inside the program, rather than returning XDP_DROP, frees nothing. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "progress.h"
#include "answer.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* gen_cfg: what to send. Written by Go before a run, read on every run. */
struct gen_cfg {
	__u8 hdr[GEN_HDR_LEN]; /* Ethernet + IPv4 + L4 template; source address, source port and
				* checksums zero, zero past the headers */
	__u32 saddr_base;      /* first source address, host order */
	__u32 nflows;	       /* distinct flows (source address, port pairs); at least 1 */
	__u32 ports_per_addr;  /* source ports per source address; at least 1 */
	__u32 ip_sum;	       /* ones' complement sum of the template's IPv4 header, 16-bit words
				* loaded little-endian, without the source address */
	__u32 l4_sum;	       /* the same over the pseudo-header, L4 header and zero payload,
				* without the source address and port */
	__u16 sport_base;      /* first source port, host order */
	__u8 udp;	       /* 1: the template is UDP, 0: TCP */
	__u8 _pad;
	__u32 window;	       /* closed loop: most frames unacknowledged by the sink; 0 = open loop */
};

/* gen_config: index 0 -> gen_cfg. One entry, written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_cfg);
	__uint(max_entries, 1);
} gen_config SEC(".maps");

/* gen_state: per CPU, index 0 -> gen_counters. Written by the program; Go reads the counts
 * (summed over CPUs), restarts the flow sequence and resets the closed loop's fields. */
struct gen_counters {
	__u64 seq;	 /* flow index of the next frame (mod nflows) */
	__u64 sent;	 /* frames returned with XDP_TX */
	__u64 throttled; /* closed loop: frames that had to wait for acknowledgements */
	__u64 wsent;	 /* closed loop: frames sent since Go last reset the loop */
	__u64 forgiven;	 /* closed loop: frames given up on as lost since that reset */
	__u64 stalled;	 /* closed loop: waits that ran out (GEN_WAIT_SPINS) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_counters);
	__uint(max_entries, 1);
} gen_state SEC(".maps");

/* unacked is how many frames the closed loop has sent and the sink not yet acknowledged. */
static __always_inline __s64 unacked(struct gen_counters *st)
{
	__u32 zero = 0;
	struct gen_progress *pr = bpf_map_lookup_elem(&progress, &zero);
	__u64 acked = pr ? *(volatile __u64 *)&pr->delivered : 0;

	return (__s64)(st->wsent - st->forgiven - acked);
}

/* wait_ctx is what wait_step sees of the frame that waits. */
struct wait_ctx {
	struct gen_counters *st;
	__u32 window;
	__u32 ok; /* set when the frame may go */
};

/* wait_step is one bpf_loop step of a frame's wait: it ends the loop once the window has room. */
static long wait_step(__u64 i, void *arg)
{
	struct wait_ctx *w = arg;

	if (unacked(w->st) < (__s64)w->window) {
		w->ok = 1;
		return 1;
	}
	return 0;
}

/* fold turns a 32-bit ones' complement sum into the 16-bit checksum field. */
static __always_inline __u16 fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;

	/* The frame starts GEN_ALIGN bytes in, on a cache line (see consts.h). */
	if (bpf_xdp_adjust_head(ctx, GEN_ALIGN))
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct gen_cfg *cfg = bpf_map_lookup_elem(&gen_config, &zero);
	struct gen_counters *st = bpf_map_lookup_elem(&gen_state, &zero);

	if (!cfg || !st || cfg->nflows == 0 || cfg->ports_per_addr == 0)
		return XDP_ABORTED;
	if (data + GEN_HDR_LEN > data_end)
		return XDP_ABORTED;
	if (cfg->window) {
		__s64 inflight = unacked(st);

		if (inflight >= (__s64)cfg->window) {
			struct wait_ctx w = { .st = st, .window = cfg->window };

			st->throttled++;
			bpf_loop(GEN_WAIT_SPINS, wait_step, &w, 0);
			if (!w.ok) { /* lost on the way: stop waiting for them */
				st->stalled++;
				st->forgiven += unacked(st);
			}
		}
		st->wsent++;
	}
	__builtin_memcpy(data, cfg->hdr, GEN_HDR_LEN);

	__u32 i = st->seq % cfg->nflows;
	st->seq++;
	__u32 saddr = bpf_htonl(cfg->saddr_base + i / cfg->ports_per_addr);
	__u16 sport = bpf_htons(cfg->sport_base + i % cfg->ports_per_addr);
	__u32 halves = (saddr & 0xffff) + (saddr >> 16);

	*(__u32 *)(data + OFF_IP_SADDR) = saddr;
	*(__u16 *)(data + OFF_SPORT) = sport;
	*(__u16 *)(data + OFF_IP_CSUM) = fold(cfg->ip_sum + halves);
	__u16 l4 = fold(cfg->l4_sum + halves + sport);
	if (cfg->udp)
		*(__u16 *)(data + OFF_UDP_CSUM) = l4 ? l4 : 0xffff; /* 0 means "none" in UDP */
	else
		*(__u16 *)(data + OFF_TCP_CSUM) = l4;
	st->sent++;
	return XDP_TX;
}

/* client_counts: per CPU, index 0 -> SYN-ACKs bench_client answered with an ACK, 1 -> frames
 * it passed (anything else). Written by the program, read by Go (diagnosis). */
#define CLIENT_ANSWERED 0
#define CLIENT_PASSED 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} client_counts SEC(".maps");

/* IPv4's TCP protocol number and where it sits in a frame; the Ethernet type of IPv4. */
#define IPPROTO_TCP_ 6
#define OFF_IP_PROTO 23
#define ETH_P_IP_ 0x0800

/* bench_client: the client side of the connections-per-second mix, attached to the generator's
 * veth. A SYN-ACK that acknowledges the generator's SYN (GEN_ISN + 1) is answered in place with
 * the handshake's ACK and sent back (XDP_TX) toward the gateway; anything else is passed. */
SEC("xdp")
int bench_client(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key = CLIENT_PASSED;
	int verdict = XDP_PASS;

	if (data + TCP_HDR_END <= data_end && *(__u16 *)(data + 12) == bpf_htons(ETH_P_IP_) &&
	    *(__u8 *)(data + ETH_HLEN_) == 0x45 && *(__u8 *)(data + OFF_IP_PROTO) == IPPROTO_TCP_ &&
	    (*(__u8 *)(data + OFF_TCP_FLAGS) & (TCPF_SYN | TCPF_ACK | TCPF_RST | TCPF_FIN)) ==
		    (TCPF_SYN | TCPF_ACK) &&
	    *(__u32 *)(data + OFF_TCP_ACK) == bpf_htonl(GEN_ISN + 1)) {
		__u32 seq = bpf_ntohl(*(__u32 *)(data + OFF_TCP_SEQ));

		if (!answer(data, GEN_ISN + 1, seq + 1, TCPF_ACK)) {
			key = CLIENT_ANSWERED;
			verdict = XDP_TX;
		}
	}
	__u64 *n = bpf_map_lookup_elem(&client_counts, &key);
	if (n)
		(*n)++;
	return verdict;
}
