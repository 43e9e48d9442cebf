// Package reconcile drives xlb's datapaths from the desired states lb computes: Reconciler a
// gateway's (lb.Plan: VIPs, backends, Maglev tables, reverse NAT) and ConnectReconciler the node
// agent's socket load balancer (lb.PlanConnect: cluster IP frontends and their endpoints). Each
// is the one owner of its datapath's state: diff-based (what is unchanged is not written),
// idempotent, and on start it adopts what an earlier process left in the pinned maps instead of
// wiping it. Both see the datapath through xdp/datapath's interfaces only.
package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Datapath is what the reconciler needs of *xdp.Datapath (a smaller surface for tests).
type Datapath interface {
	VIPs() (map[datapath.Frontend]datapath.VIPConfig, error)
	UpsertVIP(datapath.Frontend, datapath.VIPConfig) error
	DeleteVIP(datapath.Frontend) error
	Backends() (map[datapath.BackendID]datapath.Backend, error)
	UpsertBackend(datapath.BackendID, datapath.Backend) error
	DeleteBackend(datapath.BackendID) error
	MaglevTables() (map[datapath.VIPID][]datapath.BackendID, error)
	SetMaglevTable(datapath.VIPID, []datapath.BackendID) error
	Reverses() (map[datapath.Endpoint]datapath.ReverseNAT, error)
	MaxFlowBackend() (datapath.BackendID, error)
	SetReverse(datapath.Endpoint, datapath.ReverseNAT) error
	DeleteReverse(datapath.Endpoint) error
}

// Reconciler applies desired states to a datapath. Its methods are safe for concurrent use.
type Reconciler struct {
	mu  sync.Mutex
	dp  Datapath
	log *slog.Logger

	// vips: frontend -> what the datapath holds for it (its id, configuration, table).
	vips map[datapath.Frontend]vipState
	// vipIDs: the ids in vips.
	vipIDs map[datapath.VIPID]bool
	// backends: backend id -> its value in the datapath.
	backends map[datapath.BackendID]datapath.Backend
	// backendIDs: endpoint (address, target port) -> backend id; the inverse of backends.
	backendIDs map[netip.AddrPort]datapath.BackendID
	// reverse: the datapath's reverse NAT entries.
	reverse map[datapath.Endpoint]datapath.ReverseNAT
	// nextVIP, nextBackend: where the search for a free id starts. Ids are handed out in a
	// circle, so a deleted id (which conntrack may still name) is reused as late as possible.
	nextVIP, nextBackend uint32
}

type vipState struct {
	cfg   datapath.VIPConfig
	table []datapath.BackendID
	// dirty: a write of cfg failed; the datapath may hold part of it.
	dirty bool
}

// Result counts what one Apply wrote.
type Result struct {
	VIPsWritten, VIPsDeleted         int
	TablesWritten                    int
	BackendsWritten, BackendsDeleted int
	ReverseWritten, ReverseDeleted   int
}

// Changes is the total number of writes.
func (r Result) Changes() int {
	return r.VIPsWritten + r.VIPsDeleted + r.TablesWritten + r.BackendsWritten + r.BackendsDeleted +
		r.ReverseWritten + r.ReverseDeleted
}

// Highest ids the datapath accepts (xdp: VIP ids 1..65535, backend ids 1..262143).
const (
	maxVIPID     = 65535
	maxBackendID = 262143
)

// New adopts the state in dp (left by an earlier process, or empty) and returns a reconciler.
func New(dp Datapath, log *slog.Logger) (*Reconciler, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reconciler{dp: dp, log: log, vips: map[datapath.Frontend]vipState{}, vipIDs: map[datapath.VIPID]bool{},
		backendIDs: map[netip.AddrPort]datapath.BackendID{}}
	vips, err := dp.VIPs()
	if err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	tables, err := dp.MaglevTables()
	if err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	for f, cfg := range vips {
		r.vips[f] = vipState{cfg: normalize(cfg), table: tables[cfg.ID]}
		r.vipIDs[cfg.ID] = true
		r.nextVIP = max(r.nextVIP, uint32(cfg.ID))
	}
	if r.backends, err = dp.Backends(); err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	for id, b := range r.backends {
		r.backendIDs[netip.AddrPortFrom(b.Addr, b.Port)] = id
		r.nextBackend = max(r.nextBackend, uint32(id))
	}
	// Ids freed just before the restart may still be named by flows: start above them too.
	top, err := dp.MaxFlowBackend()
	if err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	r.nextBackend = max(r.nextBackend, uint32(top))
	if r.reverse, err = dp.Reverses(); err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	log.Info("adopted datapath state", "vips", len(r.vips), "backends", len(r.backends),
		"reverse", len(r.reverse))
	return r, nil
}

