#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# pktgen.sh: drive the kernel's pktgen (/proc/net/pktgen) toward xlb on real hardware, where the
# generator is a separate machine with a NIC cabled (or switched) to the gateway's client-facing
# NIC. It sends 64-byte UDP frames to the VIP with the source address and port varied over many
# flows, one pktgen thread per queue, for a bounded count, then prints pktgen's own result.
# bench/README.md explains the method; run it as root on the generator machine:
#
#   DEV=eth1 DST_MAC=aa:bb:cc:dd:ee:ff VIP=198.18.100.1 ./pktgen.sh
#
# Variables (defaults in brackets): DEV (required), DST_MAC (required: the gateway's MAC), VIP
# [198.18.100.1], DPORT [80], SRC_MIN/SRC_MAX [198.18.128.0/198.18.131.255], SPORT_MIN/SPORT_MAX
# [1024/1999] (flows = addresses x ports), SIZE [64], THREADS [1], COUNT [10000000 per thread],
# RATE_PPS [0 = full speed]. Addresses must stay in 198.18.0.0/15 unless you own others.
set -eu

: "${DEV:?set DEV to the generator NIC}"
: "${DST_MAC:?set DST_MAC to the gateway NIC MAC}"
VIP=${VIP:-198.18.100.1}
DPORT=${DPORT:-80}
SRC_MIN=${SRC_MIN:-198.18.128.0}
SRC_MAX=${SRC_MAX:-198.18.131.255}
SPORT_MIN=${SPORT_MIN:-1024}
SPORT_MAX=${SPORT_MAX:-1999}
SIZE=${SIZE:-64}
THREADS=${THREADS:-1}
COUNT=${COUNT:-10000000}
RATE_PPS=${RATE_PPS:-0}

if [ ! -d /proc/net/pktgen ]; then
	modprobe pktgen 2>/dev/null || true
fi
if [ ! -e /proc/net/pktgen/pgctrl ]; then
	echo "pktgen is not available on this kernel (no /proc/net/pktgen): use xlb-bench's live-frames generator" >&2
	exit 1
fi

pg() { # pg FILE CMD: write one pktgen command and fail on its error
	echo "$2" > "$1"
	if grep -q "Result: ERROR" "$1" 2>/dev/null; then
		echo "pktgen: $1: $2 failed" >&2
		exit 1
	fi
}

cleanup() { echo "stop" > /proc/net/pktgen/pgctrl 2>/dev/null || true; }
trap cleanup INT TERM EXIT

pg /proc/net/pktgen/pgctrl reset
t=0
while [ "$t" -lt "$THREADS" ]; do
	th=/proc/net/pktgen/kpktgend_$t
	dev="$DEV@$t"
	pg "$th" rem_device_all
	pg "$th" "add_device $dev"
	f=/proc/net/pktgen/$dev
	pg "$f" "count $COUNT"
	pg "$f" "pkt_size $((SIZE - 4))" # pktgen's size excludes the FCS
	pg "$f" "dst_mac $DST_MAC"
	pg "$f" "dst $VIP"
	pg "$f" "udp_dst_min $DPORT"
	pg "$f" "udp_dst_max $DPORT"
	pg "$f" "src_min $SRC_MIN"
	pg "$f" "src_max $SRC_MAX"
	pg "$f" "udp_src_min $SPORT_MIN"
	pg "$f" "udp_src_max $SPORT_MAX"
	pg "$f" "flag IPSRC_RND"
	pg "$f" "flag UDPSRC_RND"
	pg "$f" "flag QUEUE_MAP_CPU" # one TX queue per thread
	pg "$f" "burst 32"
	pg "$f" "clone_skb 0"
	if [ "$RATE_PPS" -gt 0 ]; then
		pg "$f" "ratep $((RATE_PPS / THREADS))"
	fi
	t=$((t + 1))
done
echo "start" > /proc/net/pktgen/pgctrl # returns when every thread sent COUNT frames
t=0
while [ "$t" -lt "$THREADS" ]; do
	grep -A2 "Result:" "/proc/net/pktgen/$DEV@$t"
	t=$((t + 1))
done
