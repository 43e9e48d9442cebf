// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// DSROptions configure the agent's side of direct server return (docs/agent.md, docs/dsr.md).
type DSROptions struct {
	// Datapath is the node side (xdp/dsr), loaded, an earlier agent's pins adopted; required.
	// Run owns it: when Run returns, whatever happened, it closes it (what is pinned keeps
	// serving), or removes it with Options.Cleanup or without PinPath.
	Datapath datapath.DSRDatapath
	// Uplinks are the interfaces where the gateways' packets arrive and the Pods' replies to
	// clients leave: both programs are attached to each. At least one. Other interfaces the
	// datapath holds (an earlier agent's uplinks) are detached at the first pass.
	Uplinks []string
	// PinPath is where Datapath is pinned, for the log; "" means nothing is pinned: direct
	// server return stops with the agent, so Run removes the datapath at exit.
	PinPath string
	// NoHairpin leaves the interfaces toward the node's Pods alone. By default the reply
	// rewriter (egress) is attached to them too: a client Pod whose connection to a VIP was
	// sent to a Pod on its own node gets the replies routed inside the node, past the uplinks.
	NoHairpin bool
	// Routes finds those interfaces; nil means NodeRoutes (the node's routing tables).
	Routes Routes
	// Rescan is how often the interfaces toward the Pods are looked for again between passes
	// (Pods come and go without any Service changing); 0 means DefaultRescan.
	Rescan time.Duration
}

// DefaultRescan is DSROptions.Rescan's default.
const DefaultRescan = 2 * time.Second

// dsrSide is the agent's side of direct server return: the pairs its node accepts carriers
// for (through reconcile.DSRReconciler) and where the programs are attached.
type dsrSide struct {
	opts   DSROptions
	rec    *reconcile.DSRReconciler
	log    *slog.Logger
	routes Routes

	// mu guards every call into opts.Datapath (it is not safe for concurrent use: the pass,
	// the rescan and /metrics share it) and the fields below.
	mu sync.Mutex
	// targets are the node's Pods (addresses and Pod CIDRs) as the last pass saw them; synced
	// says a pass set them.
	targets []netip.Prefix
	synced  bool
	// hairpin: the interfaces toward the Pods that have the egress program, as last synced.
	hairpin []string
	// lastIfErr is the interface errors last logged, so each is logged once.
	lastIfErr string
	// applied says a pass applied the pairs (for /healthz).
	applied atomic.Bool
}

// newDSRSide adopts the pairs opts.Datapath holds and attaches both programs to the uplinks.
// On error the caller still owns (and stops) the datapath.
func newDSRSide(opts DSROptions, log *slog.Logger) (*dsrSide, error) {
	if opts.Datapath == nil {
		return nil, errors.New("agent: direct server return: no datapath")
	}
	if len(opts.Uplinks) == 0 {
		return nil, errors.New("agent: direct server return: no uplink interface to attach to")
	}
	if opts.Rescan <= 0 {
		opts.Rescan = DefaultRescan
	}
	d := &dsrSide{opts: opts, log: log, routes: opts.Routes}
	if d.routes == nil {
		d.routes = NodeRoutes{}
	}
	var err error
	if d.rec, err = reconcile.NewDSR(opts.Datapath, log); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	for _, up := range opts.Uplinks {
		if err := opts.Datapath.Attach(up, datapath.DSRBoth); err != nil {
			return nil, fmt.Errorf("agent: direct server return on uplink %s: %w", up, err)
		}
	}
	log.Info("direct server return attached", "uplinks", opts.Uplinks, "pairs", d.rec.Pairs(),
		"pin_path", opts.PinPath, "hairpin", !opts.NoHairpin)
	return d, nil
}

// apply makes the datapath accept exactly pairs, and attaches the egress program to the
// interfaces toward the node's Pods (targets: their addresses and CIDRs). Its error (pairs that
// could not be written, an uplink that could not be attached) has the pass applied again
// later; interfaces toward Pods that could not be attached are logged and retried at the next
// rescan.
func (d *dsrSide) apply(pairs map[datapath.DSRService]bool, targets []netip.Prefix) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	res, err := d.rec.Apply(pairs)
	if res.Changes() > 0 {
		d.log.Info("direct server return pairs applied", "pairs", d.rec.Pairs(), "added", res.Added, "removed", res.Removed)
	}
	d.targets, d.synced = targets, true
	err = errors.Join(err, d.syncInterfaces())
	d.applied.Store(true)
	return err
}

