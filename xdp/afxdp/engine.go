package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlb-dev/xlb/xdp"
)

// Limits of the identifiers and tables, the XDP datapath's (see xdp.VIPID, xdp.BackendID).
const (
	maxVIPs     = 65536
	maxBackends = 262144
	maxMaglevM  = 1048573
)

// Timing constants of the flow state, the XDP datapath's (xdp/bpf/consts.h).
const (
	// hsTimeout is how long a SYN's handshake entry is honoured.
	hsTimeout = 60 * time.Second
	// hsSeqWindow is how far past the SYN's sequence number a handshake's next packet may be.
	hsSeqWindow = 1 << 30
	// rateWindow is the window of the new-flow rate guard.
	rateWindow = time.Second
)

// Options configure an Engine. The zero value is a working default; the defaults are the XDP
// datapath's.
type Options struct {
	// Seed seeds the flow hash: the same on every gateway, and the same as the XDP datapath's
	// Options.Seed on gateways that mix the two datapaths.
	Seed uint32
	// ConntrackSize is the number of flows conntrack holds; 0 means xdp.DefaultConntrackSize.
	// When it is full a new flow evicts an arbitrary one.
	ConntrackSize int
	// HandshakeSize is the number of TCP handshakes in flight kept; 0 means
	// xdp.DefaultHandshakeSize.
	HandshakeSize int
	// TCPEstablishedTimeout, TCPClosingTimeout and UDPTimeout are conntrack idle timeouts; 0
	// means the xdp.Default* value.
	TCPEstablishedTimeout time.Duration
	TCPClosingTimeout     time.Duration
	UDPTimeout            time.Duration
	// NewFlowRate caps conntrack (and, separately, handshake) inserts per second; 0 means
	// xdp.DefaultNewFlowRate, negative no cap. Above it flows are balanced but not remembered.
	NewFlowRate int64
}

func (o Options) withDefaults() Options {
	if o.ConntrackSize == 0 {
		o.ConntrackSize = xdp.DefaultConntrackSize
	}
	if o.HandshakeSize == 0 {
		o.HandshakeSize = xdp.DefaultHandshakeSize
	}
	if o.TCPEstablishedTimeout == 0 {
		o.TCPEstablishedTimeout = xdp.DefaultTCPEstablishedTimeout
	}
	if o.TCPClosingTimeout == 0 {
		o.TCPClosingTimeout = xdp.DefaultTCPClosingTimeout
	}
	if o.UDPTimeout == 0 {
		o.UDPTimeout = xdp.DefaultUDPTimeout
	}
	if o.NewFlowRate == 0 {
		o.NewFlowRate = xdp.DefaultNewFlowRate
	}
	return o
}

func (o Options) validate() error {
	if o.ConntrackSize < 0 || o.HandshakeSize < 0 {
		return fmt.Errorf("conntrack size %d, handshake size %d: must not be negative", o.ConntrackSize, o.HandshakeSize)
	}
	for _, d := range []time.Duration{o.TCPEstablishedTimeout, o.TCPClosingTimeout, o.UDPTimeout} {
		if d != 0 && d < time.Second {
			return fmt.Errorf("conntrack timeout %s: must be at least 1s", d)
		}
	}
	return nil
}

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
}

// steerer keeps the kernel half (steer.c's steer map) in step with the engine's frontends and
// reverse endpoints.
type steerer interface {
	set(k steerSteerKey, on bool) error
}

// feKey and epKey are frontends and endpoints as map keys.
type feKey struct {
	addr  [16]byte
	port  uint16
	proto uint8
	v6    bool
}

type vipState struct {
	fe    xdp.Frontend
	cfg   xdp.VIPConfig
	table []xdp.BackendID
}

type backendState struct {
	xdp.Backend
	key [16]byte
	v6  bool
}

type reverseState struct {
	xdp.ReverseNAT
	// port is the VIP's service port when the entry was set (0: an all-ports VIP).
	port uint16
}

