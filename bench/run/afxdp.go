// SPDX-License-Identifier: Apache-2.0
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/xlb-dev/xlb/bench/topo"
	"github.com/xlb-dev/xlb/xdp/afxdp"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// AFXDP is xlb's AF_XDP datapath on both gateway interfaces, configured as XLB is (one VIP per
// protocol, the sink as the one backend), its worker pinned to the gateway's CPU.
type AFXDP struct {
	// CPU is the gateway's CPU, where the worker runs.
	CPU int
	// Log receives the datapath's warnings.
	Log *slog.Logger

	d *afxdp.Datapath
}

// Name implements Datapath.
func (x *AFXDP) Name() string { return "afxdp" }

// Start implements Datapath. As for XLB, the new-flow rate guard is off.
func (x *AFXDP) Start(_ context.Context, t *topo.Topology) error {
	d, err := afxdp.Load(afxdp.Config{Engine: datapath.Settings{ConntrackSize: 1 << 21, NewFlowRate: -1},
		PinWorker: true, WorkerCPU: x.CPU, Logger: x.Log})
	if err != nil {
		return fmt.Errorf("start afxdp: %w", err)
	}
	if err := configure(d, false); err != nil {
		return errors.Join(fmt.Errorf("start afxdp: %w", err), d.Close())
	}
	if err := attachGateway(t, func(ifname string, role datapath.Role) error { return d.Attach(ifname, datapath.AttachAuto, role) }); err != nil {
		return errors.Join(fmt.Errorf("start afxdp: %w", err), d.Close())
	}
	x.d = d
	return nil
}

// Drops implements Datapath: the engine's drop_* counters (frames it did not forward).
func (x *AFXDP) Drops() (map[string]uint64, error) {
	if x.d == nil {
		return nil, nil
	}
	out := map[string]uint64{}
	for r, n := range x.d.ReasonCounts() {
		if strings.HasPrefix(r.String(), "drop_") {
			out["afxdp."+r.String()] = n
		}
	}
	st, err := x.d.SocketStats()
	if err != nil {
		return nil, fmt.Errorf("afxdp drops: %w", err)
	}
	for k, n := range st {
		out["afxdp."+k] = n
	}
	return out, nil
}

// UserspaceWorker implements userspaceWorker: the engine forwards in this process, on the
// gateway's CPU.
func (x *AFXDP) UserspaceWorker() bool { return true }

// Stop implements Datapath.
func (x *AFXDP) Stop() error {
	if x.d == nil {
		return nil
	}
	err := x.d.Close()
	x.d = nil
	return err
}

// Flows is the number of conntrack entries.
func (x *AFXDP) Flows() (int, error) {
	if x.d == nil {
		return 0, nil
	}
	return x.d.FlowCount()
}
