// SPDX-License-Identifier: Apache-2.0
package gateway

// Sizes and flags mirrored from bpf/consts.h (TestConstantsMatchBPF checks they agree). The
// limits every datapath shares are datapath.MaxVIPs and the like (datapath.h).
const (
	// The tail-call table's indexes, one per stage and family (bpf/consts.h PROG_*).
	progFull4         = 0
	progFull6         = 1
	progDSR           = 2
	progTooBigClient  = 3
	progTooBigBackend = 4
	progICMP4         = 5
	progICMP6         = 6
	progNew4          = 7
	progNew6          = 8
	progReply4        = 9
	progReply6        = 10
	progEgress4       = 11
	progEgress6       = 12
	progsMax          = 13
	addrFilterLog2    = 16
	addrFilterBits    = 1 << addrFilterLog2
	addrFilterWords   = addrFilterBits / 64
	// liveSlotLog2 sizes a half of the live-flow filter's bits in each handshake slot
	// (LIVE_SLOT_LOG2, live.go).
	liveSlotLog2 = 4
	liveSlotBits = 1 << liveSlotLog2
	// hsTimeShift is the unit of a handshake slot's SYN time, 2^hsTimeShift ns (HS_TIME_SHIFT).
	hsTimeShift = 20
	nhCacheLog2 = 10

	vipFlagAffinityClientIP = 1 << 0
	vipFlagSrcRanges        = 1 << 1
	vipFlagMarker           = 1 << 2
	// echoRangesIDBit marks the src_ranges id of a VIP address's echo ranges (ECHO_RANGES_ID_BIT).
	echoRangesIDBit = 1 << 31

	backendFlagDown      = 1 << 0
	backendFlagReverseCT = 1 << 1
	backendFlagDSR       = 1 << 2

	revFlagAmbiguous = 1 << 0

	ctFlagClosing = 1 << 0
	ctFlagReverse = 1 << 1
)

// Reason says why the datapath gave a packet its verdict. Each has a per-CPU counter.
type Reason uint32

