// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Protocol is the IP protocol of a frontend (its protocol number).
type Protocol uint8

// The protocols a frontend can have. SCTP is not balanced: a service port of SCTP is refused
// by the model, and SCTP to a VIP address passes to the host.
const (
	TCP Protocol = 6
	UDP Protocol = 17
)

// String returns "TCP" or "UDP".
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("protocol %d", uint8(p))
}

// Valid reports whether p is a protocol a frontend can have (TCP or UDP).
func (p Protocol) Valid() bool { return p == TCP || p == UDP }

// ParseProtocol parses "TCP" or "UDP" (any case).
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToUpper(s) {
	case "TCP":
		return TCP, nil
	case "UDP":
		return UDP, nil
	case "SCTP":
		return 0, fmt.Errorf("protocol SCTP is not supported (xlb balances TCP and UDP)")
	}
	return 0, fmt.Errorf("unknown protocol %q (want TCP or UDP)", s)
}

// Frontend is a service as clients address it: a VIP (or a cluster IP, for the socket load
// balancer), a port and a protocol. Port 0 serves every port of the address.
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto Protocol
}

// String returns "addr:port/PROTO".
func (f Frontend) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(f.Addr, f.Port), f.Proto)
}

// Compare orders frontends by address, port and protocol.
func (f Frontend) Compare(g Frontend) int {
	if c := f.Addr.Compare(g.Addr); c != 0 {
		return c
	}
	if f.Port != g.Port {
		return int(f.Port) - int(g.Port)
	}
	return int(f.Proto) - int(g.Proto)
}

// Endpoint is a backend's {Pod address, target port, protocol} as its replies carry it. Port 0
// matches every port of the address (the backends of all-ports frontends).
type Endpoint struct {
	Addr  netip.Addr
	Port  uint16
	Proto Protocol
}

// String returns "addr:port/PROTO".
func (e Endpoint) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(e.Addr, e.Port), e.Proto)
}

// VIPID identifies a VIP frontend in a gateway datapath's arrays: 1 to MaxVIPs-1. The
// reconciler assigns ids.
type VIPID uint32

// BackendID identifies a backend in a gateway datapath's arrays and Maglev tables: 1 to
// MaxBackends-1; 0 in a Maglev slot means "empty". The reconciler assigns ids and must not
// reuse one while conntrack may still name it.
type BackendID uint32

// Affinity is a frontend's session affinity.
type Affinity uint8

const (
	// AffinityNone hashes the whole flow (client address, ports, protocol): a client's
	// connections spread over the backends.
	AffinityNone Affinity = iota
	// AffinityClientIP hashes the client address only (sessionAffinity: ClientIP): every
	// connection of a client goes to the same backend while the Maglev table is unchanged.
	AffinityClientIP
)

// VIPConfig is what a gateway datapath needs to know of a VIP frontend besides its table.
type VIPConfig struct {
	// ID is the VIP's id: 1 to MaxVIPs-1, unique among frontends.
	ID VIPID
	// Affinity selects what the Maglev hash covers.
	Affinity Affinity
	// SourceRanges, if not empty, lists the only client prefixes allowed
	// (loadBalancerSourceRanges); other clients are dropped and counted. Their family must be
	// the VIP's, IPv4 ones written in IPv4 form.
	SourceRanges []netip.Prefix
}

// Backend is where a backend id sends packets.
type Backend struct {
	// Addr is the Pod (or host) address.
	Addr netip.Addr
	// Port is the target port; 0 keeps the client's destination port (all-ports frontends).
	Port uint16
	// Down moves even established flows off the backend (it is dead). A draining backend is
	// not Down: it just leaves the Maglev tables and keeps its established flows.
	Down bool
	// DSR says the backend's node serves direct server return (Forwarding DSR): the packets of
	// a flow the datapath has no conntrack entry for carry the frontend to it (the carrier),
	// and its replies do not come back through the gateways.
	DSR bool
}

// ReverseNAT says which VIP a backend endpoint's replies must come from.
type ReverseNAT struct {
	// VIP is the frontend whose address (and port, unless it serves all ports) the replies get.
	VIP VIPID
	// Ambiguous marks an endpoint that serves several frontends; the datapath then finds the
	// VIP of each reply in conntrack, else among Candidates.
	Ambiguous bool
	// Candidates (Ambiguous only) are the VIPs the endpoint serves, unused ones 0 at the end;
	// all 0 when it serves more than MaxReverseCandidates. A reply without conntrack entry (its
	// flow's first packet went through another gateway) gets the one VIP whose Maglev table
	// sends the reply's forward tuple to this endpoint; when none or several do, it is not
	// translated.
	Candidates [MaxReverseCandidates]VIPID
}

// Flow is one conntrack entry, or a connection the XDP datapath holds in its handshake table
// (InSlot).
type Flow struct {
	// Src, Dst are the flow's endpoints in the entry's direction: client -> VIP for forward
	// entries, backend -> client for reverse entries.
	Src, Dst netip.AddrPort
	Proto    Protocol
	// Reverse marks an entry kept for the replies of an ambiguous endpoint.
	Reverse bool
	// Backend is the chosen backend (forward entries).
	Backend BackendID
	// VIP is the flow's VIP.
	VIP VIPID
	// VIPPort is the service port (reverse entries restore it).
	VIPPort uint16
	// Closing says a FIN or RST was seen: the closing timeout applies.
	Closing bool
	// Idle is how long ago the entry was last refreshed (the XDP datapath refreshes it at most
	// once a second).
	Idle time.Duration
	// InSlot says the XDP datapath holds this TCP connection in its handshake table's slot,
	// where its handshake completed, not in conntrack: it moves into conntrack when a SYN of
	// another tuple needs the slot (docs/datapath.md, "Conntrack and the flood policy").
	InSlot bool
}

