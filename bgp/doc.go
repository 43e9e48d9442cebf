// SPDX-License-Identifier: Apache-2.0

// Package bgp is the vocabulary of xlb's BGP speaker, in pure Go: its configuration ([Config],
// [Peer], their Validate methods and the timer defaults), the routes it announces ([Route],
// [LargeCommunity], [ParseCommunity], [ParseLargeCommunity]) and the state of a session
// ([PeerStatus]). The speaker itself, which embeds GoBGP (and through it netlink and the
// kernel's sockets), is package [github.com/xlb-dev/xlb/bgp/speaker]; this package imports
// neither, so that the config file's parser (lb/config) and the lb model can use these types
// without pulling the speaker in.
//
// The speaker announces the gateway's VIPs as host routes (/32, /128) to the upstream routers,
// with next hop self, so that the routers spread traffic over the gateways with ECMP.
//
// # Address families
//
// A peer whose Address is IPv4 gets an IPv4-unicast session and an IPv6 peer an IPv6-unicast
// session: IPv4 routes go to the IPv4 peers and IPv6 routes to the IPv6 peers, each with the
// session's own local address as next hop. IPv6 routes over an IPv4 session (a v4-mapped or
// extended next hop) are not supported: configure an IPv6 peer for IPv6 VIPs.
//
// # Timers
//
// Without BFD a gateway that dies with its kernel is noticed by the routers only when the hold
// timer expires, so the defaults are short ([DefaultHoldTime] 9 s, [DefaultKeepaliveTime] 3 s,
// [DefaultConnectRetry] 1 s). [Peer.WithDefaults] fills them in. With [Peer.BFD] it is noticed
// in [BFD.DetectionTime] (900 ms with the defaults).
package bgp
