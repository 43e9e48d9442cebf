// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sink.c: the sink. Attached to the sink's veth, it counts every frame that arrives by class
 * (see consts.h) and drops it: what it counts is what got through the gateway. Of the frames
 * to the backend it also counts those that hold direct server return's carrier (the gateway's
 * IPv4 option, xdp/datapath's DSR_OPT4_*: IHL 7, first option 0x9e of length 8), so that a DSR
 * row can show which of the frames it forwarded carried one.
 *
 * In the connections-per-second mix (sink_cfg.respond) the sink is a stateless TCP server
 * instead: it answers a SYN to the backend with a SYN-ACK (XDP_TX, back through the gateway),
 * counted as CLASS_ANSWERED, and counts as CLASS_BACKEND, the class the closed loop
 * acknowledges, only an ACK that acknowledges its SYN-ACK: a completed handshake. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "progress.h"
#include "answer.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sink_cfg: which destinations make which class. */
struct sink_cfg {
	__u32 backend; /* the backend address, network order */
	__u32 vip;     /* the VIP, network order */
	__u32 respond; /* 1: answer SYNs, count completed handshakes (the cps mix) */
};

/* sink_config: index 0 -> sink_cfg. One entry, written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sink_cfg);
	__uint(max_entries, 1);
} sink_config SEC(".maps");

struct sink_count {
	__u64 packets;
	__u64 bytes;
	__u64 carried; /* CLASS_BACKEND only: frames with the DSR carrier */
};

/* The carrier as the gateway writes it (xdp/datapath/datapath.h DSR_OPT4_TYPE, _LEN). */
#define DSR_OPT4_TYPE 0x9e
#define DSR_OPT4_LEN 8


/* IPPROTO_TCP_ is IPPROTO_TCP, the IPv4 protocol byte of a TCP segment (OFF_IP_PROTO). */
#define IPPROTO_TCP_ 6
#define OFF_IP_PROTO 23

/* respond is the cps mix's server: a SYN to the backend is answered (XDP_TX), an ACK of the
 * answer is a handshake (CLASS_BACKEND), anything else to the backend is CLASS_OTHER. It sets
 * *class and returns the verdict. */
static __always_inline int respond(void *data, void *data_end, __u32 *class)
{
	*class = CLASS_OTHER;
	if (data + TCP_HDR_END > data_end || *(__u8 *)(data + OFF_IP_PROTO) != IPPROTO_TCP_)
		return XDP_DROP;
	__u8 flags = *(__u8 *)(data + OFF_TCP_FLAGS);
	__u8 bad = TCPF_RST | TCPF_FIN;

	if ((flags & (TCPF_SYN | TCPF_ACK | bad)) == TCPF_SYN) {
		__u32 seq = bpf_ntohl(*(__u32 *)(data + OFF_TCP_SEQ));

		if (answer(data, SINK_ISN, seq + 1, TCPF_SYN | TCPF_ACK))
			return XDP_DROP;
		*class = CLASS_ANSWERED;
		return XDP_TX;
	}
	if ((flags & (TCPF_SYN | TCPF_ACK | bad)) == TCPF_ACK &&
	    *(__u32 *)(data + OFF_TCP_ACK) == bpf_htonl(SINK_ISN + 1))
		*class = CLASS_BACKEND;
	return XDP_DROP;
}

/* sink_counts: per CPU, class -> {packets, bytes}. Written by the program, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct sink_count);
	__uint(max_entries, NUM_CLASSES);
} sink_counts SEC(".maps");

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, class = CLASS_NONIP;
	int carried = 0, verdict = XDP_DROP;
	struct sink_cfg *cfg = bpf_map_lookup_elem(&sink_config, &zero);

	if (cfg && data + OFF_L4 <= data_end) {
		struct ethhdr *eth = data;

		if (eth->h_proto == bpf_htons(ETH_P_IP)) {
			__u32 daddr = *(__u32 *)(data + OFF_IP_DADDR);

			class = daddr == cfg->backend ? CLASS_BACKEND
				: daddr == cfg->vip   ? CLASS_VIP
						      : CLASS_OTHER;
			if (class == CLASS_BACKEND && cfg->respond)
				verdict = respond(data, data_end, &class);
			else if (class == CLASS_BACKEND && data + OFF_L4 + 2 <= data_end) {
				__u8 *opt = data + OFF_L4; /* the first option, when IHL > 5 */

				carried = (*(__u8 *)(data + ETH_HLEN_) & 0x0f) == 5 + DSR_OPT4_LEN / 4 &&
					  opt[0] == DSR_OPT4_TYPE && opt[1] == DSR_OPT4_LEN;
			}
		} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			class = CLASS_OTHER;
		}
	}
	struct sink_count *c = bpf_map_lookup_elem(&sink_counts, &class);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
		c->carried += carried;
		if (class <= CLASS_VIP && c->packets % PROGRESS_STEP == 0) {
			struct gen_progress *pr = bpf_map_lookup_elem(&progress, &zero);

			if (pr)
				__sync_fetch_and_add(&pr->delivered, PROGRESS_STEP);
		}
	}
	return verdict;
}