// ctEntry is one conntrack entry (see xdp.Flow).
type ctEntry struct {
	lastSeen int64
	backend  xdp.BackendID
	vip      xdp.VIPID
	vipPort  uint16
	closing  bool
	reverse  bool
}

// hsEntry is one handshake in flight: the backend a SYN went to.
type hsEntry struct {
	synSeen int64
	backend xdp.BackendID
	vip     xdp.VIPID
	isn     uint32
}

// Engine is the AF_XDP datapath's packet logic and state, in userspace: VIP frontends, backends,
// Maglev tables and reverse NAT entries (written through the same methods as the XDP datapath,
// so lb/reconcile drives either), conntrack, the handshake table and counters. Process applies
// the XDP datapath's rules to a frame and rewrites it in place. Its methods are safe for
// concurrent use.
type Engine struct {
	mu    sync.Mutex
	opts  Options
	hops  NextHops
	steer steerer
	// ports: the interfaces frames can be sent from (those with a socket).
	ports map[int]bool

	vips    map[feKey]*vipState
	vipByID map[xdp.VIPID]*vipState
	// vipAddrs counts the frontends of each VIP address (key: port and proto 0); an address
	// with any has a steer key of its own, for steer.c's echo replies.
	vipAddrs map[feKey]int
	backends map[xdp.BackendID]backendState
	reverse  map[feKey]reverseState
	ct       map[flowKey]ctEntry
	hs       map[flowKey]hsEntry

	// rateStart, rateCT and rateHS are the rate guard's window and its two counts.
	rateStart      int64
	rateCT, rateHS int64
	reasons        [numReasons]uint64
	// held are frames waiting for their next hop's MAC; clock is the last Process time.
	held           []heldFrame
	clock          time.Duration
	vipTraffic     map[xdp.VIPID]*xdp.Traffic
	backendTraffic map[xdp.BackendID]*xdp.Traffic
}

// NewEngine returns an empty engine that resolves next hops with hops.
func NewEngine(opts Options, hops NextHops) (*Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("AF_XDP engine: %w", err)
	}
	if hops == nil {
		return nil, errors.New("AF_XDP engine: no next-hop resolver")
	}
	return &Engine{
		opts: opts.withDefaults(), hops: hops, ports: map[int]bool{},
		vips: map[feKey]*vipState{}, vipByID: map[xdp.VIPID]*vipState{}, vipAddrs: map[feKey]int{},
		backends: map[xdp.BackendID]backendState{}, reverse: map[feKey]reverseState{},
		ct: map[flowKey]ctEntry{}, hs: map[flowKey]hsEntry{},
		vipTraffic: map[xdp.VIPID]*xdp.Traffic{}, backendTraffic: map[xdp.BackendID]*xdp.Traffic{},
	}, nil
}

func frontendKey(a netip.Addr, port uint16, proto xdp.Protocol) feKey {
	a = a.Unmap()
	return feKey{addr: keyAddr(a), port: port, proto: uint8(proto), v6: a.Is6()}
}

func (k feKey) steerKey(dir uint8) steerSteerKey {
	s := steerSteerKey{Proto: k.proto, Dir: dir, Family: steerFamilyV4}
	if k.v6 {
		s.Family = steerFamilyV6
	}
	for i := range s.Addr {
		s.Addr[i] = ne.Uint32(k.addr[4*i:])
	}
	var wire [2]byte
	wire[0], wire[1] = byte(k.port>>8), byte(k.port)
	s.Port = ne.Uint16(wire[:])
	return s
}

// The steer key constants of steer.c.
const (
	steerToVIP       = 1
	steerFromBackend = 2
	steerVIPAddr     = 3
	steerFamilyV4    = 4
	steerFamilyV6    = 6
)

func checkAddr(a netip.Addr) error {
	if !a.IsValid() {
		return errors.New("no address")
	}
	if a.Zone() != "" {
		return fmt.Errorf("address %s has a zone", a)
	}
	return nil
}

