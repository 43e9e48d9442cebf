// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sink.c: the sink. Attached to the sink's veth, it counts every frame that arrives by class
 * (see consts.h) and drops it: what it counts is what got through the gateway. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "progress.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sink_cfg: which destinations make which class. */
struct sink_cfg {
	__u32 backend; /* the backend address, network order */
	__u32 vip;     /* the VIP, network order */
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
};


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
	struct sink_cfg *cfg = bpf_map_lookup_elem(&sink_config, &zero);

	if (cfg && data + OFF_L4 <= data_end) {
		struct ethhdr *eth = data;

		if (eth->h_proto == bpf_htons(ETH_P_IP)) {
			__u32 daddr = *(__u32 *)(data + OFF_IP_DADDR);

			class = daddr == cfg->backend ? CLASS_BACKEND
				: daddr == cfg->vip   ? CLASS_VIP
						      : CLASS_OTHER;
		} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
			class = CLASS_OTHER;
		}
	}
	struct sink_count *c = bpf_map_lookup_elem(&sink_counts, &class);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
		if (class <= CLASS_VIP && c->packets % PROGRESS_STEP == 0) {
			struct gen_progress *pr = bpf_map_lookup_elem(&progress, &zero);

			if (pr)
				__sync_fetch_and_add(&pr->delivered, PROGRESS_STEP);
		}
	}
	return XDP_DROP;
}