// The reasons, in the order of enum reason in bpf/consts.h.
const (
	ReasonPassNotIP        = Reason(xlbReasonREASON_PASS_NOT_IP)
	ReasonPassMalformedL3  = Reason(xlbReasonREASON_PASS_MALFORMED_L3)
	ReasonPassNotVIP       = Reason(xlbReasonREASON_PASS_NOT_VIP)
	ReasonPassIPv6Ext      = Reason(xlbReasonREASON_PASS_IPV6EXT)
	ReasonPassTTL          = Reason(xlbReasonREASON_PASS_TTL)
	ReasonPassNoNeigh      = Reason(xlbReasonREASON_PASS_NO_NEIGH)
	ReasonPassFIB          = Reason(xlbReasonREASON_PASS_FIB)
	ReasonPassNoTxPort     = Reason(xlbReasonREASON_PASS_NO_TXPORT)
	ReasonPassVLANEgress   = Reason(xlbReasonREASON_PASS_VLAN_EGRESS)
	ReasonPassReverseNoCT  = Reason(xlbReasonREASON_PASS_REVERSE_NO_CT)
	ReasonPassICMP         = Reason(xlbReasonREASON_PASS_ICMP)
	ReasonPassLocal        = Reason(xlbReasonREASON_PASS_LOCAL)
	ReasonDropMalformedL4  = Reason(xlbReasonREASON_DROP_MALFORMED_L4)
	ReasonDropSrcRange     = Reason(xlbReasonREASON_DROP_SRC_RANGE)
	ReasonDropNoBackend    = Reason(xlbReasonREASON_DROP_NO_BACKEND)
	ReasonDropFragUnknown  = Reason(xlbReasonREASON_DROP_FRAG_UNKNOWN)
	ReasonDropFIB          = Reason(xlbReasonREASON_DROP_FIB)
	ReasonDropUDP6ZeroCsum = Reason(xlbReasonREASON_DROP_UDP6ZERO_CSUM)
	ReasonFwdTX            = Reason(xlbReasonREASON_FWD_TX)
	ReasonFwdRedirect      = Reason(xlbReasonREASON_FWD_REDIRECT)
	ReasonNATForward       = Reason(xlbReasonREASON_NAT_FORWARD)
	ReasonNATReverse       = Reason(xlbReasonREASON_NAT_REVERSE)
	ReasonICMPEchoReply    = Reason(xlbReasonREASON_ICMP_ECHO_REPLY)
	ReasonICMPToBackend    = Reason(xlbReasonREASON_ICMP_TO_BACKEND)
	ReasonICMPToClient     = Reason(xlbReasonREASON_ICMP_TO_CLIENT)
	ReasonCTRateLimited    = Reason(xlbReasonREASON_CT_RATE_LIMITED)
	ReasonCTReselect       = Reason(xlbReasonREASON_CT_RESELECT)
	ReasonHandshakeHit     = Reason(xlbReasonREASON_HS_HIT)
	ReasonHandshakeLimited = Reason(xlbReasonREASON_HS_RATE_LIMITED)
	// ReasonNATReverseMaglev counts, among ReasonNATReverse, the replies of an ambiguous
	// endpoint without conntrack entry whose frontend Maglev re-derived (ReverseNAT.Candidates).
	ReasonNATReverseMaglev = Reason(xlbReasonREASON_NAT_REVERSE_MAGLEV)
	// ReasonPassTailCall: a tail call found no program (the loader installs them before it
	// attaches, so this stays 0).
	ReasonPassTailCall = Reason(xlbReasonREASON_PASS_TAIL_CALL)
	// ReasonDSRCarried counts, among ReasonNATForward, the packets sent with the carrier of
	// direct server return; ReasonDSRNoRoom those sent without, as it would not fit.
	ReasonDSRCarried = Reason(xlbReasonREASON_DSR_CARRIED)
	ReasonDSRNoRoom  = Reason(xlbReasonREASON_DSR_NO_ROOM)
	// ReasonDSRTooBig: a UDP datagram the carrier would not fit on, answered with an ICMP
	// "too big" for the path's MTU less the carrier.
	ReasonDSRTooBig = Reason(xlbReasonREASON_DSR_TOO_BIG)
	// ReasonDropCarrierForged: a packet to a VIP that arrived with a carrier of direct server
	// return (only gateways write them): dropped, so no node takes a client's.
	ReasonDropCarrierForged = Reason(xlbReasonREASON_DROP_CARRIER_FORGED)
	// ReasonDropNoRole: to a VIP or from a backend, on an interface without a role (not
	// attached by xlb).
	ReasonDropNoRole = Reason(xlbReasonREASON_DROP_NO_ROLE)
	// ReasonDropSiteSource: to a VIP from a source that never arrives there: a VIP, the
	// gateway's own address, or (from the client side) a site prefix.
	ReasonDropSiteSource = Reason(xlbReasonREASON_DROP_SITE_SOURCE)
	// ReasonDropWrongSide: to a VIP, on a cluster-facing interface, from outside the site.
	ReasonDropWrongSide = Reason(xlbReasonREASON_DROP_WRONG_SIDE)
	// ReasonDropReplyWrongSide: a backend's reply that arrived from the client side: never
	// reverse-NATed.
	ReasonDropReplyWrongSide = Reason(xlbReasonREASON_DROP_REPLY_WRONG_SIDE)
	// ReasonDropVIPUnserved: to a VIP address on a port or protocol no service has.
	ReasonDropVIPUnserved = Reason(xlbReasonREASON_DROP_VIP_UNSERVED)
	// ReasonDropICMPUnknown: an ICMP error to a VIP address, or quoting a backend endpoint, about
	// no flow this gateway knows (no conntrack or handshake entry), or too short to tell.
	ReasonDropICMPUnknown = Reason(xlbReasonREASON_DROP_ICMP_UNKNOWN)
	// ReasonDropICMPSrcRange: an echo request to a VIP address, or an ICMP error about a flow,
	// whose client is outside the VIP's source ranges.
	ReasonDropICMPSrcRange = Reason(xlbReasonREASON_DROP_ICMP_SRC_RANGE)
	// ReasonDropICMPPTBLow: a "fragmentation needed" below 552 or a "packet too big" below 1280
	// bytes about a VIP flow: not relayed.
	ReasonDropICMPPTBLow = Reason(xlbReasonREASON_DROP_ICMP_PTB_LOW)
	// ReasonICMPTooBigClient: a client's packet too big for the path to its backend answered with
	// an ICMP "too big" from the VIP; ReasonICMPTooBigBackend: a backend's reply too big for the
	// path to its client answered with one to the backend.
	ReasonICMPTooBigClient  = Reason(xlbReasonREASON_ICMP_TOO_BIG_CLIENT)
	ReasonICMPTooBigBackend = Reason(xlbReasonREASON_ICMP_TOO_BIG_BACKEND)
	// ReasonCTSYNKept: a SYN on a live flow's tuple sent to that flow's backend (RFC 5961: its
	// challenge ACK answers a spoofed one), not balanced again.
	ReasonCTSYNKept = Reason(xlbReasonREASON_CT_SYN_KEPT)
	// ReasonCTMidFlowLimited: a TCP flow whose handshake this gateway did not see (an ECMP
	// move, or a forged ACK) forwarded but not recorded: the mid-flow budget was spent.
	ReasonCTMidFlowLimited = Reason(xlbReasonREASON_CT_MIDFLOW_LIMITED)
	// ReasonFragRateLimited: a first fragment forwarded but not remembered (the first-fragment
	// budget, FRAG_BUDGET per second over all CPUs, was spent): its later fragments are dropped.
	ReasonFragRateLimited = Reason(xlbReasonREASON_FRAG_RATE_LIMITED)
	// ReasonFragExpired: a non-first fragment found its datagram's entry older than
	// FRAG_TIMEOUT_NS (2 s): the entry is deleted and the fragment is of an unknown datagram.
	ReasonFragExpired = Reason(xlbReasonREASON_FRAG_EXPIRED)
	// ReasonDropBogusSource: to a VIP from an address no client can have (unspecified,
	// loopback, multicast, link-local, IPv4 0/8 and 240/4, IPv6 v4-mapped).
	ReasonDropBogusSource = Reason(xlbReasonREASON_DROP_BOGUS_SOURCE)
	numReasons            = int(xlbReasonREASON_MAX)
)

