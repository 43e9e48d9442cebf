// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* redirect.c: the ceiling. Attached to the gateway's ingress veth, it does no load-balancing
 * work at all: it writes the next hop's MAC addresses and redirects every frame to the egress
 * interface through a DEVMAP, which is the least any XDP forwarder does. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* redirect_macs: index 0 -> {destination MAC, source MAC} written into every frame. Go. */
struct macs {
	__u8 dst[ETH_ALEN];
	__u8 src[ETH_ALEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct macs);
	__uint(max_entries, 1);
} redirect_macs SEC(".maps");

/* redirect_port: index 0 -> egress ifindex. One entry, written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} redirect_port SEC(".maps");

SEC("xdp")
int bench_redirect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct macs *m = bpf_map_lookup_elem(&redirect_macs, &zero);

	if (!m || data + sizeof(struct macs) > data_end)
		return XDP_DROP;
	__builtin_memcpy(data, m, sizeof(*m));
	return bpf_redirect_map(&redirect_port, 0, XDP_DROP);
}
