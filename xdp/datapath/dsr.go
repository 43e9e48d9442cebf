// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"net/netip"
)

// Forwarding says how a gateway's packets reach a backend and how the backend's replies reach
// the client (configuration key datapath.forwarding).
type Forwarding string

// The forwarding modes.
const (
	// ReturnPath (the default): the gateway DNATs straight to the Pod and the Pod's replies
	// must come back through a gateway, which puts the VIP back as their source.
	ReturnPath Forwarding = "returnPath"
	// DSR is direct server return: the gateway DNATs straight to the Pod as in ReturnPath and
	// carries the VIP frontend to the Pod's node in the packet (the carrier); the node agent's
	// datapath records the flow and rewrites the Pod's replies to come from the VIP, and they
	// leave by the node's own routing. Only for backends on nodes whose agent serves it.
	DSR Forwarding = "dsr"
)

// The carrier's wire format (datapath.h; docs/dsr.md).
const (
	// CarrierOpt4Type and CarrierOpt4Len are the IPv4 option: type, length, the VIP's port,
	// the VIP.
	CarrierOpt4Type = 0x9e
	CarrierOpt4Len  = 8
	// CarrierOpt6Type is the option of the IPv6 Destination Options header (CarrierOpt6HdrLen
	// bytes) the carrier is: option length CarrierOpt6Data (the VIP's port and the VIP).
	CarrierOpt6Type   = 0x1e
	CarrierOpt6Data   = 18
	CarrierOpt6HdrLen = 24
)

// CarrierLen returns how many bytes the carrier adds to a packet of v's family.
func CarrierLen(v netip.Addr) int {
	if v.Unmap().Is4() {
		return CarrierOpt4Len
	}
	return CarrierOpt6HdrLen
}

// DSRService says that packets carried to frontend Frontend may be sent to Endpoint, an
// endpoint on this node: the node side of direct server return accepts a carrier only for a
// pair it holds, so a carrier from anywhere else can never make the node rewrite a reply to
// come from an address of the sender's choosing.
type DSRService struct {
	Frontend Frontend
	Endpoint netip.AddrPort
}

// DSRNode is the node side of direct server return as the node agent (lb/agent) drives it:
// the {frontend, local endpoint} pairs it accepts carriers for, read back and written one at a
// time (the reconcile shape of Connect). Implemented by *dsr.Datapath (xdp/dsr).
type DSRNode interface {
	// DSRServices returns the pairs the datapath holds (at start: what an earlier agent left
	// pinned).
	DSRServices() (map[DSRService]bool, error)
	// AddDSRService and DeleteDSRService add and remove one pair; adding one it holds, or
	// deleting one it does not, is no error.
	AddDSRService(s DSRService) error
	DeleteDSRService(s DSRService) error
}

// DSRDirection says which of an interface's directions the node side's programs run on.
type DSRDirection uint8

// The directions; DSRBoth is DSRIngress|DSREgress.
const (
	// DSRIngress runs the carrier's reader on the packets the interface receives: where the
	// gateways' packets arrive (the node's uplink).
	DSRIngress DSRDirection = 1 << iota
	// DSREgress runs the reply rewriter on the packets the interface sends: where the Pods'
	// replies leave (the uplink, and the interfaces toward local Pods for in-cluster clients).
	DSREgress
	DSRBoth = DSRIngress | DSREgress
)

// String returns "ingress", "egress", "both" or "none".
func (d DSRDirection) String() string {
	switch d {
	case DSRIngress:
		return "ingress"
	case DSREgress:
		return "egress"
	case DSRBoth:
		return "both"
	}
	return "none"
}

// DSRDatapath is the node side of direct server return as the node agent owns it: the pairs
// (DSRNode), where its programs are attached, its counters, and its lifetime. Implemented by
// *dsr.Datapath (xdp/dsr); cmd/xlb loads it and hands it to lb/agent.
type DSRDatapath interface {
	DSRNode
	// Attach attaches the programs of each direction in dir to interface ifname (in the
	// calling thread's network namespace); a direction already attached is no change.
	Attach(ifname string, dir DSRDirection) error
	// Detach detaches the programs of each direction in dir from ifname; a direction not
	// attached is no error.
	Detach(ifname string, dir DSRDirection) error
	// Interfaces returns the interfaces the programs are attached to, with their directions
	// (at start: what an earlier agent left pinned and this one adopted).
	Interfaces() map[string]DSRDirection
	// Counters returns the programs' counters by name, summed over CPUs.
	Counters() (map[string]uint64, error)
	// Close releases the datapath: what is pinned stays attached and keeps serving.
	Close() error
	// Remove detaches everything and deletes the pins.
	Remove() error
}