func normalize(c datapath.VIPConfig) datapath.VIPConfig {
	c.SourceRanges = slices.Clone(c.SourceRanges)
	slices.SortFunc(c.SourceRanges, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	c.SourceRanges = slices.Compact(c.SourceRanges)
	if len(c.SourceRanges) == 0 {
		c.SourceRanges = nil
	}
	return c
}

func sameConfig(a, b datapath.VIPConfig) bool {
	return a.ID == b.ID && a.Affinity == b.Affinity && slices.Equal(a.SourceRanges, b.SourceRanges)
}

func xdpFrontend(f datapath.Frontend) datapath.Frontend {
	return datapath.Frontend{Addr: f.Addr, Port: f.Port, Proto: datapath.Protocol(f.Proto)}
}

// Apply makes the datapath hold d: new and changed backends first, then VIPs and their tables
// (each table swaps atomically), then reverse NAT entries, and only then removals. A failed write
// is reported in the returned error and the rest is still applied; a frontend whose backends could
// not all be written keeps its old table. Calling Apply again retries what failed.
func (r *Reconciler) Apply(d *lb.Desired) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res Result
	var errs []error

	// Backends: every endpoint some frontend names. One that fails its health check in every
	// frontend using it is Down: even its established flows move (a dead Pod would black-hole a
	// UDP flow that never goes idle). A draining one keeps them.
	wanted := map[datapath.BackendID]bool{}
	broken := map[netip.AddrPort]bool{}
	down := map[netip.AddrPort]bool{}
	for _, p := range d.Frontends {
		for _, b := range p.Backends {
			if isDown, seen := down[b.Key]; !seen || isDown {
				down[b.Key] = b.State == lb.Unhealthy
			}
		}
	}
	for _, key := range sortedKeys(down) {
		fresh := r.backendIDs[key] == 0
		id, err := r.backendID(key)
		if err != nil {
			errs = append(errs, err)
			broken[key] = true
			continue
		}
		wanted[id] = true
		// A backend goes down only once no table gives it new flows (below): marked down while
		// the old table still names it, it would drop those flows' first packets.
		cur, ok := r.backends[id]
		v := datapath.Backend{Addr: key.Addr(), Port: key.Port(), Down: down[key] && ok && cur.Down}
		if ok && cur == v {
			continue
		}
		if err := r.dp.UpsertBackend(id, v); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", key, err))
			broken[key] = true
			if fresh {
				delete(r.backendIDs, key) // the id was never written: forget it
				delete(wanted, id)
			}
			continue
		}
		r.backends[id] = v
		res.BackendsWritten++
	}

	// Reverse entries that become ambiguous go first: a new table must not publish a shared
	// endpoint before its backends write reverse conntrack entries (they need no VIP id). Their
	// Maglev candidates, which name VIP ids, are written with the other reverse entries below.
	for ep, rp := range d.Reverse {
		xe := datapath.Endpoint{Addr: ep.Addr, Port: ep.Port, Proto: datapath.Protocol(ep.Proto)}
		if !rp.Ambiguous || broken[netip.AddrPortFrom(ep.Addr, ep.Port)] {
			continue
		}
		v := datapath.ReverseNAT{Ambiguous: true}
		if cur, ok := r.reverse[xe]; ok && cur.Ambiguous {
			continue
		}
		if err := r.dp.SetReverse(xe, v); err != nil {
			errs = append(errs, fmt.Errorf("reverse NAT of %s: %w", xe, err))
			continue
		}
		r.reverse[xe] = v
		res.ReverseWritten++
	}

	// VIPs and tables.
	ids := map[datapath.Frontend]datapath.VIPID{}
	for _, f := range sortedFrontends(d) {
		p := d.Frontends[f]
		xf := xdpFrontend(f)
		cur, exists := r.vips[xf]
		id := cur.cfg.ID
		if !exists {
			var err error
			if id, err = r.freeVIPID(); err != nil {
				errs = append(errs, fmt.Errorf("frontend %s: %w", f, err))
				continue
			}
		}
		if exists {
			ids[f] = id // its reverse entries stay, whatever fails below
		}
		cfg := normalize(datapath.VIPConfig{ID: id, Affinity: datapath.Affinity(p.Affinity), SourceRanges: p.SourceRanges})
		if !exists || cur.dirty || !sameConfig(cur.cfg, cfg) {
			if err := r.dp.UpsertVIP(xf, cfg); err != nil {
				errs = append(errs, fmt.Errorf("frontend %s (service %s): %w", f, p.Service, err))
				if exists {
					// Half-written, perhaps: rewrite it next time even if the config matches.
					cur.dirty = true
					r.vips[xf] = cur
				}
				continue
			}
			cur.cfg, cur.dirty = cfg, false
			r.vips[xf] = cur
			r.vipIDs[id] = true
			res.VIPsWritten++
		}
		ids[f] = id
		table, err := r.table(p, broken)
		if err != nil {
			errs = append(errs, fmt.Errorf("frontend %s (service %s): keeping its old table: %w", f, p.Service, err))
			continue
		}
		if slices.Equal(cur.table, table) {
			continue
		}
		if err := r.dp.SetMaglevTable(id, table); err != nil {
			errs = append(errs, fmt.Errorf("frontend %s (service %s): %w", f, p.Service, err))
			continue
		}
		cur.table = table
		r.vips[xf] = cur
		res.TablesWritten++
	}

	// Backends that failed their health check everywhere go down now that the tables leave
	// them out: their established flows move to the others.
	for _, key := range sortedKeys(down) {
		id := r.backendIDs[key]
		cur, ok := r.backends[id]
		if !down[key] || broken[key] || !ok || cur.Down {
			continue
		}
		v := cur
		v.Down = true
		if err := r.dp.UpsertBackend(id, v); err != nil {
			errs = append(errs, fmt.Errorf("backend %s: mark down: %w", key, err))
			continue
		}
		r.backends[id] = v
		res.BackendsWritten++
	}

	// Reverse NAT.
	wantRev := map[datapath.Endpoint]datapath.ReverseNAT{}
	for ep, rp := range d.Reverse {
		xe := datapath.Endpoint{Addr: ep.Addr, Port: ep.Port, Proto: datapath.Protocol(ep.Proto)}
		if broken[netip.AddrPortFrom(ep.Addr, ep.Port)] {
			if cur, ok := r.reverse[xe]; ok {
				wantRev[xe] = cur // keep what the datapath has
			}
			continue
		}
		v := datapath.ReverseNAT{Ambiguous: rp.Ambiguous}
		if rp.Ambiguous {
			v.Candidates = candidateIDs(rp.Candidates, ids)
		} else {
			id, ok := ids[rp.Frontend]
			if !ok {
				// Its frontend could not be created: keep what the datapath has.
				if cur, ok := r.reverse[xe]; ok {
					wantRev[xe] = cur
				}
				continue
			}
			v.VIP = id
		}
		wantRev[xe] = v
		if cur, ok := r.reverse[xe]; ok && cur == v {
			continue
		}
		if err := r.dp.SetReverse(xe, v); err != nil {
			errs = append(errs, fmt.Errorf("reverse NAT of %s: %w", xe, err))
			continue
		}
		r.reverse[xe] = v
		res.ReverseWritten++
	}

	// Removals, once everything new is in place.
	for ep := range r.reverse {
		if _, ok := wantRev[ep]; ok {
			continue
		}
		if err := r.dp.DeleteReverse(ep); err != nil {
			errs = append(errs, fmt.Errorf("reverse NAT of %s: %w", ep, err))
			continue
		}
		delete(r.reverse, ep)
		res.ReverseDeleted++
	}
	for xf := range r.vips {
		if _, ok := d.Frontends[datapath.Frontend{Addr: xf.Addr, Port: xf.Port, Proto: datapath.Protocol(xf.Proto)}]; ok {
			continue
		}
		if err := r.dp.DeleteVIP(xf); err != nil {
			errs = append(errs, fmt.Errorf("frontend %s: %w", xf, err))
			continue
		}
		delete(r.vipIDs, r.vips[xf].cfg.ID)
		delete(r.vips, xf)
		res.VIPsDeleted++
	}
	for id, b := range r.backends {
		if wanted[id] || r.referenced(id) {
			continue
		}
		if err := r.dp.DeleteBackend(id); err != nil {
			errs = append(errs, fmt.Errorf("backend %d (%s): %w", id, b.Addr, err))
			continue
		}
		delete(r.backends, id)
		delete(r.backendIDs, netip.AddrPortFrom(b.Addr, b.Port))
		res.BackendsDeleted++
	}
	return res, errors.Join(errs...)
}

