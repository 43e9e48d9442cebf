// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* reap.c: closes the connected UDP sockets that socklb.c sent to an endpoint that no longer
 * serves their frontend. A connected UDP socket's sends never reach the sendmsg hook again, so
 * without this it would keep sending to a deleted Pod (a resolver to a CoreDNS replica that is
 * gone) until the application gives up. kube-proxy clears such UDP conntrack entries; here the
 * socket is destroyed (bpf_sock_destroy): the application's next send fails with EDESTADDRREQ
 * (it is no longer connected) and its next receive with ECONNABORTED, so it opens a new
 * socket, which connect balances afresh.
 *
 * It is a socket iterator (iter/udp): Go opens it inside each network namespace it reaps and
 * reads it to the end (xdp/socklb, CloseLostUDP). It runs on the same maps as socklb.c and decides
 * from them alone: a socket is destroyed when revnat_udp says the programs sent it to its
 * peer for a frontend, and that frontend's current slot set (services, members) no longer
 * holds the peer. Sockets the programs did not balance have no revnat_udp entry and are left
 * alone. Each destroyed socket is written to the iterator's output as a struct reap_record. */
#include "socklb.h"
#include "kernel.h"

#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* bpf_sock_destroy (Linux 6.5) aborts a socket: only from TCP and UDP socket iterators. */
extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

/* reap_record: one destroyed socket, written to the iterator's output for Go. */
struct reap_record {
	struct endpoint peer;  /* the endpoint the socket was connected to */
	struct endpoint front; /* the frontend it had asked for (address and port) */
	__s32 err;             /* bpf_sock_destroy's result: 0 or -errno */
	__u32 pad;
};

/* Makes struct reap_record part of the object's BTF, for bpf2go's Go type of it. */
const struct reap_record *reap_record_type __attribute__((unused));

/* peer_of reads a connected socket's peer into ep, as socklb.c stores endpoints (an IPv4-mapped
 * peer of an IPv6 socket as IPv4). Returns -1 for a family that is neither. */
static __always_inline int peer_of(struct sock_common *skc, struct endpoint *ep)
{
	__u16 family = skc->skc_family;

	ep->port = skc->skc_dport;
	if (family == SK_AF_INET) {
		ep->addr.w[0] = skc->skc_daddr;
		ep->family = FAMILY_V4;
		return 0;
	}
	/* A kernel built without IPv6 has no skc_v6_daddr: the relocation drops this branch. */
	if (family != SK_AF_INET6 || !bpf_core_field_exists(skc->skc_v6_daddr))
		return -1;
	ep->addr.w[0] = skc->skc_v6_daddr.in6_u.u6_addr32[0];
	ep->addr.w[1] = skc->skc_v6_daddr.in6_u.u6_addr32[1];
	ep->addr.w[2] = skc->skc_v6_daddr.in6_u.u6_addr32[2];
	ep->addr.w[3] = skc->skc_v6_daddr.in6_u.u6_addr32[3];
	ep->family = FAMILY_V6;
	if (ep->addr.w[0] == 0 && ep->addr.w[1] == 0 && ep->addr.w[2] == bpf_htonl(0x0000ffff)) {
		ep->addr.w[0] = ep->addr.w[3];
		ep->addr.w[2] = 0;
		ep->addr.w[3] = 0;
		ep->family = FAMILY_V4;
	}
	return 0;
}

SEC("iter/udp")
int socklb_reap_udp(struct bpf_iter__udp *ctx)
{
	struct sock *sk = (struct sock *)ctx->udp_sk;
	struct reap_record rec;
	struct revnat_key rk;
	struct member_key mk;
	struct svc_value *s;
	struct endpoint *front;
	struct svc_key k;

	if (!sk || sk->__sk_common.skc_state != SK_TCP_ESTABLISHED)
		return 0; /* the end of the walk, or not connected: its sends reach sendmsg */
	__builtin_memset(&rk, 0, sizeof(rk));
	if (peer_of(&sk->__sk_common, &rk.ep) < 0)
		return 0;
	rk.cookie = bpf_get_socket_cookie(sk);
	front = bpf_map_lookup_elem(&revnat_udp, &rk);
	if (!front)
		return 0; /* not sent there by the programs (or its entry was evicted) */

	__builtin_memset(&k, 0, sizeof(k));
	k.addr = front->addr;
	k.port = front->port;
	k.proto = PROTO_UDP;
	k.family = front->family;
	s = bpf_map_lookup_elem(&services, &k);
	if (s) {
		__builtin_memset(&mk, 0, sizeof(mk));
		mk.id = s->id;
		mk.ep = rk.ep;
		if (s->count && bpf_map_lookup_elem(&members, &mk))
			return 0; /* still serving its frontend */
	}

	__builtin_memset(&rec, 0, sizeof(rec));
	rec.peer = rk.ep;
	rec.front = *front;
	rec.err = bpf_sock_destroy(&sk->__sk_common);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