// Handshake is one handshake table entry: a TCP SYN seen, no conntrack entry yet; or (Proto UDP)
// a datagram flow's first datagram seen, no conntrack entry yet.
type Handshake struct {
	// Client and VIPAddr are the flow's client and the VIP address and port it sent to.
	Client, VIPAddr netip.AddrPort
	// Proto is the flow's protocol; 0 means TCP.
	Proto Protocol
	// Backend and VIP are the backend the SYN (or first datagram) went to and its VIP's id: the
	// flow's next packets follow them, even across a change of the frontend's Maglev table.
	Backend BackendID
	VIP     VIPID
	// ISN is the SYN's sequence number: another SYN on the tuple is another connection (0 for
	// a datagram flow).
	ISN uint32
	// Age is how long ago the SYN (or first datagram) was seen; AgeUnknown when the entry's time
	// is further ahead of the clock than CPUs' clocks differ (the datapath ignores such an entry).
	Age time.Duration
}

// Traffic is a VIP's or a backend's counters, summed over CPUs.
type Traffic struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
}

// AttachMode is how a datapath attaches to an interface (configuration key interfaces[].mode).
type AttachMode string

// The attach modes.
const (
	// AttachAuto ("auto", the zero value's meaning too) uses native (driver) mode and falls
	// back to generic mode, with a warning, when the driver refuses.
	AttachAuto AttachMode = "auto"
	// AttachNative ("native") insists on native mode: attaching fails if the driver refuses.
	AttachNative AttachMode = "native"
	// AttachGeneric ("generic") uses generic (SKB) mode: slower, works with every driver.
	AttachGeneric AttachMode = "generic"
)

// Role is which side of the gateway an interface faces (configuration key interfaces[].role):
// what a packet arriving on it may do (docs/datapath.md, "Security model").
type Role uint8

// The roles (datapath.h's ROLE_*).
const (
	// RoleNone: not an interface of the balancer. Packets to VIPs and backends' replies that
	// arrive on one are dropped.
	RoleNone Role = iota
	// RoleClient ("client") faces the clients (the upstream routers): packets to VIPs are
	// balanced, unless their source belongs to the site (a VIP, a site prefix, the gateway's
	// own address); nothing is reverse-NATed.
	RoleClient
	// RoleCluster ("cluster") faces the cluster: backends' replies are reverse-NATed, and
	// packets to VIPs are balanced only from the site's own prefixes (in-cluster clients).
	RoleCluster
	// RoleBoth ("both") is a one-armed gateway's interface: a packet whose source is a site
	// prefix of kind SiteCluster is the cluster's, any other a client's.
	RoleBoth
)

// MaxIfindex bounds the index of an interface a datapath can attach to.
const MaxIfindex = 65536

// String is the role's configuration name.
func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleCluster:
		return "cluster"
	case RoleBoth:
		return "both"
	}
	return "none"
}

// ParseRole reads a role's configuration name: client, cluster or both.
func ParseRole(s string) (Role, error) {
	switch s {
	case "client":
		return RoleClient, nil
	case "cluster":
		return RoleCluster, nil
	case "both":
		return RoleBoth, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want client, cluster or both)", s)
}

// SiteKind says what a site source prefix is (bits; datapath.h's SITE_*).
type SiteKind uint8

// The kinds of site source.
const (
	// SiteCluster: the cluster's addresses (Pods, nodes, the cluster's prefixes, every
	// backend): never a client's source on a client-facing interface, and the cluster side on
	// a one-armed one.
	SiteCluster SiteKind = 1
	// SiteGateway: the gateway's own addresses: never the source of a packet to a VIP.
	SiteGateway SiteKind = 2
)

// MaxSiteSources bounds the number of site source prefixes.
const MaxSiteSources = 300000

// ConnectFrontend is what the socket load balancer does with new connections to one frontend
// (a cluster IP, port and protocol).
type ConnectFrontend struct {
	// Endpoints are the Pod addresses and target ports new connections go to, sorted. None
	// means the frontend refuses connections: the service exists but no endpoint serves it. A
	// datapath reading back a frontend whose endpoints it cannot all read reports each missing
	// one as the zero AddrPort, which no plan holds, so that the reconciler rewrites it.
	Endpoints []netip.AddrPort
	// AffinityTimeout, when not zero, keeps each client's connections on one endpoint while
	// it serves and until the client has made none for that long (sessionAffinity: ClientIP).
	AffinityTimeout time.Duration
}

// Equal reports whether f and g are the same.
func (f ConnectFrontend) Equal(g ConnectFrontend) bool {
	if f.AffinityTimeout != g.AffinityTimeout || len(f.Endpoints) != len(g.Endpoints) {
		return false
	}
	for i := range f.Endpoints {
		if f.Endpoints[i] != g.Endpoints[i] {
			return false
		}
	}
	return true
}

// AgeUnknown is the Age of a handshake entry whose time no clock reading of this boot explains:
// older than any timeout.
const AgeUnknown = time.Duration(1<<63 - 1)