// candidateIDs maps an ambiguous endpoint's candidate frontends to their VIP ids. When there are
// too many for the datapath, or one has no VIP id (it could not be created), it lists none: the
// datapath must not pick the only match among an incomplete list.
func candidateIDs(fs []datapath.Frontend, ids map[datapath.Frontend]datapath.VIPID) (out [datapath.MaxReverseCandidates]datapath.VIPID) {
	if len(fs) > len(out) {
		return out
	}
	for i, f := range fs {
		id, ok := ids[f]
		if !ok {
			return [datapath.MaxReverseCandidates]datapath.VIPID{}
		}
		out[i] = id
	}
	return out
}

// table maps a plan's table to backend ids. It fails if a backend the table uses was not written.
func (r *Reconciler) table(p *lb.FrontendPlan, broken map[netip.AddrPort]bool) ([]datapath.BackendID, error) {
	ids := make([]datapath.BackendID, len(p.Backends))
	for i, b := range p.Backends {
		if broken[b.Key] {
			return nil, fmt.Errorf("backend %s was not written", b.Key)
		}
		ids[i] = r.backendIDs[b.Key]
	}
	out := make([]datapath.BackendID, len(p.Table))
	for i, idx := range p.Table {
		if idx >= 0 {
			out[i] = ids[idx]
		}
	}
	return out, nil
}