func validProto(p xdp.Protocol) bool { return p == xdp.TCP || p == xdp.UDP }

func (e *Engine) setSteer(k feKey, dir uint8, on bool) error {
	if e.steer == nil {
		return nil
	}
	return e.steer.set(k.steerKey(dir), on)
}

// UpsertVIP creates frontend f or updates its configuration. Its flows are dropped as "no
// backend" until its Maglev table is set.
func (e *Engine) UpsertVIP(f xdp.Frontend, cfg xdp.VIPConfig) error {
	if err := checkAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if !validProto(f.Proto) {
		return fmt.Errorf("VIP %s: protocol %s is not balanced (TCP and UDP are)", f, f.Proto)
	}
	if cfg.ID == 0 || cfg.ID >= maxVIPs {
		return fmt.Errorf("VIP %s: id %d out of range 1..%d", f, cfg.ID, maxVIPs-1)
	}
	f.Addr = f.Addr.Unmap()
	for _, p := range cfg.SourceRanges {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Is4() != f.Addr.Is4() {
			return fmt.Errorf("VIP %s: source range %s is not a prefix of the VIP's family "+
				"(write IPv4 prefixes in IPv4 form)", f, p)
		}
	}
	cfg.SourceRanges = slices.Clone(cfg.SourceRanges)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := frontendKey(f.Addr, f.Port, f.Proto)
	if holder := e.vipByID[cfg.ID]; holder != nil && holder.fe != f {
		return fmt.Errorf("VIP %s: id %d is already used by %s", f, cfg.ID, holder.fe)
	}
	v := e.vips[k]
	if v == nil {
		ak := feKey{addr: k.addr, v6: k.v6}
		if e.vipAddrs[ak] == 0 {
			if err := e.setSteer(ak, steerVIPAddr, true); err != nil {
				return fmt.Errorf("VIP %s: answer echo requests to its address: %w", f, err)
			}
		}
		if err := e.setSteer(k, steerToVIP, true); err != nil {
			if e.vipAddrs[ak] == 0 {
				_ = e.setSteer(ak, steerVIPAddr, false)
			}
			return fmt.Errorf("VIP %s: steer its frames: %w", f, err)
		}
		e.vipAddrs[ak]++
		v = &vipState{fe: f}
		e.vips[k] = v
	}
	if v.cfg.ID != 0 && v.cfg.ID != cfg.ID {
		// A new id keeps the frontend's table, as the XDP datapath's descriptor does.
		delete(e.vipByID, v.cfg.ID)
		delete(e.vipTraffic, v.cfg.ID)
	}
	v.cfg = cfg
	e.vipByID[cfg.ID] = v
	if e.vipTraffic[cfg.ID] == nil {
		e.vipTraffic[cfg.ID] = &xdp.Traffic{}
	}
	return nil
}

// DeleteVIP removes frontend f; its established flows are dropped as "not ours" from then on.
func (e *Engine) DeleteVIP(f xdp.Frontend) error {
	if err := checkAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := frontendKey(f.Addr, f.Port, f.Proto)
	v := e.vips[k]
	if v == nil {
		return nil
	}
	if err := e.setSteer(k, steerToVIP, false); err != nil {
		return fmt.Errorf("VIP %s: stop steering its frames: %w", f, err)
	}
	ak := feKey{addr: k.addr, v6: k.v6}
	if e.vipAddrs[ak]--; e.vipAddrs[ak] <= 0 {
		delete(e.vipAddrs, ak)
		if err := e.setSteer(ak, steerVIPAddr, false); err != nil {
			return fmt.Errorf("VIP %s: stop answering echo requests to its address: %w", f, err)
		}
	}
	delete(e.vips, k)
	delete(e.vipByID, v.cfg.ID)
	delete(e.vipTraffic, v.cfg.ID)
	return nil
}

// VIPs returns every frontend and its configuration.
func (e *Engine) VIPs() (map[xdp.Frontend]xdp.VIPConfig, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[xdp.Frontend]xdp.VIPConfig, len(e.vips))
	for _, v := range e.vips {
		c := v.cfg
		c.SourceRanges = slices.Clone(c.SourceRanges)
		out[v.fe] = c
	}
	return out, nil
}