// rescanLoop looks for the interfaces toward the node's Pods again every Rescan, until ctx ends.
func (d *dsrSide) rescanLoop(ctx context.Context) {
	t := time.NewTicker(d.opts.Rescan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		if d.synced {
			if err := d.syncInterfaces(); err != nil {
				d.log.Error("direct server return: attaching to the uplinks", "err", err)
			}
		}
		d.mu.Unlock()
	}
}

// syncInterfaces makes the attachments what they should be: both directions on the uplinks,
// egress on the interfaces toward the Pods, nothing elsewhere. It returns the uplinks' errors;
// the others are logged when they change. d.mu must be held.
func (d *dsrSide) syncInterfaces() error {
	dp := d.opts.Datapath
	want := map[string]datapath.DSRDirection{}
	for _, up := range d.opts.Uplinks {
		want[up] = datapath.DSRBoth
	}
	var soft []error // interfaces toward Pods: logged, retried at the next rescan
	var hairpin []string
	if !d.opts.NoHairpin {
		ifs, err := d.routes.Interfaces(d.targets)
		if err != nil {
			soft = append(soft, err)
			hairpin = d.hairpin // keep them attached rather than detach on a failed look-up
		} else {
			hairpin = ifs
		}
		for _, n := range hairpin {
			if want[n] == 0 {
				want[n] = datapath.DSREgress
			}
		}
	}
	var hard []error
	have := dp.Interfaces()
	for _, n := range slices.Sorted(maps.Keys(have)) {
		if extra := have[n] &^ want[n]; extra != 0 {
			if err := dp.Detach(n, extra); err != nil {
				soft = append(soft, err)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if err := dp.Attach(n, want[n]); err != nil {
			if want[n] == datapath.DSRBoth {
				hard = append(hard, err)
			} else {
				soft = append(soft, err)
			}
		}
	}
	hairpin = slices.DeleteFunc(slices.Clone(hairpin), func(n string) bool { return slices.Contains(d.opts.Uplinks, n) })
	if added, removed := diffNames(d.hairpin, hairpin); len(added)+len(removed) > 0 {
		d.log.Info("direct server return: reply rewriter on the interfaces toward the node's Pods",
			"interfaces", len(hairpin), "added", added, "removed", removed)
	}
	d.hairpin = hairpin
	if msg := errors.Join(soft...); msg == nil {
		d.lastIfErr = ""
	} else if msg.Error() != d.lastIfErr {
		d.lastIfErr = msg.Error()
		d.log.Warn("direct server return: interfaces toward the node's Pods (retried)", "err", msg)
	}
	return errors.Join(hard...)
}

// diffNames returns the names of b not in a, and of a not in b.
func diffNames(a, b []string) (added, removed []string) {
	for _, n := range b {
		if !slices.Contains(a, n) {
			added = append(added, n)
		}
	}
	for _, n := range a {
		if !slices.Contains(b, n) {
			removed = append(removed, n)
		}
	}
	return added, removed
}

// stop closes the datapath, or removes it (remove: Cleanup, or nothing pinned).
func (d *dsrSide) stop(remove bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if remove {
		if err := d.opts.Datapath.Remove(); err != nil {
			d.log.Error("detaching direct server return", "err", err)
		}
		d.log.Info("direct server return stopped: carriers are no longer accepted on this node")
		return
	}
	if err := d.opts.Datapath.Close(); err != nil {
		d.log.Error("closing direct server return", "err", err)
	}
	d.log.Info("direct server return stays as last applied", "pin_path", d.opts.PinPath)
}

// dsrStats is what /metrics shows of the side.
type dsrStats struct {
	pairs      int
	interfaces map[datapath.DSRDirection]int // attached interfaces by direction
	counters   map[string]uint64
	err        error
}

// stats reads the side's state and counters.
func (d *dsrSide) stats() dsrStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := dsrStats{pairs: d.rec.Pairs(), interfaces: map[datapath.DSRDirection]int{}}
	for _, dir := range d.opts.Datapath.Interfaces() {
		s.interfaces[dir]++
	}
	s.counters, s.err = d.opts.Datapath.Counters()
	return s
}

// localTargets returns the addresses of the backends of services local says are on this node,
// as single-address prefixes, sorted, each once.
func localTargets(services []lb.Service, local func(lb.Backend) bool) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range services {
		for _, b := range s.Backends {
			if local(b) {
				a := b.Addr.Unmap()
				out = append(out, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
	return sortPrefixes(out)
}

// sortPrefixes sorts ps by address, then length, and drops repeats.
func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	return slices.Compact(ps)
}