var reasonNames = [...]string{
	"pass_not_ip", "pass_malformed_l3", "pass_not_vip", "pass_ipv6_ext", "pass_ttl",
	"pass_no_neigh", "pass_fib", "pass_no_txport", "pass_vlan_egress", "pass_reverse_no_ct",
	"pass_icmp", "pass_local", "drop_malformed_l4", "drop_src_range", "drop_no_backend", "drop_frag_unknown",
	"drop_fib", "drop_udp6_zero_csum", "fwd_tx", "fwd_redirect", "nat_forward", "nat_reverse",
	"icmp_echo_reply", "icmp_to_backend", "icmp_to_client", "ct_rate_limited", "ct_reselect",
	"handshake_hit", "handshake_rate_limited", "nat_reverse_maglev", "pass_tail_call",
	"dsr_carried", "dsr_no_room", "dsr_too_big", "drop_carrier_forged",
	"drop_no_role", "drop_site_source", "drop_wrong_side", "drop_reply_wrong_side", "drop_vip_unserved",
	"drop_icmp_unknown", "drop_icmp_src_range", "drop_icmp_ptb_low", "icmp_too_big_client",
	"icmp_too_big_backend", "ct_syn_kept", "ct_midflow_limited", "frag_rate_limited", "frag_expired",
	"drop_bogus_source",
}

// String returns the counter's name, as used in metrics.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason_unknown"
}
