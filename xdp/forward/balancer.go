// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Timing constants of the flow state: the XDP datapath's (xdp/gateway/bpf/consts.h).
const (
	// HandshakeTimeout is how long a SYN's handshake entry is honoured (HS_TIMEOUT_NS).
	HandshakeTimeout = 60 * time.Second
	// hsSeqWindow is how far past the SYN's sequence number a handshake's next packet may be
	// (HS_SEQ_WINDOW).
	hsSeqWindow = 1 << 30
	// rateWindow is the window of the flood budgets (RATE_WINDOW_NS).
	rateWindow = time.Second
)

// Balancer is a gateway datapath's state in memory and the decision over it. The zero value
// is not usable: use New.
type Balancer struct {
	// mu guards everything below: every exported method takes it.
	mu       sync.Mutex
	settings datapath.Settings

	// vips: frontend → its state; vipByID: the same by VIP id.
	vips    map[feKey]*vip
	vipByID map[datapath.VIPID]*vip
	// vipAddrs counts the frontends of each VIP address (the XDP datapath's marker entry).
	vipAddrs map[addrKey]int
	// backends: backend id → where it sends.
	backends map[datapath.BackendID]backend
	// reverse: backend endpoint → its reverse NAT entry.
	reverse map[feKey]reverse
	// ct: conntrack (forward entries); rct: the reverse entries of flows to ambiguous
	// endpoints (ct_reverse), a table of their own so that they never evict a forward flow;
	// hs: the handshake table.
	ct  map[flowKey]ctEntry
	rct map[flowKey]ctEntry
	hs  map[flowKey]hsEntry
	// budgetStart is the flood budgets' window (budget.h), budgetTaken what each took in it.
	budgetStart int64
	budgetTaken [numBudgets]int64
	// site: the site's own prefixes by kind (the XDP datapath's site_sources).
	site siteSet
	// vipTraffic and backendTraffic count what Forward sends, by VIP and backend id.
	vipTraffic     map[datapath.VIPID]*datapath.Traffic
	backendTraffic map[datapath.BackendID]*datapath.Traffic
}

// addrKey is an address as packets hold it.
type addrKey struct {
	addr [16]byte
	v6   bool
}

// vip is one frontend's state.
type vip struct {
	fe datapath.Frontend
	// key is fe as a map key, kept to compare packets with (ct_vip).
	key   feKey
	cfg   datapath.VIPConfig
	table []datapath.BackendID
}

// backend is a backend with its address as a key.
type backend struct {
	datapath.Backend
	key [16]byte
	v6  bool
}

// reverse is a reverse NAT entry.
type reverse struct {
	datapath.ReverseNAT
	// port is the VIP's service port when the entry was set (0: an all-ports VIP).
	port uint16
}

// ctEntry is one conntrack entry (see datapath.Flow).
type ctEntry struct {
	lastSeen int64
	backend  datapath.BackendID
	vip      datapath.VIPID
	vipPort  uint16
	closing  bool
	reverse  bool
}

// hsEntry is one handshake in flight: the backend a SYN went to.
type hsEntry struct {
	synSeen int64
	backend datapath.BackendID
	vip     datapath.VIPID
	isn     uint32
}

// New returns an empty balancer with settings s (zero fields their defaults).
func New(s datapath.Settings) (*Balancer, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Balancer{
		settings: s.WithDefaults(),
		vips:     map[feKey]*vip{}, vipByID: map[datapath.VIPID]*vip{}, vipAddrs: map[addrKey]int{},
		backends: map[datapath.BackendID]backend{}, reverse: map[feKey]reverse{},
		ct: map[flowKey]ctEntry{}, rct: map[flowKey]ctEntry{}, hs: map[flowKey]hsEntry{}, site: siteSet{prefixes: map[netip.Prefix]datapath.SiteKind{}},
		vipTraffic: map[datapath.VIPID]*datapath.Traffic{}, backendTraffic: map[datapath.BackendID]*datapath.Traffic{},
	}, nil
}

