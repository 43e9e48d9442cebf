// SPDX-License-Identifier: Apache-2.0
package reconcile

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// DSRReconciler applies the {frontend, local endpoint} pairs a node accepts carriers for
// (lb.DSRServices) to the node side of direct server return: the one owner of its pairs,
// diff-based (a pair held is not written again), idempotent, and on start it adopts what the
// datapath holds (an earlier agent's pins) instead of wiping it, so a restarted agent never
// drops a carrier it accepted before. Its methods are safe for concurrent use.
type DSRReconciler struct {
	mu  sync.Mutex
	dp  datapath.DSRNode
	log *slog.Logger
	// held: the pairs the datapath holds, as last written or read back at start.
	held map[datapath.DSRService]bool
}

// DSRResult counts what one DSRReconciler.Apply did.
type DSRResult struct {
	// Added and Removed count the pairs written and deleted; Unchanged those held and wanted,
	// not written. A pair whose write failed is in none of them.
	Added, Removed, Unchanged int
}

// Changes is the number of pairs written or deleted.
func (r DSRResult) Changes() int { return r.Added + r.Removed }

// NewDSR adopts the pairs dp holds (left by an earlier agent, or none) and returns a reconciler
// for it.
func NewDSR(dp datapath.DSRNode, log *slog.Logger) (*DSRReconciler, error) {
	if log == nil {
		log = slog.Default()
	}
	held, err := dp.DSRServices()
	if err != nil {
		return nil, fmt.Errorf("adopt the node side of direct server return's pairs: %w", err)
	}
	held = maps.Clone(held)
	if held == nil {
		held = map[datapath.DSRService]bool{}
	}
	log.Debug("adopted the direct server return pairs", "pairs", len(held))
	return &DSRReconciler{dp: dp, log: log, held: held}, nil
}

// Apply makes the datapath hold exactly the pairs of want (those mapped to true). Pairs not
// wanted are deleted first (their room is then free: the datapath holds a bounded number),
// then the new ones are added, each in order (frontend, then endpoint). Pairs held and wanted
// are not touched, so a carrier for them is never refused in between. A write that fails is
// reported in the joined error and the datapath keeps what it had for that pair; the others
// are applied, and the next Apply tries it again.
func (r *DSRReconciler) Apply(want map[datapath.DSRService]bool) (DSRResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res DSRResult
	var errs []error
	var add, gone []datapath.DSRService
	for s, ok := range want {
		if !ok {
			continue
		}
		if r.held[s] {
			res.Unchanged++
			continue
		}
		add = append(add, s)
	}
	for s := range r.held {
		if !want[s] {
			gone = append(gone, s)
		}
	}
	slices.SortFunc(gone, compareDSR)
	for _, s := range gone {
		if err := r.dp.DeleteDSRService(s); err != nil {
			errs = append(errs, fmt.Errorf("delete direct server return pair %s -> %s: %w", s.Frontend, s.Endpoint, err))
			continue
		}
		delete(r.held, s)
		res.Removed++
	}
	slices.SortFunc(add, compareDSR)
	for _, s := range add {
		if err := r.dp.AddDSRService(s); err != nil {
			errs = append(errs, fmt.Errorf("add direct server return pair %s -> %s: %w", s.Frontend, s.Endpoint, err))
			continue
		}
		r.held[s] = true
		res.Added++
	}
	return res, errors.Join(errs...)
}

// Pairs returns how many pairs the datapath holds.
func (r *DSRReconciler) Pairs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// compareDSR orders pairs by frontend, then endpoint.
func compareDSR(a, b datapath.DSRService) int {
	if c := a.Frontend.Compare(b.Frontend); c != 0 {
		return c
	}
	return a.Endpoint.Compare(b.Endpoint)
}
