// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"errors"
	"net/netip"
)

// Services is a gateway datapath's service state as the reconciler (lb/reconcile) writes it
// and reads it back: VIP frontends, backends, Maglev tables and reverse NAT entries. The reads
// return what the datapath holds (at start: what an earlier process left in pinned maps), so
// that a new reconciler adopts it rather than wiping it. Writes wrap the errors of this package
// (ErrOutOfRange, ErrBadAddress, ErrUnknownVIP...). Implemented by *xdp.Datapath,
// *afxdp.Datapath and *forward.Balancer.
type Services interface {
	// VIPs returns every frontend with its configuration.
	VIPs() (map[Frontend]VIPConfig, error)
	// UpsertVIP creates frontend f or updates its configuration; its table is kept. Its flows
	// are dropped as "no backend" until its Maglev table is set.
	UpsertVIP(f Frontend, c VIPConfig) error
	// DeleteVIP removes frontend f, its table and source ranges; a missing one is no error.
	DeleteVIP(f Frontend) error
	// Backends returns every backend by id.
	Backends() (map[BackendID]Backend, error)
	// UpsertBackend sets where backend id sends packets.
	UpsertBackend(id BackendID, b Backend) error
	// DeleteBackend forgets backend id; flows conntrack still pins to it are balanced again.
	DeleteBackend(id BackendID) error
	// MaglevTables returns every VIP's table by VIP id.
	MaglevTables() (map[VIPID][]BackendID, error)
	// SetMaglevTable replaces VIP id's table atomically (packets see the old one or the new
	// one): table[i] is slot i's backend, 0 an empty slot; len(table) is M.
	SetMaglevTable(id VIPID, table []BackendID) error
	// Reverses returns every reverse NAT entry.
	Reverses() (map[Endpoint]ReverseNAT, error)
	// SetReverse says which VIP the replies of backend endpoint ep come from.
	SetReverse(ep Endpoint, r ReverseNAT) error
	// DeleteReverse removes ep's reverse NAT entry; a missing one is no error.
	DeleteReverse(ep Endpoint) error
	// MaxFlowBackend returns the highest backend id a conntrack or handshake entry names (0:
	// none), so that a new reconciler does not give an id flows still point at to another
	// backend.
	MaxFlowBackend() (BackendID, error)
	// SiteSources returns the site's own prefixes by kind: the sources the side checks know
	// (docs/datapath.md, "Security model").
	SiteSources() (map[netip.Prefix]SiteKind, error)
	// SetSiteSource adds prefix p (masked) of kind k, or changes its kind.
	SetSiteSource(p netip.Prefix, k SiteKind) error
	// DeleteSiteSource removes prefix p; a missing one is no error.
	DeleteSiteSource(p netip.Prefix) error
}

// Gateway is a gateway datapath as the appliance (lb/gateway) runs it: its services, the
// interfaces it is attached to, and its counters. Implemented by *xdp.Datapath and
// *afxdp.Datapath.
type Gateway interface {
	Services
	// Attach attaches the datapath to interface ifname, facing the side role says (again: only
	// the role may change).
	Attach(ifname string, mode AttachMode, role Role) error
	// Detach detaches it from ifname.
	Detach(ifname string) error
	// Interfaces lists the interfaces it is attached to.
	Interfaces() ([]string, error)
	// VIPTraffic and BackendTraffic return a VIP's or a backend's counters.
	VIPTraffic(id VIPID) (Traffic, error)
	BackendTraffic(id BackendID) (Traffic, error)
	// Reasons returns the verdict and event counters by name (docs/datapath.md).
	Reasons() (map[string]uint64, error)
	// FlowCount returns the number of conntrack entries (with the connections the XDP datapath
	// holds in its handshake table: see Flow.InSlot).
	FlowCount() (int, error)
	// Persistent reports whether forwarding outlives the process (the XDP datapath's pins).
	Persistent() bool
	// Close stops using the datapath; what is Persistent keeps forwarding.
	Close() error
	// Remove stops the datapath and removes everything of it.
	Remove() error
}

// Connect is the socket load balancer's frontends as the reconciler (lb/reconcile) writes
// them and reads them back: the same shape as Services, one frontend at a time.
type Connect interface {
	// ConnectFrontends returns every frontend the datapath holds (at start: what an earlier
	// agent left pinned). An endpoint it could not read back is the zero AddrPort.
	ConnectFrontends() (map[Frontend]ConnectFrontend, error)
	// SetConnectFrontend makes new connections to f go to cf's endpoints: they see the old
	// endpoints or the new ones, never a mix. On error f keeps what it had.
	SetConnectFrontend(f Frontend, cf ConnectFrontend) error
	// DeleteConnectFrontend removes f; a missing one is no error. On error f keeps what it had.
	DeleteConnectFrontend(f Frontend) error
	// Commit ends a reconcile pass: complete says every frontend of the plan was written. The
	// datapath frees what earlier passes replaced, once no program can be reading it (socklb:
	// what was replaced before the previous Commit), and may finish work that waits for a whole
	// plan (socklb: replacing pins it could not adopt).
	Commit(complete bool) error
}

// SocketLB is the node agent's datapath (lb/agent): the socket load balancer. Implemented by
// *socklb.Datapath.
type SocketLB interface {
	Connect
	// Counters returns the programs' counts since they were loaded.
	Counters() (SocketCounters, error)
	// CloseLostUDP closes, in the agent's network namespace and in those pinned in netnsDir
	// ("" for the agent's own only), the connected UDP sockets that were sent to an endpoint
	// that no longer serves their frontend. It returns what it closed or failed to close, and
	// an error wrapping ErrUnsupported, having closed nothing, when it cannot close sockets at
	// all (the kernel lacks what it needs, or what it needs could not be loaded).
	CloseLostUDP(netnsDir string) ([]ClosedSocket, error)
	// Close stops using the datapath; what is pinned keeps balancing.
	Close() error
	// Remove detaches everything and removes its pins.
	Remove() error
}

// SocketCounters are the socket load balancer's counts, summed over CPUs.
type SocketCounters struct {
	// Connects counts connects sent to an endpoint.
	Connects uint64
	// Refused counts connects and datagrams refused (ECONNREFUSED): no endpoint serves the
	// frontend.
	Refused uint64
	// Datagrams counts unconnected UDP datagrams sent to an endpoint; DatagramsKept those of
	// them that went to the endpoint the socket's earlier datagrams to the frontend went to.
	Datagrams, DatagramsKept uint64
	// Revnat counts replies (recvmsg) and getpeername answers given the frontend's address.
	Revnat uint64
	// NoSlot counts slot sets found without a slot: never, unless map writes failed.
	NoSlot uint64
	// AffinityKept counts connections sent to their client's endpoint (sessionAffinity).
	AffinityKept uint64
}

// ClosedSocket is a connected UDP socket CloseLostUDP closed (or failed to close).
type ClosedSocket struct {
	// Netns is the network namespace's path.
	Netns string
	// Endpoint is the endpoint the socket was connected to.
	Endpoint netip.AddrPort
	// Frontend is the cluster IP and port the application had asked for.
	Frontend netip.AddrPort
	// Err is the kernel's error when the socket could not be closed.
	Err error
}

// ErrUnsupported is wrapped by a datapath's error when the kernel lacks what an operation
// needs.
var ErrUnsupported = errors.New("not supported by this kernel")