// Settings returns the balancer's settings, defaults applied.
func (b *Balancer) Settings() datapath.Settings { return b.settings }

// The balancer is a datapath's service state.
var _ datapath.Services = (*Balancer)(nil)

// HasFrontend reports whether f is a frontend.
func (b *Balancer) HasFrontend(f datapath.Frontend) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.vips[frontendKey(f.Addr, f.Port, f.Proto)]
	return ok
}

// HasReverse reports whether ep has a reverse NAT entry.
func (b *Balancer) HasReverse(ep datapath.Endpoint) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.reverse[frontendKey(ep.Addr, ep.Port, ep.Proto)]
	return ok
}

// UpsertVIP creates frontend f or updates its configuration (datapath.Services). A new id
// keeps the frontend's table, as the XDP datapath's descriptor does.
func (b *Balancer) UpsertVIP(f datapath.Frontend, cfg datapath.VIPConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckFrontend(f); err != nil {
		return err
	}
	if err := datapath.CheckVIPID(cfg.ID); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	f.Addr = f.Addr.Unmap()
	if err := datapath.CheckSourceRanges(f.Addr, cfg.SourceRanges); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	cfg.SourceRanges = slices.Clone(cfg.SourceRanges)
	if holder := b.vipByID[cfg.ID]; holder != nil && holder.fe != f {
		return fmt.Errorf("VIP %s: id %d is used by %s: %w", f, cfg.ID, holder.fe, datapath.ErrIDInUse)
	}
	k := frontendKey(f.Addr, f.Port, f.Proto)
	v := b.vips[k]
	if v == nil {
		v = &vip{fe: f, key: k}
		b.vips[k] = v
		b.vipAddrs[addrKey{k.addr, k.v6}]++
	}
	if v.cfg.ID != 0 && v.cfg.ID != cfg.ID {
		delete(b.vipByID, v.cfg.ID)
		delete(b.vipTraffic, v.cfg.ID)
	}
	v.cfg = cfg
	b.vipByID[cfg.ID] = v
	if b.vipTraffic[cfg.ID] == nil {
		b.vipTraffic[cfg.ID] = &datapath.Traffic{}
	}
	return nil
}

// DeleteVIP removes frontend f (datapath.Services); its established flows are not ours from
// then on.
func (b *Balancer) DeleteVIP(f datapath.Frontend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	k := frontendKey(f.Addr, f.Port, f.Proto)
	v := b.vips[k]
	if v == nil {
		return nil
	}
	delete(b.vips, k)
	if ak := (addrKey{k.addr, k.v6}); b.vipAddrs[ak] > 1 {
		b.vipAddrs[ak]--
	} else {
		delete(b.vipAddrs, ak)
	}
	delete(b.vipByID, v.cfg.ID)
	delete(b.vipTraffic, v.cfg.ID)
	return nil
}

// VIPs returns every frontend and its configuration (datapath.Services).
func (b *Balancer) VIPs() (map[datapath.Frontend]datapath.VIPConfig, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[datapath.Frontend]datapath.VIPConfig, len(b.vips))
	for _, v := range b.vips {
		c := v.cfg
		c.SourceRanges = slices.Clone(c.SourceRanges)
		out[v.fe] = c
	}
	return out, nil
}

// UpsertBackend sets where backend id sends packets (datapath.Services).
func (b *Balancer) UpsertBackend(id datapath.BackendID, be datapath.Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckBackendID(id); err != nil {
		return err
	}
	if err := datapath.CheckAddr(be.Addr); err != nil {
		return fmt.Errorf("backend %d: %w", id, err)
	}
	be.Addr = be.Addr.Unmap()
	b.backends[id] = backend{Backend: be, key: Key(be.Addr), v6: be.Addr.Is6()}
	if b.backendTraffic[id] == nil {
		b.backendTraffic[id] = &datapath.Traffic{}
	}
	return nil
}

