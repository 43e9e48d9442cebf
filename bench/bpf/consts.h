/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* consts.h: the frame layout the benchmark's programs share, and the sizes that bound them.
 * The generator sends Ethernet + IPv4 (no options) + TCP or UDP; the sink and the redirect
 * program parse no further than that. */
#ifndef BENCH_CONSTS_H
#define BENCH_CONSTS_H

/* Offsets in a generated frame: Ethernet (14), IPv4 without options (20), then L4. */
#define ETH_HLEN_ 14
#define OFF_IP_CSUM 24	/* IPv4 header checksum */
#define OFF_IP_SADDR 26 /* IPv4 source address */
#define OFF_IP_DADDR 30 /* IPv4 destination address */
#define OFF_L4 34	/* first byte of the TCP or UDP header */
#define OFF_SPORT 34	/* L4 source port */
#define OFF_DPORT 36	/* L4 destination port */
#define OFF_TCP_CSUM 50 /* TCP checksum (L4 + 16) */
#define OFF_UDP_CSUM 40 /* UDP checksum (L4 + 6) */

/* GEN_HDR_LEN is how many bytes of the template the generator copies into every frame: the
 * TCP headers (54 bytes) rounded up to 8. Frames are at least this long (the Go side refuses
 * smaller sizes); the template's bytes past the headers are zero, like the payload. */
#define GEN_HDR_LEN 56

/* GEN_ALIGN is how far the generator moves each frame's start (bpf_xdp_adjust_head) from where
 * live-frames mode puts it: a page's XDP headroom (256) after its 112-byte head, 368 bytes in,
 * so that the 54 bytes of headers straddle two cache lines. Moved to 384 they fill one line
 * from its start, as behind a NIC whose driver puts frames XDP_PACKET_HEADROOM into a page;
 * 272 bytes of headroom stay, enough for an skb. Go gives every frame GEN_ALIGN more bytes in
 * front (bench/gen's frameAlign). */
#define GEN_ALIGN 16

/* Sink classes: what the sink saw arrive, by destination. */
#define CLASS_BACKEND 0 /* IPv4 to the backend address: a load balancer translated it */
#define CLASS_VIP 1	/* IPv4 to the VIP: forwarded untranslated (the plain redirect) */
#define CLASS_OTHER 2	/* any other IPv4 or IPv6 frame (neighbour discovery, strays) */
#define CLASS_NONIP 3	/* not IP at all (ARP) */
#define CLASS_ANSWERED 4 /* cps mix: a SYN to the backend the sink answered with a SYN-ACK */
#define NUM_CLASSES 5

/* The connections-per-second mix (sink.c answers, gen.c's bench_client completes): every SYN
 * the generator sends has sequence number GEN_ISN (the template's); the sink answers a SYN to
 * the backend with a SYN-ACK of sequence number SINK_ISN acknowledging GEN_ISN + 1; the client
 * program answers that with an ACK (GEN_ISN + 1, SINK_ISN + 1), and the sink counts a handshake
 * for an ACK that acknowledges SINK_ISN + 1. Both ends are stateless: the tuples make the
 * connections distinct, the sequence numbers prove which packet answers which. */
#define GEN_ISN 1
#define SINK_ISN 0x5eed0001u
#define OFF_TCP_SEQ 38	 /* TCP sequence number (L4 + 4) */
#define OFF_TCP_ACK 42	 /* TCP acknowledgment number (L4 + 8) */
#define OFF_TCP_FLAGS 47 /* TCP flags byte (L4 + 13) */
#define TCP_HDR_END 54	 /* end of a TCP header without options */
#define TCPF_SYN 0x02
#define TCPF_ACK 0x10
#define TCPF_RST 0x04
#define TCPF_FIN 0x01

/* The closed loop (gen.c, sink.c): the sink acknowledges delivered frames in steps of
 * PROGRESS_STEP per class and CPU; the generator waits while a window's worth of frames is
 * unacknowledged, spinning at most GEN_WAIT_SPINS bpf_loop steps (milliseconds); when the
 * acknowledgements still do not come, the frames were lost on the way (dropped by the datapath
 * under test) and it stops waiting for them. */
#define PROGRESS_STEP 32
#define GEN_WAIT_SPINS (1u << 20)

/* struct gen_progress: value of map progress (index 0), shared by the generator and the sink. */
struct gen_progress {
	__u64 delivered; /* frames of the backend and VIP classes the sink has acknowledged */
};

#endif
