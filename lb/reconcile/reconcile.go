// SPDX-License-Identifier: Apache-2.0

// Package reconcile drives xlb's datapaths from the desired states the lb model computes:
// Reconciler a gateway's (lb.Plan: VIPs, backends, Maglev tables, reverse NAT) and
// ConnectReconciler the node agent's socket load balancer (lb.PlanConnect: cluster IP frontends
// and their endpoints). Each is the one owner of its datapath's state: diff-based (what is
// already right is not written), idempotent, and on start it adopts what an earlier process
// left (the XDP datapath's pinned maps, the socket load balancer's pins) instead of wiping it.
//
// It knows datapaths only through the contract (xdp/datapath). The tests run the reconcilers
// against the pure-Go balancer (xdp/forward) and an in-memory socket load balancer, without
// root; the kernel datapaths' conformance to the contract is tested in their own packages and in
// internal/conformance.
package reconcile

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Reconciler applies desired states to a gateway datapath. Its methods are safe for concurrent
// use.
type Reconciler struct {
	mu  sync.Mutex
	dp  datapath.Services
	log *slog.Logger

	// vips: frontend → what the datapath holds for it (its id, configuration, table).
	vips map[datapath.Frontend]vipState
	// vipIDs: the ids in vips.
	vipIDs map[datapath.VIPID]bool
	// backends: backend id → its value in the datapath.
	backends map[datapath.BackendID]datapath.Backend
	// backendIDs: endpoint (address, target port) → backend id; the inverse of backends.
	backendIDs map[netip.AddrPort]datapath.BackendID
	// reverse: the datapath's reverse NAT entries.
	reverse map[datapath.Endpoint]datapath.ReverseNAT
	// site: the datapath's site sources.
	site map[netip.Prefix]datapath.SiteKind
	// nextVIP, nextBackend: where the search for a free id starts. Ids are handed out in a
	// circle, so a deleted id (which conntrack may still name) is reused as late as possible.
	nextVIP, nextBackend uint32
}

// vipState is what the datapath holds for one frontend.
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
	SiteWritten, SiteDeleted         int
}

// Changes is the total number of writes.
func (r Result) Changes() int {
	return r.VIPsWritten + r.VIPsDeleted + r.TablesWritten + r.BackendsWritten + r.BackendsDeleted +
		r.ReverseWritten + r.ReverseDeleted + r.SiteWritten + r.SiteDeleted
}

// New adopts the state in dp (left by an earlier process, or empty) and returns a reconciler.
func New(dp datapath.Services, log *slog.Logger) (*Reconciler, error) {
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
	if r.site, err = dp.SiteSources(); err != nil {
		return nil, fmt.Errorf("adopt datapath state: %w", err)
	}
	log.Info("adopted datapath state", "vips", len(r.vips), "backends", len(r.backends),
		"reverse", len(r.reverse), "site_sources", len(r.site))
	return r, nil
}

// Serving returns the endpoints of the backends the datapath's Maglev tables use: those that
// take new flows (an earlier process left them in service). Backends only in the backends map
// (held out, but kept for their established flows) are not among them.
func (r *Reconciler) Serving() map[netip.AddrPort]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[netip.AddrPort]bool{}
	for _, v := range r.vips {
		for _, id := range v.table {
			if b, ok := r.backends[id]; ok {
				out[netip.AddrPortFrom(b.Addr, b.Port)] = true
			}
		}
	}
	return out
}

// normalize sorts and compacts a configuration's source ranges, so that configurations compare
// equal whatever order the datapath reads them back in.
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

// backendID returns the id of endpoint key, allocating one if needed.
func (r *Reconciler) backendID(key netip.AddrPort) (datapath.BackendID, error) {
	if id, ok := r.backendIDs[key]; ok {
		return id, nil
	}
	const top = datapath.MaxBackends - 1
	for range top {
		r.nextBackend = r.nextBackend%top + 1
		id := datapath.BackendID(r.nextBackend)
		if _, used := r.backends[id]; !used {
			r.backendIDs[key] = id
			return id, nil
		}
	}
	return 0, fmt.Errorf("backend %s: all %d backend ids are in use: %w", key, top, datapath.ErrFull)
}

// freeVIPID returns an unused VIP id.
func (r *Reconciler) freeVIPID() (datapath.VIPID, error) {
	const top = datapath.MaxVIPs - 1
	for range top {
		r.nextVIP = r.nextVIP%top + 1
		if id := datapath.VIPID(r.nextVIP); !r.vipIDs[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("all %d VIP ids are in use: %w", top, datapath.ErrFull)
}
