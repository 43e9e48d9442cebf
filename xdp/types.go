package xdp

import (
	"fmt"
	"net/netip"
	"time"
)

// Protocol is an IP protocol number a VIP can serve.
type Protocol uint8

// The protocols a VIP can serve. SCTP is not balanced: SCTP to a VIP address passes to the host.
const (
	TCP Protocol = 6
	UDP Protocol = 17
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

func (p Protocol) valid() bool { return p == TCP || p == UDP }

// Frontend is a VIP service as clients address it. Port 0 serves all ports of the address.
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto Protocol
}

func (f Frontend) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(f.Addr, f.Port), f.Proto)
}

// Endpoint is a backend's {Pod address, target port, protocol} as its replies carry it.
// Port 0 matches every port of the address (backends of all-ports VIPs).
type Endpoint struct {
	Addr  netip.Addr
	Port  uint16
	Proto Protocol
}

func (e Endpoint) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(e.Addr, e.Port), e.Proto)
}

// VIPID identifies a VIP frontend in the datapath's arrays (1..65535). The caller assigns ids.
type VIPID uint32

// BackendID identifies a backend in the datapath's arrays and Maglev tables (1..262143).
// The caller assigns ids and must not reuse one while conntrack may still point at it.
type BackendID uint32

// Affinity is a VIP's session affinity.
type Affinity uint8

const (
	// AffinityNone hashes the whole flow (client address, ports, protocol).
	AffinityNone Affinity = iota
	// AffinityClientIP hashes the client address only (sessionAffinity: ClientIP): every
	// connection of a client goes to the same backend while the Maglev table is unchanged.
	AffinityClientIP
)

// VIPConfig is what the datapath needs to know about a VIP frontend.
type VIPConfig struct {
	// ID is the VIP's id; it must be 1..65535 and unique among frontends.
	ID VIPID
	// Affinity selects what the Maglev hash covers.
	Affinity Affinity
	// SourceRanges, if not empty, lists the only client prefixes allowed
	// (loadBalancerSourceRanges); other clients are dropped and counted. Their family must be
	// the VIP's.
	SourceRanges []netip.Prefix
}

// Backend is where a backend id sends packets.
type Backend struct {
	// Addr is the Pod address.
	Addr netip.Addr
	// Port is the target port; 0 keeps the client's destination port (all-ports VIPs).
	Port uint16
	// Down moves even established flows off the backend (it is dead). A draining backend is
	// not Down: it just leaves the Maglev tables and keeps its established flows.
	Down bool
}

// ReverseNAT says which VIP a backend endpoint's replies must come from.
type ReverseNAT struct {
	// VIP is the frontend whose address (and port, unless it serves all ports) the replies get.
	VIP VIPID
	// Ambiguous marks an endpoint that serves several VIP:ports; the datapath then finds the VIP
	// of each reply in conntrack, else among Candidates.
	Ambiguous bool
	// Candidates (Ambiguous only) are the VIPs the endpoint serves, unused ones 0; all 0 when it
	// serves more than MaxReverseCandidates. A reply without conntrack entry (its flow's first
	// packet went through another gateway) gets the one VIP whose Maglev table sends the reply's
	// forward tuple to this endpoint; when none or several do, it is passed untranslated.
	Candidates [MaxReverseCandidates]VIPID
}

// Flow is one conntrack entry.
type Flow struct {
	// Src, Dst are the flow's endpoints in the entry's direction: client -> VIP for forward
	// entries, backend -> client for reverse entries.
	Src, Dst netip.AddrPort
	Proto    Protocol
	// Reverse marks an entry kept for replies of an ambiguous backend.
	Reverse bool
	// Backend is the chosen backend (forward entries).
	Backend BackendID
	// VIP is the flow's VIP.
	VIP VIPID
	// VIPPort is the service port (reverse entries restore it).
	VIPPort uint16
	// Closing says a FIN or RST was seen; the closing timeout applies.
	Closing bool
	// Idle is how long ago the entry was last refreshed (refreshed at most once a second).
	Idle time.Duration
}

// Traffic is a VIP's or backend's counters summed over CPUs.
type Traffic struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
}
