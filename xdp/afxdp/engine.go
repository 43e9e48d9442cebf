// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// HopKind says what a next-hop lookup found.
type HopKind uint8

// The kinds of next hop.
const (
	// HopSend: send out of Hop.Ifindex with Hop's MACs.
	HopSend HopKind = iota
	// HopLocal: the destination is this host.
	HopLocal
	// HopNoNeigh: routed, but the neighbour's MAC is not known (yet).
	HopNoNeigh
	// HopUnreachable: no route, or a blackhole/unreachable/prohibit route.
	HopUnreachable
)

// Hop is where a packet to some destination leaves.
type Hop struct {
	// Ifindex is the egress interface.
	Ifindex int
	// Src and Dst are the frame's new source and destination MACs.
	Src, Dst net.HardwareAddr
	// MTU is the egress interface's MTU: longer IP packets are dropped (drop_mtu).
	MTU int
}

// NextHops resolves the next hop of a destination, as bpf_fib_lookup does for the XDP datapath.
// Lookup is called from the packet path with the engine's lock held: it must be fast when it
// has the answer cached.
type NextHops interface {
	Lookup(dst netip.Addr) (Hop, HopKind)
	// Source returns this host's preferred source address toward dst (bpf_fib_lookup's
	// BPF_FIB_LOOKUP_SRC), false when it has none. Only the answers the engine builds itself
	// ask for it (an ICMP "too big" to a backend).
	Source(dst netip.Addr) (netip.Addr, bool)
}

// steerer keeps the kernel half (steer.c's steer map) in step with the engine's frontends and
// reverse endpoints.
type steerer interface {
	set(k steerSteerKey, on bool) error
}

// Engine is the AF_XDP datapath's packet path in userspace: the forwarding decision
// (forward.Balancer: VIP frontends, backends, Maglev tables, reverse NAT, conntrack, the
// handshake table), written through the same methods as the XDP datapath's so that
// lb/reconcile drives either, around it the frames (parse and rewrite), the next hops and the
// counters. Process applies the decision to a frame and rewrites it in place. Its methods are
// safe for concurrent use.
type Engine struct {
	mu    sync.Mutex
	bal   *forward.Balancer
	hops  NextHops
	steer steerer
	// ports: the interfaces frames can be sent from (those with a socket); roles: the side
	// each faces (datapath.Role): what a frame arriving on it may do.
	ports map[int]bool
	roles map[int]datapath.Role
	// vipAddrs counts the frontends of each VIP address; an address with any has a steer key
	// of its own, for steer.c's echo replies.
	vipAddrs map[netip.Addr]int
	reasons  [forward.NumReasons]uint64
	// held are frames waiting for their next hop's MAC; clock is the last Process time.
	held  []heldFrame
	clock time.Duration
}

// NewEngine returns an empty engine with settings s that resolves next hops with hops.
func NewEngine(s datapath.Settings, hops NextHops) (*Engine, error) {
	if hops == nil {
		return nil, errors.New("AF_XDP engine: no next-hop resolver")
	}
	bal, err := forward.New(s)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP engine: %w", err)
	}
	return &Engine{bal: bal, hops: hops, ports: map[int]bool{}, roles: map[int]datapath.Role{}, vipAddrs: map[netip.Addr]int{}}, nil
}

// The steer key constants of steer.c.
const (
	steerToVIP       = 1
	steerFromBackend = 2
	steerVIPAddr     = 3
	steerFamilyV4    = 4
	steerFamilyV6    = 6
)

// steerKey is the steer map's key of {a, port, proto} in direction dir.
func steerKey(a netip.Addr, port uint16, proto datapath.Protocol, dir uint8) steerSteerKey {
	w, fam := datapath.WireAddr(a)
	s := steerSteerKey{Addr: w, Port: datapath.WirePort(port), Proto: uint8(proto), Dir: dir, Family: steerFamilyV4}
	if fam == datapath.FamilyV6 {
		s.Family = steerFamilyV6
	}
	return s
}

func (e *Engine) setSteer(k steerSteerKey, on bool) error {
	if e.steer == nil {
		return nil
	}
	return e.steer.set(k, on)
}

// UpsertVIP creates frontend f or updates its configuration (datapath.Services); a new one's
// frames are steered to the engine from then on.
func (e *Engine) UpsertVIP(f datapath.Frontend, cfg datapath.VIPConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	isNew := !e.bal.HasFrontend(f)
	if err := e.bal.UpsertVIP(f, cfg); err != nil {
		return err
	}
	if !isNew {
		return nil
	}
	a := f.Addr.Unmap()
	if e.vipAddrs[a] == 0 {
		if err := e.setSteer(steerKey(a, 0, 0, steerVIPAddr), true); err != nil {
			_ = e.bal.DeleteVIP(f)
			return fmt.Errorf("VIP %s: answer echo requests to its address: %w", f, err)
		}
	}
	if err := e.setSteer(steerKey(a, f.Port, f.Proto, steerToVIP), true); err != nil {
		if e.vipAddrs[a] == 0 {
			_ = e.setSteer(steerKey(a, 0, 0, steerVIPAddr), false)
		}
		_ = e.bal.DeleteVIP(f)
		return fmt.Errorf("VIP %s: steer its frames: %w", f, err)
	}
	e.vipAddrs[a]++
	return nil
}

