// SPDX-License-Identifier: Apache-2.0

// Package bfd is xlb's own single-hop BFD (RFC 5880 asynchronous mode, RFC 5881), run by
// `xlb bfd` in a process apart from the xlb daemon: its sessions follow the forwarding plane
// (the pinned XDP datapath), not the control plane, so a daemon that dies, restarts or is
// upgraded leaves them up, and the routers' graceful restart keeps the routes meanwhile.
//
// Packets set the Control Plane Independent (C) bit. A session goes Down, telling its peer
// at once (diagnostic "forwarding plane reset"), when the health check it is given says the
// gateway can no longer forward.
//
// What is accepted (a hostile network): only packets from a configured peer's address, with
// TTL / hop limit 255 (RFC 5881 §5: nothing off-link can send that), of the right length and
// version, without authentication, multipoint or demand, and whose Your Discriminator is the
// session's own (zero only while the peer says Down or AdminDown). Everything else is
// dropped and counted by reason.
//
// packet.go and session.go are pure logic (the codec and the state machine, driven by
// explicit times); server.go holds the sockets.
package bfd