// referenced reports whether a table the datapath still holds (of a frontend whose update
// failed) names backend id.
func (r *Reconciler) referenced(id datapath.BackendID) bool {
	for _, v := range r.vips {
		if slices.Contains(v.table, id) {
			return true
		}
	}
	return false
}

// backendID returns the id of endpoint key, allocating one if needed.
func (r *Reconciler) backendID(key netip.AddrPort) (datapath.BackendID, error) {
	if id, ok := r.backendIDs[key]; ok {
		return id, nil
	}
	for range maxBackendID {
		r.nextBackend = r.nextBackend%maxBackendID + 1
		id := datapath.BackendID(r.nextBackend)
		if _, used := r.backends[id]; !used {
			r.backendIDs[key] = id
			return id, nil
		}
	}
	return 0, fmt.Errorf("backend %s: all %d backend ids are in use", key, maxBackendID)
}

// freeVIPID returns an unused VIP id.
func (r *Reconciler) freeVIPID() (datapath.VIPID, error) {
	for range maxVIPID {
		r.nextVIP = r.nextVIP%maxVIPID + 1
		if id := datapath.VIPID(r.nextVIP); !r.vipIDs[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("all %d VIP ids are in use", maxVIPID)
}

func sortedFrontends(d *lb.Desired) []datapath.Frontend {
	out := make([]datapath.Frontend, 0, len(d.Frontends))
	for f := range d.Frontends {
		out = append(out, f)
	}
	slices.SortFunc(out, datapath.Frontend.Compare)
	return out
}

func sortedKeys(m map[netip.AddrPort]bool) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}