// UpsertBackend sets where backend id sends packets.
func (e *Engine) UpsertBackend(id xdp.BackendID, b xdp.Backend) error {
	if id == 0 || id >= maxBackends {
		return fmt.Errorf("backend %d: id out of range 1..%d", id, maxBackends-1)
	}
	if err := checkAddr(b.Addr); err != nil {
		return fmt.Errorf("backend %d: %w", id, err)
	}
	b.Addr = b.Addr.Unmap()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.backends[id] = backendState{Backend: b, key: keyAddr(b.Addr), v6: b.Addr.Is6()}
	if e.backendTraffic[id] == nil {
		e.backendTraffic[id] = &xdp.Traffic{}
	}
	return nil
}

// DeleteBackend forgets backend id. Flows conntrack still pins to it are re-balanced on their
// next packet.
func (e *Engine) DeleteBackend(id xdp.BackendID) error {
	if id == 0 || id >= maxBackends {
		return fmt.Errorf("backend %d: id out of range 1..%d", id, maxBackends-1)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.backends, id)
	delete(e.backendTraffic, id)
	return nil
}

// Backends returns every backend.
func (e *Engine) Backends() (map[xdp.BackendID]xdp.Backend, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[xdp.BackendID]xdp.Backend, len(e.backends))
	for id, b := range e.backends {
		out[id] = b.Backend
	}
	return out, nil
}

// SetMaglevTable replaces VIP id's Maglev table: table[i] is the backend of slot i (0: empty),
// len(table) is M. Packets see the old table or the new one.
func (e *Engine) SetMaglevTable(id xdp.VIPID, table []xdp.BackendID) error {
	if id == 0 || id >= maxVIPs {
		return fmt.Errorf("Maglev table of VIP id %d: id out of range 1..%d", id, maxVIPs-1)
	}
	if len(table) == 0 || len(table) > maxMaglevM {
		return fmt.Errorf("Maglev table of VIP id %d: size %d out of range 1..%d", id, len(table), maxMaglevM)
	}
	t := slices.Clone(table)
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.vipByID[id]
	if v == nil {
		return fmt.Errorf("Maglev table of VIP id %d: no such VIP", id)
	}
	v.table = t
	return nil
}

// MaglevTables returns every VIP's table by VIP id.
func (e *Engine) MaglevTables() (map[xdp.VIPID][]xdp.BackendID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[xdp.VIPID][]xdp.BackendID{}
	for id, v := range e.vipByID {
		if v.table != nil {
			out[id] = slices.Clone(v.table)
		}
	}
	return out, nil
}

// SetReverse says which VIP the replies of backend endpoint ep come from.
func (e *Engine) SetReverse(ep xdp.Endpoint, r xdp.ReverseNAT) error {
	if err := checkAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !validProto(ep.Proto) {
		return fmt.Errorf("reverse NAT of %s: protocol %s is not balanced", ep, ep.Proto)
	}
	ep.Addr = ep.Addr.Unmap()
	e.mu.Lock()
	defer e.mu.Unlock()
	checkVIP := func(id xdp.VIPID) (*vipState, error) {
		v := e.vipByID[id]
		if v == nil {
			return nil, fmt.Errorf("reverse NAT of %s: VIP id %d is not configured", ep, id)
		}
		if v.fe.Addr.Is4() != ep.Addr.Is4() {
			return nil, fmt.Errorf("reverse NAT of %s: VIP %s is of another family", ep, v.fe)
		}
		return v, nil
	}
	st := reverseState{ReverseNAT: r}
	if r.Ambiguous {
		st.VIP = 0
		for i, id := range r.Candidates {
			if id == 0 {
				if slices.ContainsFunc(r.Candidates[i:], func(id xdp.VIPID) bool { return id != 0 }) {
					return fmt.Errorf("reverse NAT of %s: candidate VIP ids %v have a gap", ep, r.Candidates)
				}
				break
			}
			if _, err := checkVIP(id); err != nil {
				return err
			}
		}
	} else {
		v, err := checkVIP(r.VIP)
		if err != nil {
			return err
		}
		st.Candidates = [xdp.MaxReverseCandidates]xdp.VIPID{}
		st.port = v.fe.Port
	}
	k := frontendKey(ep.Addr, ep.Port, ep.Proto)
	if _, ok := e.reverse[k]; !ok {
		if err := e.setSteer(k, steerFromBackend, true); err != nil {
			return fmt.Errorf("reverse NAT of %s: steer its frames: %w", ep, err)
		}
	}
	e.reverse[k] = st
	return nil
}

