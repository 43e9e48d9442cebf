// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// File mode retries a pass whose pairs could not all be written after fileRetry, doubling up
// to maxFileRetry.
const (
	fileRetry    = time.Second
	maxFileRetry = 30 * time.Second
)

// runFile serves direct server return from the gateways' YAML file until ctx ends: the pairs of
// its services' backends on this node (whose dsr is true), the file read again at each Reload.
// A file that cannot be read at start keeps the agent from starting; at a reload it is logged
// and the last good pairs keep serving.
func (a *agent) runFile(ctx context.Context) error {
	cfg, err := config.Load(a.opts.ConfigPath)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	delay := fileRetry
	pass := func() {
		if err := a.applyFile(cfg); err != nil {
			a.log.Error("applying direct server return failed; retrying", "err", err, "in", delay)
			retry.Reset(delay)
			delay = min(2*delay, maxFileRetry)
			return
		}
		retry.Stop()
		delay = fileRetry
	}
	a.noteFile(cfg)
	pass()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.opts.Reload:
			next, err := config.Load(a.opts.ConfigPath)
			if err != nil {
				a.log.Error("config reload rejected; still serving the previous pairs", "config", a.opts.ConfigPath, "err", err)
				continue
			}
			cfg = next
			a.log.Info("config reloaded", "config", a.opts.ConfigPath, "services", len(cfg.Services))
			a.noteFile(cfg)
			delay = fileRetry
			pass()
		case <-retry.C:
			pass()
		}
	}
}

// fileLocal reports whether backend b of the file is served by this node's side of direct
// server return: on this node, and not marked dsr: false.
func (a *agent) fileLocal(b lb.Backend) bool { return b.Node == a.opts.Node && b.DSR }

// applyFile applies the pairs of cfg's backends on this node, and the interfaces toward them
// (every backend on this node is a Pod that may be the client of a hairpin).
func (a *agent) applyFile(cfg *config.Config) error {
	pairs := lb.DSRServices(cfg.Services, a.fileLocal)
	return a.dsr.apply(pairs, localTargets(cfg.Services, a.isLocal))
}

// noteFile logs what in cfg a user may not expect: no backend on this node (a wrong --node?),
// or gateways that carry nothing yet.
func (a *agent) noteFile(cfg *config.Config) {
	n, dsr := 0, 0
	for _, s := range cfg.Services {
		for _, b := range s.Backends {
			if a.isLocal(b) {
				n++
				if b.DSR {
					dsr++
				}
			}
		}
	}
	if n == 0 {
		a.log.Warn("no backend of the file is on this node (services[].backends[].node): no carrier is accepted", "node", a.opts.Node)
	} else if dsr < n {
		a.log.Info("backends of this node marked dsr: false are not served by direct server return", "node", a.opts.Node, "backends", n, "dsr", dsr)
	}
	if cfg.Datapath.Forwarding.Mode != datapath.DSR {
		a.log.Info("the file's datapath.forwarding is not dsr: the gateways carry nothing to this node yet (its pairs are ready for when they do)")
	}
}
