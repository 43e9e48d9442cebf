// SPDX-License-Identifier: Apache-2.0
package forward

// Reason says why a Go datapath gave a frame its verdict; each has a counter. The names are the
// XDP datapath's where the meaning is the same (xdp.Reason). A Decision carries the reasons of
// the decision (and the events that led to it); the AF_XDP datapath counts them, with its own
// reasons of what happened around the decision: parsing, the next hop and the sockets. Where the
// XDP datapath hands a packet to the kernel, the AF_XDP datapath cannot (a frame in an AF_XDP
// socket has left the kernel's path): its steer program passes what it can recognise
// (fragments, expiring TTLs), and the rest is dropped and counted under a drop_* reason.
type Reason uint8

// The reasons.
const (
	ReasonNATForward         Reason = iota // forwarded to a backend (DNAT)
	ReasonNATReverse                       // a backend's reply forwarded with the VIP as source
	ReasonNATReverseMaglev                 // among those, an ambiguous endpoint's reply re-derived by Maglev
	ReasonFwdTX                            // sent back out of the interface it came in on
	ReasonFwdRedirect                      // sent out of another interface
	ReasonCTRateLimited                    // a flow not recorded: the new-flow budget
	ReasonCTReselect                       // an established flow balanced again (backend gone or down, or idle)
	ReasonHandshakeHit                     // a TCP handshake packet sent where its SYN went
	ReasonHandshakeLimited                 // a SYN not recorded: the handshake rate guard
	ReasonDropMalformed                    // truncated or inconsistent headers
	ReasonDropNotOurs                      // steered, but no VIP or backend endpoint (a configuration change raced it)
	ReasonDropSrcRange                     // the client is outside the VIP's source ranges
	ReasonDropNoBackend                    // the VIP's table has no usable backend for the flow
	ReasonDropUDP6ZeroCsum                 // an IPv6 UDP datagram without checksum
	ReasonDropTTL                          // TTL or hop limit would expire (the steer program passes these; a race)
	ReasonDropReverseNoCT                  // an ambiguous endpoint's reply whose VIP neither conntrack nor Maglev gives
	ReasonDropLocal                        // the destination is this host (the steer program passes these; a race)
	ReasonHeldNoNeigh                      // held while the next hop's MAC is resolved (sent or dropped later)
	ReasonDropNoNeigh                      // held, but the next hop's MAC was not resolved in time (or too many held)
	ReasonDropUnreachable                  // no route to the destination
	ReasonDropNoPort                       // the egress interface has no socket of this datapath
	ReasonDropMTU                          // longer than the egress MTU
	ReasonDropTxFull                       // the egress socket's ring or frames were full
	ReasonDSRCarried                       // of nat_forward: sent with the carrier (direct server return)
	ReasonDSRNoRoom                        // of nat_forward: sent without the carrier, which would not fit
	ReasonDSRTooBig                        // a UDP datagram the carrier would not fit on, answered with an ICMP "too big"
	ReasonDropCarrierForged                // a packet to a VIP that arrived with a carrier (only gateways write them)
	ReasonDropNoRole                       // to a VIP or from a backend, on an interface without a role
	ReasonDropSiteSource                   // to a VIP from a VIP, the gateway's own address, or (client side) a site prefix
	ReasonDropWrongSide                    // to a VIP, on a cluster-facing interface, from outside the site
	ReasonDropReplyWrongSide               // a backend's reply that arrived from the client side
	ReasonDropVIPUnserved                  // to a VIP address on a port or protocol no service has
	ReasonCTSYNKept                        // a SYN on a live flow's tuple sent to that flow's backend, not balanced again
	ReasonCTMidFlowLimited                 // a TCP flow whose handshake was not seen here not recorded: the mid-flow budget
	ReasonDropBogusSource                  // to a VIP from an address no client can have (multicast, loopback, ...)
	ReasonICMPEchoReply                    // an echo request to a VIP address answered
	ReasonICMPToBackend                    // an ICMP error about a VIP flow relayed to its backend
	ReasonICMPToClient                     // an ICMP error from the cluster side relayed to the client
	ReasonDropICMPUnknown                  // an ICMP error about no flow this gateway knows: never relayed
	ReasonDropICMPSrcRange                 // an echo request or ICMP error whose client is outside the VIP's source ranges
	ReasonDropICMPPTBLow                   // a "too big" advertising a path MTU below the floors (PMTUMin4, PMTUMin6)
	ReasonICMPTooBigClient                 // a client's packet too big for the path to its backend, answered "too big" from the VIP
	ReasonICMPTooBigBackend                // a backend's reply too big for the path to its client, answered "too big"
	NumReasons
)

var reasonNames = [NumReasons]string{
	"nat_forward", "nat_reverse", "nat_reverse_maglev", "fwd_tx", "fwd_redirect",
	"ct_rate_limited", "ct_reselect", "handshake_hit", "handshake_rate_limited",
	"drop_malformed", "drop_not_ours", "drop_src_range", "drop_no_backend", "drop_udp6_zero_csum",
	"drop_ttl", "drop_reverse_no_ct", "drop_local", "held_no_neigh", "drop_no_neigh", "drop_unreachable",
	"drop_no_port", "drop_mtu", "drop_tx_full", "dsr_carried", "dsr_no_room", "dsr_too_big",
	"drop_carrier_forged", "drop_no_role", "drop_site_source", "drop_wrong_side", "drop_reply_wrong_side",
	"drop_vip_unserved", "ct_syn_kept", "ct_midflow_limited", "drop_bogus_source",
	"icmp_echo_reply", "icmp_to_backend", "icmp_to_client", "drop_icmp_unknown", "drop_icmp_src_range",
	"drop_icmp_ptb_low", "icmp_too_big_client", "icmp_too_big_backend",
}

// String returns the counter's name.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "reason_unknown"
}