// DeleteBackend forgets backend id (datapath.Services). Flows conntrack still pins to it are
// balanced again on their next packet.
func (b *Balancer) DeleteBackend(id datapath.BackendID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckBackendID(id); err != nil {
		return err
	}
	delete(b.backends, id)
	delete(b.backendTraffic, id)
	return nil
}

// Backends returns every backend (datapath.Services).
func (b *Balancer) Backends() (map[datapath.BackendID]datapath.Backend, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[datapath.BackendID]datapath.Backend, len(b.backends))
	for id, be := range b.backends {
		out[id] = be.Backend
	}
	return out, nil
}

// SetMaglevTable replaces VIP id's table (datapath.Services).
func (b *Balancer) SetMaglevTable(id datapath.VIPID, table []datapath.BackendID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckVIPID(id); err != nil {
		return fmt.Errorf("Maglev table: %w", err)
	}
	if err := datapath.CheckTableSize(len(table)); err != nil {
		return fmt.Errorf("Maglev table of VIP id %d: %w", id, err)
	}
	v := b.vipByID[id]
	if v == nil {
		return fmt.Errorf("Maglev table of VIP id %d: %w", id, datapath.ErrUnknownVIP)
	}
	v.table = slices.Clone(table)
	return nil
}

// MaglevTables returns every VIP's table by VIP id (datapath.Services).
func (b *Balancer) MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[datapath.VIPID][]datapath.BackendID{}
	for id, v := range b.vipByID {
		if v.table != nil {
			out[id] = slices.Clone(v.table)
		}
	}
	return out, nil
}

// SetReverse says which VIP the replies of backend endpoint ep come from (datapath.Services).
func (b *Balancer) SetReverse(ep datapath.Endpoint, r datapath.ReverseNAT) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	if !ep.Proto.Valid() {
		return fmt.Errorf("reverse NAT of %s: %w", ep, datapath.ErrBadProtocol)
	}
	ep.Addr = ep.Addr.Unmap()
	checkVIP := func(id datapath.VIPID) (*vip, error) {
		v := b.vipByID[id]
		if v == nil {
			return nil, fmt.Errorf("reverse NAT of %s: VIP id %d: %w", ep, id, datapath.ErrUnknownVIP)
		}
		if v.fe.Addr.Is4() != ep.Addr.Is4() {
			return nil, fmt.Errorf("reverse NAT of %s: VIP %s is of another family: %w", ep, v.fe, datapath.ErrBadAddress)
		}
		return v, nil
	}
	st := reverse{ReverseNAT: r}
	if r.Ambiguous {
		st.VIP = 0
		if err := datapath.CheckCandidates(r.Candidates); err != nil {
			return fmt.Errorf("reverse NAT of %s: %w", ep, err)
		}
		for _, id := range r.Candidates {
			if id == 0 {
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
		st.Candidates = [datapath.MaxReverseCandidates]datapath.VIPID{}
		st.port = v.fe.Port
	}
	b.reverse[frontendKey(ep.Addr, ep.Port, ep.Proto)] = st
	return nil
}

// DeleteReverse removes the reverse NAT entry of ep (datapath.Services).
func (b *Balancer) DeleteReverse(ep datapath.Endpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := datapath.CheckAddr(ep.Addr); err != nil {
		return fmt.Errorf("reverse NAT of %s: %w", ep, err)
	}
	delete(b.reverse, frontendKey(ep.Addr, ep.Port, ep.Proto))
	return nil
}

// Reverses returns every reverse NAT entry (datapath.Services).
func (b *Balancer) Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[datapath.Endpoint]datapath.ReverseNAT, len(b.reverse))
	for k, r := range b.reverse {
		out[datapath.Endpoint{Addr: AddrOf(k.addr, k.v6), Port: k.port, Proto: datapath.Protocol(k.proto)}] = r.ReverseNAT
	}
	return out, nil
}

