// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* socklb.c: the node agent's socket load balancer. Attached to a cgroup (the node's root cgroup:
 * every Pod and host process below it), it rewrites the destination of a connect() or an
 * unconnected sendmsg() to a Service's cluster IP and port into one of the Service's endpoints,
 * picked at random among those that serve, before any packet exists: no per-packet NAT, no
 * conntrack. recvmsg() and getpeername() give the application the address it asked for back,
 * so a UDP client sees replies come from the cluster IP. Everything else is left alone.
 * See docs/agent.md. */
#include "socklb.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline void count(__u32 stat)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &stat);

	if (c)
		*c += 1;
}

/* The IPv4-mapped IPv6 prefix ::ffff:0:0/96, third word in network order. */
#define V4_MAPPED_W2 bpf_htonl(0x0000ffff)

/* key_of reads the destination the application gave into k; mapped is set for an IPv4-mapped
 * IPv6 address, which is looked up as the IPv4 address it carries (a dual-stack socket reaching
 * an IPv4 service). */
static __always_inline void key_of(struct bpf_sock_addr *ctx, struct svc_key *k, int v6,
				   int *mapped)
{
	k->port = (__u16)ctx->user_port;
	k->proto = (__u8)ctx->protocol;
	*mapped = 0;
	if (!v6) {
		k->addr.w[0] = ctx->user_ip4;
		k->family = FAMILY_V4;
		return;
	}
	k->addr.w[0] = ctx->user_ip6[0];
	k->addr.w[1] = ctx->user_ip6[1];
	k->addr.w[2] = ctx->user_ip6[2];
	k->addr.w[3] = ctx->user_ip6[3];
	k->family = FAMILY_V6;
	if (k->addr.w[0] == 0 && k->addr.w[1] == 0 && k->addr.w[2] == V4_MAPPED_W2) {
		k->addr.w[0] = k->addr.w[3];
		k->addr.w[2] = 0;
		k->addr.w[3] = 0;
		k->family = FAMILY_V4;
		*mapped = 1;
	}
}

/* set_dest writes endpoint ep as the socket call's destination. An IPv4 endpoint of a mapped
 * destination is written mapped again. Returns 0, or -1 when the endpoint's family cannot be
 * written there (an IPv6 endpoint for an IPv4 socket). */
static __always_inline int set_dest(struct bpf_sock_addr *ctx, const struct endpoint *ep, int v6,
				    int mapped)
{
	if (!v6) {
		if (ep->family != FAMILY_V4)
			return -1;
		ctx->user_ip4 = ep->addr.w[0];
	} else if (mapped) {
		if (ep->family != FAMILY_V4)
			return -1;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = V4_MAPPED_W2;
		ctx->user_ip6[3] = ep->addr.w[0];
	} else {
		if (ep->family != FAMILY_V6)
			return -1;
		ctx->user_ip6[0] = ep->addr.w[0];
		ctx->user_ip6[1] = ep->addr.w[1];
		ctx->user_ip6[2] = ep->addr.w[2];
		ctx->user_ip6[3] = ep->addr.w[3];
	}
	ctx->user_port = ep->port;
	return 0;
}

/* revnat_of is the revnat map of a socket of protocol proto. */
static __always_inline void *revnat_of(__u32 proto)
{
	return proto == PROTO_UDP ? (void *)&revnat_udp : (void *)&revnat_tcp;
}

/* remember records, for the socket, that endpoint ep stands for frontend k. An entry that
 * already says so is left as it is (an LRU update takes a new element; a lookup marks the
 * entry used). */
static __always_inline void remember(__u64 cookie, const struct endpoint *ep,
				     const struct svc_key *k)
{
	void *map = revnat_of(k->proto);
	struct revnat_key rk;
	struct endpoint front, *have;

	/* Keys are hashed byte for byte: every byte is written, padding included. */
	__builtin_memset(&rk, 0, sizeof(rk));
	__builtin_memset(&front, 0, sizeof(front));
	rk.cookie = cookie;
	rk.ep = *ep;
	front.addr = k->addr;
	front.port = k->port;
	front.family = k->family;
	have = bpf_map_lookup_elem(map, &rk);
	if (have && have->addr.w[0] == front.addr.w[0] && have->addr.w[1] == front.addr.w[1] &&
	    have->addr.w[2] == front.addr.w[2] && have->addr.w[3] == front.addr.w[3] &&
	    have->port == front.port && have->family == front.family)
		return;
	bpf_map_update_elem(map, &rk, &front, BPF_ANY);
}

/* serving reports whether endpoint ep is in slot set id. */
static __always_inline int serving(__u32 id, const struct endpoint *ep)
{
	struct member_key mk;

	__builtin_memset(&mk, 0, sizeof(mk));
	mk.id = id;
	mk.ep = *ep;
	return bpf_map_lookup_elem(&members, &mk) != NULL;
}

/* refuse fails the socket call with ECONNREFUSED. */
static __always_inline int refuse(void)
{
	count(STAT_REFUSED);
	bpf_set_retval(-ERR_CONNREFUSED);
	return SOCK_REJECT;
}

/* balance handles a connect (sendmsg = 0) or an unconnected sendmsg (sendmsg = 1) of an IPv4
 * (v6 = 0) or IPv6 (v6 = 1) socket. The endpoint is, in this order: the one the socket's
 * earlier datagrams to the frontend went to (UDP), the client's (sessionAffinity: ClientIP,
 * the client being the socket's network namespace: a Pod, or the host), or one picked at
 * random among those that serve. Each must still serve. */
