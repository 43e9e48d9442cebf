// SPDX-License-Identifier: Apache-2.0
package reconcile

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Apply makes the datapath hold d. It writes in an order that never lets a packet see a state
// in which it would be sent wrong, one phase each:
//
//  1. backends: every endpoint some frontend names, new and changed ones written first;
//  2. ambiguity: reverse entries that become ambiguous, before a table publishes the shared
//     endpoint (its flows must start writing reverse conntrack entries first);
//  3. frontends: VIP configurations and Maglev tables (each table swaps atomically);
//  4. down: backends that failed their health check everywhere go down once no table gives
//     them new flows (marked down earlier, they would drop the old table's new flows);
//  5. reverse: the reverse NAT entries;
//  6. removals: stale reverse entries, frontends and backends, once everything new is in.
//
// Site sources (the side checks' prefixes) are added and changed before phase 1 (a new backend's
// replies must be known as the cluster's before it takes flows) and removed last.
//
// A failed write is reported in the returned error and the rest is still applied; a frontend
// whose backends could not all be written keeps its old table. Calling Apply again retries what
// failed.
func (r *Reconciler) Apply(d *lb.Desired) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := &pass{r: r, d: d, wanted: map[datapath.BackendID]bool{}, broken: map[netip.AddrPort]bool{},
		down: downBackends(d), dsr: dsrBackends(d), ids: map[datapath.Frontend]datapath.VIPID{}}
	a.writeSite()
	a.writeBackends()
	a.markAmbiguous()
	a.writeFrontends()
	a.markDown()
	wantRev := a.writeReverse()
	a.removeReverse(wantRev)
	a.removeFrontends()
	a.removeBackends()
	a.removeSite()
	return a.res, errors.Join(a.errs...)
}

// writeSite adds the site sources d has and the datapath lacks, and corrects changed kinds.
func (a *pass) writeSite() {
	for _, p := range sortedPrefixes(a.d.Site) {
		k := a.d.Site[p]
		if cur, ok := a.r.site[p]; ok && cur == k {
			continue
		}
		if err := a.r.dp.SetSiteSource(p, k); err != nil {
			a.fail(fmt.Errorf("site source %s: %w", p, err))
			continue
		}
		a.r.site[p] = k
		a.res.SiteWritten++
	}
}

// removeSite removes the site sources d no longer has.
func (a *pass) removeSite() {
	for _, p := range sortedPrefixes(a.r.site) {
		if _, ok := a.d.Site[p]; ok {
			continue
		}
		if err := a.r.dp.DeleteSiteSource(p); err != nil {
			a.fail(fmt.Errorf("site source %s: %w", p, err))
			continue
		}
		delete(a.r.site, p)
		a.res.SiteDeleted++
	}
}

// sortedPrefixes returns m's prefixes in order (writes in a stable order, for logs and tests).
func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	return out
}

// pass is one Apply: what it wrote and learnt so far.
type pass struct {
	r   *Reconciler
	d   *lb.Desired
	res Result
	// errs are the failed writes.
	errs []error
	// wanted: the backend ids some frontend names.
	wanted map[datapath.BackendID]bool
	// broken: endpoints whose backend could not be written; their tables and reverse entries
	// keep what the datapath has.
	broken map[netip.AddrPort]bool
	// down: every endpoint the plan names → whether it failed its health check in every
	// frontend using it (then even its established flows move: a dead Pod would black-hole a
	// UDP flow that never goes idle; a draining one keeps them).
	down map[netip.AddrPort]bool
	// dsr: the endpoints served by direct server return (the plan's DSR flag, the same in
	// every frontend: it is the backend's node's).
	dsr map[netip.AddrPort]bool
	// ids: each frontend's VIP id, once it has one in the datapath.
	ids map[datapath.Frontend]datapath.VIPID
}

func (a *pass) fail(err error) { a.errs = append(a.errs, err) }

// downBackends maps every endpoint d names to whether it is Unhealthy in every frontend.
func downBackends(d *lb.Desired) map[netip.AddrPort]bool {
	down := map[netip.AddrPort]bool{}
	for _, p := range d.Frontends {
		for _, b := range p.Backends {
			if isDown, seen := down[b.Key]; !seen || isDown {
				down[b.Key] = b.State == lb.Unhealthy
			}
		}
	}
	return down
}

