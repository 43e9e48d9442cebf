// SPDX-License-Identifier: Apache-2.0

// Package speaker is xlb's embedded BGP speaker: it announces the gateway's VIPs as host routes
// (/32, /128) to the upstream routers, with next hop self, so that the routers spread traffic
// over the gateways with ECMP. Its configuration and routes are package bgp's types
// ([bgp.Config], [bgp.Route]); this package holds what runs them.
//
// It runs GoBGP v4 (github.com/osrg/gobgp/v4) inside the calling process; there is no gobgpd
// and no gRPC port. The API is declarative: [Speaker.SetRoutes] takes the full set of routes
// that should be announced now and sends only the difference (new or changed routes are
// announced, missing ones withdrawn); [Speaker.SetPeers] does the same for the sessions.
// [Speaker.Peers] reports the sessions ([bgp.PeerStatus]) and [NewCollector] exports them to
// Prometheus.
//
// # Address families
//
// Each peer's session carries the routes of its address's family only (see package bgp): an
// IPv4 peer gets the IPv4 routes and an IPv6 peer the IPv6 ones, with the session's own local
// address as next hop.
//
// # Failure detection
//
// A gateway that dies with its kernel (power, panic, a cut link) is noticed by the routers when
// the hold timer expires, so the defaults are short (bgp.DefaultHoldTime and the others: hold
// 9 s, keepalive 3 s, connect retry 1 s), or, for a peer with [bgp.Peer.BFD], when its BFD
// session times out: receive interval × multiplier, 900 ms with the defaults. BFD is GoBGP's
// own (RFC 5880 asynchronous mode, RFC 5881 single hop, UDP 3784, TTL 255); when it goes down
// GoBGP resets the BGP session at once. The speaker follows the BFD state from GoBGP's log
// lines ([bgp.PeerStatus.BFD], the transitions counted and logged), turns a peer's BFD on only
// once its BGP session is established (FRR re-creates its BFD session then), re-adds a peer whose BFD
// went down (a fresh session: GoBGP would otherwise send its queued reset on the next one), and
// dampens a flapping BFD session ([bgp.BFD.HoldDown]). A speaker process that
// dies while the kernel lives is noticed at once either way: the kernel closes its TCP
// connections.
//
// # Graceful restart
//
// With [bgp.Config.GracefulRestart] set, the speaker advertises the graceful restart capability
// (RFC 4724) with that restart time. When a speaker's process dies, or [Speaker.Stop] is called
// with [KeepRoutes], its sessions close without a NOTIFICATION and the peers that support
// graceful restart keep its routes (marked stale) for the restart time; a new speaker that
// comes back within it re-announces them and the peers drop what it did not re-announce.
// This is what lets the appliance restart without moving traffic: the datapath keeps
// forwarding meanwhile. [Speaker.Stop] with [Withdraw] withdraws everything first and closes
// the sessions with a Cease NOTIFICATION, so the traffic leaves the gateway at once.
//
// # Network namespaces
//
// GoBGP opens its sockets from its own goroutines, on any OS thread, so the whole process must
// be in the network namespace the sessions belong to (start it with
// `nsenter --net=/run/netns/NAME`); entering a namespace on one locked thread is not enough.
package speaker
