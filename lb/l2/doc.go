// SPDX-License-Identifier: Apache-2.0

// Package l2 is the pure logic of L2 mode, where gateways announce VIPs on a flat segment by
// answering ARP and NDP instead of over BGP: which gateway owns which VIP (Owners), which
// gateways are alive (Members, fed by heartbeats), and the heartbeat's wire format (Heartbeat).
// It has no kernel or Kubernetes imports: the daemon (lb/gateway) sends and receives the
// heartbeats and the responder (lb/l2/announce) answers for the VIPs this package says are
// owned.
//
// Ownership is rendezvous hashing over the gateways that are alive and can serve the VIP: every
// gateway ranks every (VIP, gateway) pair with the same hash, so losing a gateway moves only its
// VIPs. Without fail-back a VIP stays with the gateway that claims it while that gateway is alive
// and can serve it; two claimers (a healed partition) resolve to the higher-ranked one.
package l2