static __always_inline int balance(struct bpf_sock_addr *ctx, int v6, int sendmsg)
{
	struct affinity_key ak;
	struct client_key ck;
	struct endpoint ep;
	struct svc_key k;
	struct svc_value *s;
	__u32 id, n, aff_secs;
	__u64 cookie, now = 0;
	int mapped, udp;

	if (ctx->protocol != PROTO_TCP && ctx->protocol != PROTO_UDP)
		return SOCK_ALLOW;
	udp = ctx->protocol == PROTO_UDP;
	__builtin_memset(&k, 0, sizeof(k));
	key_of(ctx, &k, v6, &mapped);
	s = bpf_map_lookup_elem(&services, &k);
	if (!s)
		return SOCK_ALLOW;
	/* One read of each field: Go may replace the entry meanwhile. */
	id = s->id;
	n = s->count;
	aff_secs = s->affinity_secs;
	if (n == 0)
		return refuse();
	cookie = bpf_get_socket_cookie(ctx);

	__builtin_memset(&ak, 0, sizeof(ak));
	ak.cookie = cookie;
	ak.svc = k;
	if (sendmsg) {
		struct endpoint *kept = bpf_map_lookup_elem(&affinity, &ak);

		if (kept) {
			ep = *kept;
			if (serving(id, &ep) && set_dest(ctx, &ep, v6, mapped) == 0) {
				remember(cookie, &ep, &k);
				if (aff_secs) {
					/* The client is still using its endpoint: its affinity lives on. */
					struct client_value *cv;

					__builtin_memset(&ck, 0, sizeof(ck));
					ck.netns = bpf_get_netns_cookie(ctx);
					ck.svc = k;
					cv = bpf_map_lookup_elem(&client_affinity, &ck);
					if (cv)
						cv->last_ns = bpf_ktime_get_ns();
				}
				count(STAT_SENDMSG);
				count(STAT_SENDMSG_KEPT);
				return SOCK_ALLOW;
			}
		}
	}

	__builtin_memset(&ck, 0, sizeof(ck));
	if (aff_secs) {
		struct client_value *cv;

		ck.netns = bpf_get_netns_cookie(ctx);
		ck.svc = k;
		now = bpf_ktime_get_ns();
		cv = bpf_map_lookup_elem(&client_affinity, &ck);
		if (cv && now - cv->last_ns < (__u64)aff_secs * 1000000000ull) {
			ep = cv->ep;
			if (serving(id, &ep)) {
				cv->last_ns = now;
				count(STAT_AFFINITY_KEPT);
				goto chosen;
			}
		}
	}

	struct slot_key sk = { .id = id, .slot = bpf_get_prandom_u32() % n }; /* no padding */
	struct slot_value *picked = bpf_map_lookup_elem(&slots, &sk);

	if (!picked || !svc_key_eq(&picked->front, &k)) {
		count(STAT_NO_SLOT);
		return refuse();
	}
	ep = picked->ep;
	if (aff_secs) {
		struct client_value cv;

		__builtin_memset(&cv, 0, sizeof(cv));
		cv.ep = ep;
		cv.last_ns = now;
		bpf_map_update_elem(&client_affinity, &ck, &cv, BPF_ANY);
	}
chosen:
	if (set_dest(ctx, &ep, v6, mapped) < 0)
		return refuse();
	remember(cookie, &ep, &k);
	if (udp)
		bpf_map_update_elem(&affinity, &ak, &ep, BPF_ANY);
	count(sendmsg ? STAT_SENDMSG : STAT_CONNECT);
	return SOCK_ALLOW;
}

/* unbalance gives a reply's source (recvmsg) or a connected socket's peer (getpeername) the
 * frontend's address back when the socket was sent to that endpoint by balance. */
static __always_inline int unbalance(struct bpf_sock_addr *ctx, int v6)
{
	struct revnat_key rk;
	struct endpoint *front;
	struct svc_key k;
	int mapped;

	if (ctx->protocol != PROTO_TCP && ctx->protocol != PROTO_UDP)
		return SOCK_ALLOW;
	__builtin_memset(&rk, 0, sizeof(rk));
	__builtin_memset(&k, 0, sizeof(k));
	rk.cookie = bpf_get_socket_cookie(ctx);
	key_of(ctx, &k, v6, &mapped);
	rk.ep.addr = k.addr;
	rk.ep.port = k.port;
	rk.ep.family = k.family;
	front = bpf_map_lookup_elem(revnat_of(ctx->protocol), &rk);
	if (!front || set_dest(ctx, front, v6, mapped) < 0)
		return SOCK_ALLOW;
	count(STAT_REVNAT);
	return SOCK_ALLOW;
}

SEC("cgroup/connect4")
int socklb_connect4(struct bpf_sock_addr *ctx) { return balance(ctx, 0, 0); }

SEC("cgroup/connect6")
int socklb_connect6(struct bpf_sock_addr *ctx) { return balance(ctx, 1, 0); }

SEC("cgroup/sendmsg4")
int socklb_sendmsg4(struct bpf_sock_addr *ctx) { return balance(ctx, 0, 1); }

SEC("cgroup/sendmsg6")
int socklb_sendmsg6(struct bpf_sock_addr *ctx) { return balance(ctx, 1, 1); }

SEC("cgroup/recvmsg4")
int socklb_recvmsg4(struct bpf_sock_addr *ctx) { return unbalance(ctx, 0); }

SEC("cgroup/recvmsg6")
int socklb_recvmsg6(struct bpf_sock_addr *ctx) { return unbalance(ctx, 1); }

SEC("cgroup/getpeername4")
int socklb_getpeername4(struct bpf_sock_addr *ctx) { return unbalance(ctx, 0); }

SEC("cgroup/getpeername6")
int socklb_getpeername6(struct bpf_sock_addr *ctx) { return unbalance(ctx, 1); }