// MaxFlowBackend returns the highest backend id a conntrack or handshake entry names, 0 for
// none (datapath.Services).
func (b *Balancer) MaxFlowBackend() (datapath.BackendID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var top datapath.BackendID
	for _, c := range b.ct {
		top = max(top, c.backend)
	}
	for _, h := range b.hs {
		top = max(top, h.backend)
	}
	return top, nil
}

// VIPTraffic and BackendTraffic return the counters of what Forward sent to a VIP id's
// frontend and to a backend id.
func (b *Balancer) VIPTraffic(id datapath.VIPID) (datapath.Traffic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.vipTraffic[id]; t != nil {
		return *t, nil
	}
	return datapath.Traffic{}, nil
}

func (b *Balancer) BackendTraffic(id datapath.BackendID) (datapath.Traffic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.backendTraffic[id]; t != nil {
		return *t, nil
	}
	return datapath.Traffic{}, nil
}

// FlowCount returns the number of forward conntrack entries.
func (b *Balancer) FlowCount() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ct), nil
}

// Flows returns the conntrack entries, forward and reverse, at time now (the clock Forward is
// given).
func (b *Balancer) Flows(now time.Duration) []datapath.Flow {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]datapath.Flow, 0, len(b.ct)+len(b.rct))
	for _, m := range []map[flowKey]ctEntry{b.ct, b.rct} {
		for k, c := range m {
			out = append(out, flowOf(k, c, now))
		}
	}
	return out
}

// Handshakes returns the handshake table at time now: the TCP handshakes in flight and the
// datagram flows that have sent one datagram (Proto UDP), each with where its flow's next packets
// go.
func (b *Balancer) Handshakes(now time.Duration) []datapath.Handshake {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]datapath.Handshake, 0, len(b.hs))
	for k, h := range b.hs {
		out = append(out, datapath.Handshake{
			Client: netip.AddrPortFrom(AddrOf(k.src, k.v6), k.sport), VIPAddr: netip.AddrPortFrom(AddrOf(k.dst, k.v6), k.dport),
			Proto: datapath.Protocol(k.proto), Backend: h.backend, VIP: h.vip, ISN: h.isn,
			Age: max(0, now-time.Duration(h.synSeen)),
		})
	}
	return out
}

// flowOf is conntrack entry c of flow k as a datapath.Flow at time now.
func flowOf(k flowKey, c ctEntry, now time.Duration) datapath.Flow {
	return datapath.Flow{
		Src: netip.AddrPortFrom(AddrOf(k.src, k.v6), k.sport), Dst: netip.AddrPortFrom(AddrOf(k.dst, k.v6), k.dport),
		Proto: datapath.Protocol(k.proto), Reverse: c.reverse, Backend: c.backend, VIP: c.vip,
		VIPPort: c.vipPort, Closing: c.closing, Idle: max(0, now-time.Duration(c.lastSeen)),
	}
}

// FlushFlows deletes the conntrack entries (forward and reverse) for which match returns true
// (all when match is nil), at time now, and returns how many it deleted; the handshakes in
// flight that match (seen as Flows with their SYN's backend and VIP) go too, uncounted, as
// the XDP datapath's FlushFlows does.
func (b *Balancer) FlushFlows(now time.Duration, match func(datapath.Flow) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, h := range b.hs {
		if match == nil || match(flowOf(k, ctEntry{lastSeen: h.synSeen, backend: h.backend, vip: h.vip}, now)) {
			delete(b.hs, k)
		}
	}
	n := 0
	for _, m := range []map[flowKey]ctEntry{b.ct, b.rct} {
		for k, c := range m {
			if match == nil || match(flowOf(k, c, now)) {
				delete(m, k)
				n++
			}
		}
	}
	return n
}

