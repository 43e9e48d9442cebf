/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* socklb.h: the structs, constants and maps of the node agent's socket load balancer
 * (socklb.c). Go writes services, slots and members (xdp/socklb); the programs write
 * affinity and revnat. */
#ifndef XLB_SOCKLB_H
#define XLB_SOCKLB_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
/* FAMILY_*, PROTO_*, struct addr, struct svc_key (a frontend as the application names it: the
 * key of services) and svc_key_eq: what every xlb program shares. */
#include "datapath.h"

/* Verdicts of a cgroup sock_addr program. */
#define SOCK_ALLOW 1
#define SOCK_REJECT 0

/* ECONNREFUSED, which a connect to a service without a serving endpoint fails with (as behind
 * kube-proxy's REJECT rule), rather than the EPERM of a bare SOCK_REJECT. */
#define ERR_CONNREFUSED 111

/* Sizes. MAX_SERVICES bounds the frontends (cluster IP, port, protocol) a node serves;
 * MAX_SLOTS the endpoints of all of them together (twice, while a frontend's new slots are
 * written before its old ones go); the LRU maps hold one entry per socket and service (affinity)
 * or per socket and endpoint (revnat), the least recently used dropping out. */
#define MAX_SERVICES 65536
#define MAX_SLOTS 524288
#define MAX_SOCKETS 262144

/* Value of services. */
struct svc_value {
	__u32 id;            /* the frontend's current slot set: slots {id, 0..count-1} */
	__u32 count;         /* endpoints taking new connections; 0 = refuse them */
	__u32 affinity_secs; /* sessionAffinity: ClientIP timeout in seconds; 0 = no affinity */
	__u32 pad;
};

/* Key of slots: one endpoint of a frontend's slot set. */
struct slot_key {
	__u32 id;
	__u32 slot;
};

/* An endpoint: value of slots, and part of the keys of members, affinity and revnat. */
struct endpoint {
	struct addr addr;
	__u16 port;   /* network order */
	__u8 family;
	__u8 pad;
};

/* Value of slots: an endpoint, and the frontend whose slot set it is in. Hash map entries
 * that are replaced or deleted can be reused at once (bpf_mem_alloc's per-CPU free lists), so a
 * program that read a services entry while Go changed it may hold another frontend's id: the
 * slot's frontend tells it so. */
struct slot_value {
	struct endpoint ep;
	struct svc_key front;
};

/* Key of members: whether an endpoint is in a slot set. */
struct member_key {
	__u32 id;
	struct endpoint ep;
};

/* Key of affinity: a socket's datagrams to one frontend. */
struct affinity_key {
	__u64 cookie; /* the socket's cookie (bpf_get_socket_cookie) */
	struct svc_key svc;
	__u32 pad;    /* explicit, so that a zeroed key has no stray bytes */
};

/* Key of client_affinity: a client (its network namespace: a Pod, or the host) and a
 * frontend. */
struct client_key {
	__u64 netns;  /* bpf_get_netns_cookie */
	struct svc_key svc;
	__u32 pad;
};

/* Value of client_affinity. */
struct client_value {
	struct endpoint ep;
	__u32 pad;
	__u64 last_ns; /* bpf_ktime_get_ns of the client's last connection to the frontend */
};

/* Key of revnat_udp and revnat_tcp: a socket and the endpoint it was sent to. */
struct revnat_key {
	__u64 cookie;
	struct endpoint ep;
	__u32 pad;
};

/* services: frontend -> its slot set. Written by Go: a changed frontend gets a new id whose
 * slots and members are written first, so a program sees the old set or the new one, never a
 * mix; the old set is deleted only at the next reconcile pass, long after any program that read the
 * old id has finished. The three Go-written maps are not preallocated, so that their memory
 * follows the cluster's size rather than MAX_SLOTS (see struct slot_value for what that means
 * for a reader). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
	__uint(max_entries, MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} services SEC(".maps");

/* slots: {id, i} -> the i-th endpoint of slot set id, and its frontend. Written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct slot_key);
	__type(value, struct slot_value);
	__uint(max_entries, MAX_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} slots SEC(".maps");

/* members: {id, endpoint} -> 1 when the endpoint is in slot set id (so that a socket, or a
 * client with affinity, keeps its endpoint for as long as it serves). Written by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct member_key);
	__type(value, __u8);
	__uint(max_entries, MAX_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} members SEC(".maps");

/* client_affinity: {client, frontend} -> the endpoint its connections go to while the
 * frontend's sessionAffinity timeout has not run out since the last one. Written by connect
 * and sendmsg. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct client_key);
	__type(value, struct client_value);
	__uint(max_entries, MAX_SOCKETS);
} client_affinity SEC(".maps");

/* affinity: {socket, frontend} -> the endpoint a UDP socket's datagrams to that frontend go
 * to (sendto on a connected socket included: its replies come only from its peer). Written by
 * connect and sendmsg of UDP sockets. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct affinity_key);
	__type(value, struct endpoint);
	__uint(max_entries, MAX_SOCKETS);
} affinity SEC(".maps");

/* revnat_udp: {UDP socket, endpoint} -> the frontend the application asked for (its svc_key's
 * address and port, in an endpoint), given back as the source of replies (recvmsg) and as the
 * peer (getpeername). Written by connect and sendmsg. Apart from revnat_tcp, so that a churn
 * of short TCP connections cannot evict a long-lived UDP socket's entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct revnat_key);
	__type(value, struct endpoint);
	__uint(max_entries, MAX_SOCKETS);
} revnat_udp SEC(".maps");

/* revnat_tcp: the same for TCP sockets, read by getpeername. Written by connect. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct revnat_key);
	__type(value, struct endpoint);
	__uint(max_entries, MAX_SOCKETS);
} revnat_tcp SEC(".maps");

/* Counters, indices of stats (xdp/socklb's Counter mirrors them). */
#define STAT_CONNECT 0        /* connects sent to an endpoint */
#define STAT_REFUSED 1        /* connects and datagrams refused: no endpoint serves */
#define STAT_SENDMSG 2        /* datagrams sent to an endpoint */
#define STAT_SENDMSG_KEPT 3   /* of those, to the endpoint the socket's earlier ones went to */
#define STAT_REVNAT 4         /* replies and getpeername answers given the frontend's address */
#define STAT_NO_SLOT 5        /* no slot, or another frontend's: an entry read while Go replaced it */
#define STAT_AFFINITY_KEPT 6  /* connections sent to the client's endpoint (sessionAffinity) */
#define NUM_STATS 7

/* stats: per CPU, STAT_* -> count. Written by the programs, read by Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, NUM_STATS);
} stats SEC(".maps");

#endif