// DeleteReverse removes the reverse NAT entry of ep.
func (e *Engine) DeleteReverse(ep xdp.Endpoint) error {
	if err := checkAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := frontendKey(ep.Addr, ep.Port, ep.Proto)
	if _, ok := e.reverse[k]; !ok {
		return nil
	}
	if err := e.setSteer(k, steerFromBackend, false); err != nil {
		return fmt.Errorf("reverse NAT of %s: stop steering its frames: %w", ep, err)
	}
	delete(e.reverse, k)
	return nil
}

// Reverses returns every reverse NAT entry.
func (e *Engine) Reverses() (map[xdp.Endpoint]xdp.ReverseNAT, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[xdp.Endpoint]xdp.ReverseNAT, len(e.reverse))
	for k, r := range e.reverse {
		out[xdp.Endpoint{Addr: addrOf(k.addr, k.v6), Port: k.port, Proto: xdp.Protocol(k.proto)}] = r.ReverseNAT
	}
	return out, nil
}

// MaxFlowBackend returns the highest backend id a conntrack or handshake entry names (0: none),
// so that a restarted reconciler does not reuse an id flows still point at.
func (e *Engine) MaxFlowBackend() (xdp.BackendID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var top xdp.BackendID
	for _, c := range e.ct {
		top = max(top, c.backend)
	}
	for _, h := range e.hs {
		top = max(top, h.backend)
	}
	return top, nil
}

// FlowCount returns the number of conntrack entries.
func (e *Engine) FlowCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ct)
}

// Flows returns the conntrack entries at time now (the clock Process is given).
func (e *Engine) Flows(now time.Duration) []xdp.Flow {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]xdp.Flow, 0, len(e.ct))
	for k, c := range e.ct {
		out = append(out, xdp.Flow{
			Src: netip.AddrPortFrom(addrOf(k.src, k.v6), k.sport), Dst: netip.AddrPortFrom(addrOf(k.dst, k.v6), k.dport),
			Proto: xdp.Protocol(k.proto), Reverse: c.reverse, Backend: c.backend, VIP: c.vip,
			VIPPort: c.vipPort, Closing: c.closing, Idle: max(0, now-time.Duration(c.lastSeen)),
		})
	}
	return out
}

// Reasons returns the verdict counters by name (see Reason).
func (e *Engine) Reasons() map[Reason]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[Reason]uint64{}
	for r, n := range e.reasons {
		if n != 0 {
			out[Reason(r)] = n
		}
	}
	return out
}

// VIPTraffic returns VIP id's counters.
func (e *Engine) VIPTraffic(id xdp.VIPID) xdp.Traffic {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.vipTraffic[id]; t != nil {
		return *t
	}
	return xdp.Traffic{}
}

// BackendTraffic returns backend id's counters.
func (e *Engine) BackendTraffic(id xdp.BackendID) xdp.Traffic {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.backendTraffic[id]; t != nil {
		return *t
	}
	return xdp.Traffic{}
}

// setPort records that frames can (on) or cannot be sent out of ifindex.
func (e *Engine) setPort(ifindex int, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if on {
		e.ports[ifindex] = true
	} else {
		delete(e.ports, ifindex)
	}
}