// DeleteVIP removes frontend f (datapath.Services); its established flows are dropped as "not
// ours" from then on.
func (e *Engine) DeleteVIP(f datapath.Frontend) error {
	if err := datapath.CheckAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.bal.HasFrontend(f) {
		return nil
	}
	a := f.Addr.Unmap()
	if err := e.setSteer(steerKey(a, f.Port, f.Proto, steerToVIP), false); err != nil {
		return fmt.Errorf("VIP %s: stop steering its frames: %w", f, err)
	}
	if e.vipAddrs[a]--; e.vipAddrs[a] <= 0 {
		delete(e.vipAddrs, a)
		if err := e.setSteer(steerKey(a, 0, 0, steerVIPAddr), false); err != nil {
			return fmt.Errorf("VIP %s: stop answering echo requests to its address: %w", f, err)
		}
	}
	return e.bal.DeleteVIP(f)
}

// VIPs returns every frontend and its configuration (datapath.Services).
func (e *Engine) VIPs() (map[datapath.Frontend]datapath.VIPConfig, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.VIPs()
}

// UpsertBackend sets where backend id sends packets (datapath.Services).
func (e *Engine) UpsertBackend(id datapath.BackendID, b datapath.Backend) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.UpsertBackend(id, b)
}

// DeleteBackend forgets backend id (datapath.Services).
func (e *Engine) DeleteBackend(id datapath.BackendID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.DeleteBackend(id)
}

// Backends returns every backend (datapath.Services).
func (e *Engine) Backends() (map[datapath.BackendID]datapath.Backend, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.Backends()
}

// SetMaglevTable replaces VIP id's Maglev table (datapath.Services).
func (e *Engine) SetMaglevTable(id datapath.VIPID, table []datapath.BackendID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.SetMaglevTable(id, table)
}

// MaglevTables returns every VIP's table by VIP id (datapath.Services).
func (e *Engine) MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.MaglevTables()
}

// SetReverse says which VIP the replies of backend endpoint ep come from (datapath.Services);
// a new endpoint's frames are steered to the engine from then on.
func (e *Engine) SetReverse(ep datapath.Endpoint, r datapath.ReverseNAT) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	isNew := !e.bal.HasReverse(ep)
	if err := e.bal.SetReverse(ep, r); err != nil {
		return err
	}
	if isNew {
		if err := e.setSteer(steerKey(ep.Addr, ep.Port, ep.Proto, steerFromBackend), true); err != nil {
			_ = e.bal.DeleteReverse(ep)
			return fmt.Errorf("reverse NAT of %s: steer its frames: %w", ep, err)
		}
	}
	return nil
}

// DeleteReverse removes the reverse NAT entry of ep (datapath.Services).
func (e *Engine) DeleteReverse(ep datapath.Endpoint) error {
	if err := datapath.CheckAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.bal.HasReverse(ep) {
		return nil
	}
	if err := e.setSteer(steerKey(ep.Addr, ep.Port, ep.Proto, steerFromBackend), false); err != nil {
		return fmt.Errorf("reverse NAT of %s: stop steering its frames: %w", ep, err)
	}
	return e.bal.DeleteReverse(ep)
}

// Reverses returns every reverse NAT entry (datapath.Services).
func (e *Engine) Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.Reverses()
}

// MaxFlowBackend returns the highest backend id a conntrack or handshake entry names
// (datapath.Services).
func (e *Engine) MaxFlowBackend() (datapath.BackendID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.MaxFlowBackend()
}

// FlowCount returns the number of conntrack entries.
func (e *Engine) FlowCount() (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.FlowCount()
}

// Flows returns the conntrack entries at time now (the clock Process is given).
func (e *Engine) Flows(now time.Duration) []datapath.Flow {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.Flows(now)
}

// Handshakes returns the handshake table at time now, as forward.Balancer.Handshakes.
func (e *Engine) Handshakes(now time.Duration) []datapath.Handshake {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.Handshakes(now)
}

// FlushFlows deletes the flows for which match returns true (all when nil) at time now, as
// forward.Balancer.FlushFlows, and returns how many it deleted.
func (e *Engine) FlushFlows(now time.Duration, match func(datapath.Flow) bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.FlushFlows(now, match)
}

// ReasonCounts returns the verdict counters that are not zero.
func (e *Engine) ReasonCounts() map[forward.Reason]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[forward.Reason]uint64{}
	for r, n := range e.reasons {
		if n != 0 {
			out[forward.Reason(r)] = n
		}
	}
	return out
}

// VIPTraffic returns VIP id's counters.
func (e *Engine) VIPTraffic(id datapath.VIPID) (datapath.Traffic, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.VIPTraffic(id)
}

// BackendTraffic returns backend id's counters.
func (e *Engine) BackendTraffic(id datapath.BackendID) (datapath.Traffic, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.BackendTraffic(id)
}

// setPort records that frames can be sent out of ifindex and arrive on it from the side role
// says; RoleNone: they cannot (the interface is detached).
func (e *Engine) setPort(ifindex int, role datapath.Role) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if role != datapath.RoleNone {
		e.ports[ifindex] = true
		e.roles[ifindex] = role
	} else {
		delete(e.ports, ifindex)
		delete(e.roles, ifindex)
	}
}

// SiteSources returns the site's own prefixes by kind (datapath.Services).
func (e *Engine) SiteSources() (map[netip.Prefix]datapath.SiteKind, error) {
	return e.bal.SiteSources()
}

// SetSiteSource adds prefix p of kind k to the site's own prefixes (datapath.Services).
func (e *Engine) SetSiteSource(p netip.Prefix, k datapath.SiteKind) error {
	return e.bal.SetSiteSource(p, k)
}

// DeleteSiteSource removes prefix p from the site's own prefixes (datapath.Services).
func (e *Engine) DeleteSiteSource(p netip.Prefix) error { return e.bal.DeleteSiteSource(p) }
