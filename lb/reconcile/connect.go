// SPDX-License-Identifier: Apache-2.0
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

// ConnectReconciler applies the node agent's plans (lb.PlanConnect) to a socket load balancer:
// the one owner of its frontends, diff-based (an equal frontend is not written), idempotent,
// and on start it adopts what the datapath holds (an earlier agent's pins) instead of wiping
// it. Its methods are safe for concurrent use.
type ConnectReconciler struct {
	mu  sync.Mutex
	dp  datapath.Connect
	log *slog.Logger
	// held: what the datapath holds, as last written or read back (a frontend read back
	// damaged has a zero AddrPort in place of each endpoint it lost, and so equals no plan).
	held map[datapath.Frontend]datapath.ConnectFrontend
}

// ConnectResult counts what one ConnectReconciler.Apply did, by frontend.
type ConnectResult struct {
	// Added, Updated and Removed count the frontends written or removed; Unchanged those equal
	// to the plan, not written. A frontend whose write failed is in none of them.
	Added, Updated, Removed, Unchanged int
	// UDPLost counts the UDP frontends, among the updated and removed, that lost an endpoint
	// (one read back damaged counts): connected sockets may still be sent there, for
	// datapath.SocketLB.CloseLostUDP to close.
	UDPLost int
}

// Changes is the number of frontends written or removed.
func (r ConnectResult) Changes() int { return r.Added + r.Updated + r.Removed }

// NewConnect adopts what dp holds (left by an earlier agent, or nothing) and returns a
// reconciler for it.
func NewConnect(dp datapath.Connect, log *slog.Logger) (*ConnectReconciler, error) {
	if log == nil {
		log = slog.Default()
	}
	held, err := dp.ConnectFrontends()
	if err != nil {
		return nil, fmt.Errorf("adopt the socket load balancer's frontends: %w", err)
	}
	if held == nil {
		held = map[datapath.Frontend]datapath.ConnectFrontend{}
	}
	damaged := 0
	for f, cf := range held {
		cf.Endpoints = slices.Clone(cf.Endpoints)
		held[f] = cf
		if slices.Contains(cf.Endpoints, netip.AddrPort{}) {
			damaged++
		}
	}
	log.Debug("adopted the socket load balancer's frontends", "frontends", len(held), "damaged", damaged)
	return &ConnectReconciler{dp: dp, log: log, held: held}, nil
}

// Apply makes the datapath hold plan. Frontends not in plan are removed first (their room is
// then free), then new and changed ones are written in order (datapath.Frontend.Compare), then
// the pass is committed: complete when every write succeeded. Equal frontends are not touched.
// A write that fails is reported in the joined error and the datapath keeps what it had for
// that frontend; the others are applied, and the next Apply tries it again.
func (r *ConnectReconciler) Apply(plan lb.ConnectPlan) (ConnectResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res ConnectResult
	var errs []error

	// What to write: only those frontends are sorted, so that an Apply of one change among
	// many stays cheap. The frontends to remove are looked for only when the plan does not
	// cover every one held.
	var fronts []datapath.Frontend
	covered := 0
	for f, cf := range plan {
		cur, had := r.held[f]
		if had {
			covered++
			if cur.Equal(cf) {
				res.Unchanged++
				continue
			}
		}
		fronts = append(fronts, f)
	}
	var gone []datapath.Frontend
	if covered < len(r.held) {
		for f := range r.held {
			if _, keep := plan[f]; !keep {
				gone = append(gone, f)
			}
		}
	}

	// Removals first: their room is then free.
	slices.SortFunc(gone, datapath.Frontend.Compare)
	for _, f := range gone {
		if err := r.dp.DeleteConnectFrontend(f); err != nil {
			errs = append(errs, fmt.Errorf("remove frontend %s: %w", f, err))
			continue
		}
		if f.Proto == datapath.UDP && len(r.held[f].Endpoints) > 0 {
			res.UDPLost++
		}
		delete(r.held, f)
		res.Removed++
	}

	slices.SortFunc(fronts, datapath.Frontend.Compare)
	for _, f := range fronts {
		cf := plan[f]
		if err := r.dp.SetConnectFrontend(f, cf); err != nil {
			errs = append(errs, fmt.Errorf("frontend %s: %w", f, err))
			continue
		}
		cur, had := r.held[f]
		r.held[f] = datapath.ConnectFrontend{Endpoints: slices.Clone(cf.Endpoints), AffinityTimeout: cf.AffinityTimeout}
		if !had {
			res.Added++
			continue
		}
		res.Updated++
		if f.Proto == datapath.UDP && slices.ContainsFunc(cur.Endpoints, func(e netip.AddrPort) bool {
			return !slices.Contains(cf.Endpoints, e)
		}) {
			res.UDPLost++
		}
	}

	if err := r.dp.Commit(len(errs) == 0); err != nil {
		errs = append(errs, fmt.Errorf("commit: %w", err))
	}
	return res, errors.Join(errs...)
}

// Frontends returns how many frontends the datapath holds.
func (r *ConnectReconciler) Frontends() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}