// dsrBackends returns the endpoints d serves by direct server return.
func dsrBackends(d *lb.Desired) map[netip.AddrPort]bool {
	dsr := map[netip.AddrPort]bool{}
	for _, p := range d.Frontends {
		for _, b := range p.Backends {
			if b.DSR {
				dsr[b.Key] = true
			}
		}
	}
	return dsr
}

// writeBackends is phase 1. A backend is written Down only if it already is: going down waits
// for phase 4.
func (a *pass) writeBackends() {
	r := a.r
	for _, key := range sortedKeys(a.down) {
		fresh := r.backendIDs[key] == 0
		id, err := r.backendID(key)
		if err != nil {
			a.fail(err)
			a.broken[key] = true
			continue
		}
		a.wanted[id] = true
		cur, ok := r.backends[id]
		v := datapath.Backend{Addr: key.Addr(), Port: key.Port(), Down: a.down[key] && ok && cur.Down, DSR: a.dsr[key]}
		if ok && cur == v {
			continue
		}
		if err := r.dp.UpsertBackend(id, v); err != nil {
			a.fail(fmt.Errorf("backend %s: %w", key, err))
			a.broken[key] = true
			if fresh {
				delete(r.backendIDs, key) // the id was never written: forget it
				delete(a.wanted, id)
			}
			continue
		}
		r.backends[id] = v
		a.res.BackendsWritten++
	}
}

// markAmbiguous is phase 2: reverse entries that become ambiguous, without their candidates
// (which name VIP ids: phase 5 writes them).
func (a *pass) markAmbiguous() {
	r := a.r
	for ep, rp := range a.d.Reverse {
		if !rp.Ambiguous || a.broken[netip.AddrPortFrom(ep.Addr, ep.Port)] {
			continue
		}
		if cur, ok := r.reverse[ep]; ok && cur.Ambiguous {
			continue
		}
		v := datapath.ReverseNAT{Ambiguous: true}
		if err := r.dp.SetReverse(ep, v); err != nil {
			a.fail(fmt.Errorf("reverse NAT of %s: %w", ep, err))
			continue
		}
		r.reverse[ep] = v
		a.res.ReverseWritten++
	}
}

// writeFrontends is phase 3: each frontend's configuration, then its table.
func (a *pass) writeFrontends() {
	r := a.r
	for _, f := range sortedFrontends(a.d) {
		p := a.d.Frontends[f]
		cur, exists := r.vips[f]
		id := cur.cfg.ID
		if !exists {
			var err error
			if id, err = r.freeVIPID(); err != nil {
				a.fail(fmt.Errorf("frontend %s: %w", f, err))
				continue
			}
		}
		if exists {
			a.ids[f] = id // its reverse entries stay, whatever fails below
		}
		cfg := normalize(datapath.VIPConfig{ID: id, Affinity: p.Affinity, SourceRanges: p.SourceRanges})
		if !exists || cur.dirty || !sameConfig(cur.cfg, cfg) {
			if err := r.dp.UpsertVIP(f, cfg); err != nil {
				a.fail(fmt.Errorf("frontend %s (service %s): %w", f, p.Service, err))
				if exists {
					// Half-written, perhaps: rewrite it next time even if the config matches.
					cur.dirty = true
					r.vips[f] = cur
				}
				continue
			}
			cur.cfg, cur.dirty = cfg, false
			r.vips[f] = cur
			r.vipIDs[id] = true
			a.res.VIPsWritten++
		}
		a.ids[f] = id
		table, err := a.table(p)
		if err != nil {
			a.fail(fmt.Errorf("frontend %s (service %s): keeping its old table: %w", f, p.Service, err))
			continue
		}
		if slices.Equal(cur.table, table) {
			continue
		}
		if err := r.dp.SetMaglevTable(id, table); err != nil {
			a.fail(fmt.Errorf("frontend %s (service %s): %w", f, p.Service, err))
			continue
		}
		cur.table = table
		r.vips[f] = cur
		a.res.TablesWritten++
	}
}