// SetFlow writes conntrack entry f as if it was last refreshed f.Idle before now: for
// snapshots of another datapath's state (xlb show flow).
func (b *Balancer) SetFlow(f datapath.Flow, now time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	src, dst := f.Src.Addr().Unmap(), f.Dst.Addr().Unmap()
	k := flowKey{src: Key(src), dst: Key(dst), sport: f.Src.Port(), dport: f.Dst.Port(), proto: uint8(f.Proto), v6: dst.Is6()}
	c := ctEntry{lastSeen: int64(now - f.Idle), backend: f.Backend, vip: f.VIP, vipPort: f.VIPPort,
		closing: f.Closing, reverse: f.Reverse}
	if f.Reverse {
		b.rctInsert(k, c)
		return
	}
	b.ctInsert(k, c)
}

// SetHandshake writes handshake entry h as if its SYN was seen h.Age before now: for
// snapshots of another datapath's state (xlb show flow).
func (b *Balancer) SetHandshake(h datapath.Handshake, now time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	src, dst := h.Client.Addr().Unmap(), h.VIPAddr.Addr().Unmap()
	proto := h.Proto
	if proto == 0 {
		proto = datapath.TCP
	}
	k := flowKey{src: Key(src), dst: Key(dst), sport: h.Client.Port(), dport: h.VIPAddr.Port(), proto: uint8(proto), v6: dst.Is6()}
	b.hsInsert(k, hsEntry{synSeen: int64(now - h.Age), backend: h.Backend, vip: h.VIP, isn: h.ISN})
}

// Sweep deletes up to budget conntrack and handshake entries idle past their timeouts at time
// now, starting at an arbitrary place in each table, and returns how many it deleted; a
// datapath calls it periodically so that dead flows do not wait for eviction.
func (b *Balancer) Sweep(now time.Duration, budget int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, n, seen := int64(now), 0, 0
	for _, m := range []map[flowKey]ctEntry{b.ct, b.rct} {
		seen = 0
		for k, c := range m {
			if seen++; seen > budget {
				break
			}
			if t-c.lastSeen > int64(b.settings.Timeout(datapath.Protocol(k.proto), c.closing)) {
				delete(m, k)
				n++
			}
		}
	}
	seen = 0
	for k, h := range b.hs {
		if seen++; seen > budget {
			break
		}
		if t-h.synSeen > int64(HandshakeTimeout) {
			delete(b.hs, k)
			n++
		}
	}
	return n
}

// ctInsert writes a conntrack entry (insertBounded).
func (b *Balancer) ctInsert(k flowKey, c ctEntry) {
	insertBounded(b.ct, k, c, int(b.settings.ConntrackSize), func(c ctEntry) int64 { return c.lastSeen })
}

// rctInsert writes a reverse conntrack entry (insertBounded).
func (b *Balancer) rctInsert(k flowKey, c ctEntry) {
	insertBounded(b.rct, k, c, int(b.settings.ReverseConntrackSize()), func(c ctEntry) int64 { return c.lastSeen })
}

// hsInsert writes a handshake entry (insertBounded).
func (b *Balancer) hsInsert(k flowKey, h hsEntry) {
	insertBounded(b.hs, k, h, int(b.settings.HandshakeSize), func(h hsEntry) int64 { return h.synSeen })
}

// evictSample is how many entries insertBounded compares to choose the one it evicts.
const evictSample = 16

// insertBounded sets m[k] = v; a new key in a map of size entries or more first evicts the least
// recently used (by used) of evictSample entries taken at a random place (Go's map iteration
// starts at one): an approximate LRU, as the XDP datapath's tables are, so that a flood of new
// keys pushes out idle entries before active ones.
func insertBounded[V any](m map[flowKey]V, k flowKey, v V, size int, used func(V) int64) {
	if _, ok := m[k]; !ok && len(m) >= size {
		var victim flowKey
		oldest, n := int64(0), 0
		for old, ov := range m {
			if t := used(ov); n == 0 || t < oldest {
				victim, oldest = old, t
			}
			if n++; n >= evictSample {
				break
			}
		}
		delete(m, victim)
	}
	m[k] = v
}