// table maps a plan's table to backend ids. It fails if a backend the table uses was not written.
func (a *pass) table(p *lb.FrontendPlan) ([]datapath.BackendID, error) {
	ids := make([]datapath.BackendID, len(p.Backends))
	for i, b := range p.Backends {
		if a.broken[b.Key] {
			return nil, fmt.Errorf("backend %s was not written", b.Key)
		}
		ids[i] = a.r.backendIDs[b.Key]
	}
	out := make([]datapath.BackendID, len(p.Table))
	for i, idx := range p.Table {
		if idx >= 0 {
			out[i] = ids[idx]
		}
	}
	return out, nil
}

// markDown is phase 4: backends that failed their health check everywhere go down now that
// the tables leave them out; their established flows move to the others.
func (a *pass) markDown() {
	r := a.r
	for _, key := range sortedKeys(a.down) {
		id := r.backendIDs[key]
		cur, ok := r.backends[id]
		if !a.down[key] || a.broken[key] || !ok || cur.Down {
			continue
		}
		v := cur
		v.Down = true
		if err := r.dp.UpsertBackend(id, v); err != nil {
			a.fail(fmt.Errorf("backend %s: mark down: %w", key, err))
			continue
		}
		r.backends[id] = v
		a.res.BackendsWritten++
	}
}

// writeReverse is phase 5. It returns every reverse entry the datapath should hold now: those
// of the plan, and those it keeps for endpoints or frontends that could not be written.
func (a *pass) writeReverse() map[datapath.Endpoint]datapath.ReverseNAT {
	r := a.r
	want := map[datapath.Endpoint]datapath.ReverseNAT{}
	for ep, rp := range a.d.Reverse {
		if a.broken[netip.AddrPortFrom(ep.Addr, ep.Port)] {
			if cur, ok := r.reverse[ep]; ok {
				want[ep] = cur // keep what the datapath has
			}
			continue
		}
		v := datapath.ReverseNAT{Ambiguous: rp.Ambiguous}
		if rp.Ambiguous {
			v.Candidates = candidateIDs(rp.Candidates, a.ids)
		} else {
			id, ok := a.ids[rp.Frontend]
			if !ok {
				// Its frontend could not be created: keep what the datapath has.
				if cur, ok := r.reverse[ep]; ok {
					want[ep] = cur
				}
				continue
			}
			v.VIP = id
		}
		want[ep] = v
		if cur, ok := r.reverse[ep]; ok && cur == v {
			continue
		}
		if err := r.dp.SetReverse(ep, v); err != nil {
			a.fail(fmt.Errorf("reverse NAT of %s: %w", ep, err))
			continue
		}
		r.reverse[ep] = v
		a.res.ReverseWritten++
	}
	return want
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

// removeReverse is phase 6a: reverse entries not wanted any more.
func (a *pass) removeReverse(want map[datapath.Endpoint]datapath.ReverseNAT) {
	r := a.r
	for ep := range r.reverse {
		if _, ok := want[ep]; ok {
			continue
		}
		if err := r.dp.DeleteReverse(ep); err != nil {
			a.fail(fmt.Errorf("reverse NAT of %s: %w", ep, err))
			continue
		}
		delete(r.reverse, ep)
		a.res.ReverseDeleted++
	}
}

// removeFrontends is phase 6b: frontends not in the plan.
func (a *pass) removeFrontends() {
	r := a.r
	for f, v := range r.vips {
		if _, ok := a.d.Frontends[f]; ok {
			continue
		}
		if err := r.dp.DeleteVIP(f); err != nil {
			a.fail(fmt.Errorf("frontend %s: %w", f, err))
			continue
		}
		delete(r.vipIDs, v.cfg.ID)
		delete(r.vips, f)
		a.res.VIPsDeleted++
	}
}

// removeBackends is phase 6c: backends no frontend names and no table still holds.
func (a *pass) removeBackends() {
	r := a.r
	for id, b := range r.backends {
		if a.wanted[id] || r.referenced(id) {
			continue
		}
		if err := r.dp.DeleteBackend(id); err != nil {
			a.fail(fmt.Errorf("backend %d (%s): %w", id, b.Addr, err))
			continue
		}
		delete(r.backends, id)
		delete(r.backendIDs, netip.AddrPortFrom(b.Addr, b.Port))
		a.res.BackendsDeleted++
	}
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
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}
