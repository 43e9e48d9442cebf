// SPDX-License-Identifier: Apache-2.0
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/bench/topo"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// xlbMaglevM is the VIP's Maglev table size (the datapath's default for a service).
const xlbMaglevM = 16381

// XLB is xlb's XDP datapath on both gateway interfaces, with one VIP per protocol (TCP and UDP
// on VIPPort) and one backend (the sink, BackendPort) filling its Maglev table.
type XLB struct {
	// ConntrackSize is the datapath's conntrack capacity; 0 means xdp's default.
	ConntrackSize uint32
	// DSR makes the backend one of direct server return (the row "xlb-dsr"): a packet that
	// opens its flow at the gateway (every SYN of the new mix, the populating pass of the
	// others) gets the carrier; established flows are plain DNAT. The sink counts the frames
	// that arrive with it (Sample.Carried).
	DSR bool
	// Forward, when set, also makes the datapath translate the backend's replies back to the
	// clients (a reverse NAT entry for the backend endpoint): the cps mix's SYN-ACKs.
	Forward bool
	// Log receives the datapath's warnings.
	Log *slog.Logger

	d *gateway.Datapath
}

// Name implements Datapath.
func (x *XLB) Name() string {
	if x.DSR {
		return "xlb-dsr"
	}
	return "xlb"
}

// Start implements Datapath. Nothing is pinned (NoPin): the program and maps live as long as
// this process holds them, so a killed benchmark leaves no XDP program behind. The new-flow rate
// guard is off, so that the established mixes can fill conntrack at full speed.
func (x *XLB) Start(_ context.Context, t *topo.Topology) error {
	d, err := gateway.Load(gateway.Options{NoPin: true, Logger: x.Log, Settings: datapath.Settings{ConntrackSize: x.ConntrackSize, NewFlowRate: -1}})
	if err != nil {
		return fmt.Errorf("start xlb: %w", err)
	}
	if err := configure(d, x.DSR); err != nil {
		return errors.Join(fmt.Errorf("start xlb: %w", err), d.Close())
	}
	if x.Forward {
		ep := datapath.Endpoint{Addr: topo.Backend, Port: BackendPort, Proto: datapath.TCP}
		if err := d.SetReverse(ep, datapath.ReverseNAT{VIP: 1}); err != nil {
			return errors.Join(fmt.Errorf("start xlb: %w", err), d.Close())
		}
	}
	if err := attachGateway(t, func(ifname string, role datapath.Role) error { return d.Attach(ifname, datapath.AttachNative, role) }); err != nil {
		return errors.Join(fmt.Errorf("start xlb: %w", err), d.Close())
	}
	x.d = d
	return nil
}

// attachGateway runs attach for both gateway interfaces (in, then out) in the gateway's
// namespace.
func attachGateway(t *topo.Topology, attach func(ifname string, role datapath.Role) error) error {
	return t.Gateway.Do(func() error {
		for ifname, role := range map[string]datapath.Role{t.GwIn: datapath.RoleClient, t.GwOut: datapath.RoleCluster} {
			if err := attach(ifname, role); err != nil {
				return err
			}
		}
		return nil
	})
}

// configurer is what XLB and AFXDP configure their datapath through.
type configurer interface {
	UpsertVIP(datapath.Frontend, datapath.VIPConfig) error
	UpsertBackend(datapath.BackendID, datapath.Backend) error
	SetMaglevTable(datapath.VIPID, []datapath.BackendID) error
}

// configure gives d one VIP per protocol (TCP and UDP on VIPPort) with one backend (the sink,
// BackendPort) filling its Maglev table; dsr makes it a backend of direct server return.
func configure(d configurer, dsr bool) error {
	for i, proto := range []datapath.Protocol{datapath.TCP, datapath.UDP} {
		id, bid := datapath.VIPID(i+1), datapath.BackendID(i+1)
		fe := datapath.Frontend{Addr: topo.VIP, Port: VIPPort, Proto: proto}
		if err := d.UpsertVIP(fe, datapath.VIPConfig{ID: id}); err != nil {
			return err
		}
		if err := d.UpsertBackend(bid, datapath.Backend{Addr: topo.Backend, Port: BackendPort, DSR: dsr}); err != nil {
			return err
		}
		table := make([]datapath.BackendID, xlbMaglevM)
		for j := range table {
			table[j] = bid
		}
		if err := d.SetMaglevTable(id, table); err != nil {
			return err
		}
	}
	return nil
}

// Drops implements Datapath: every pass_* and drop_* verdict counter (frames xlb did not
// forward itself).
func (x *XLB) Drops() (map[string]uint64, error) {
	if x.d == nil {
		return nil, nil
	}
	rs, err := x.d.Reasons()
	if err != nil {
		return nil, fmt.Errorf("xlb drops: %w", err)
	}
	out := map[string]uint64{}
	for name, n := range rs {
		if strings.HasPrefix(name, "pass_") || strings.HasPrefix(name, "drop_") {
			out["xlb."+name] = n
		}
	}
	return out, nil
}

// Replies implements replier.
func (x *XLB) Replies() bool { return x.Forward }

// Programs implements programmed: the program attached to both interfaces (its tail calls run
// inside its bpf_stats).
func (x *XLB) Programs() []*ebpf.Program {
	if x.d == nil {
		return nil
	}
	return []*ebpf.Program{x.d.Program()}
}

// Flows is the number of conntrack entries.
func (x *XLB) Flows() (int, error) {
	if x.d == nil {
		return 0, nil
	}
	return x.d.FlowCount()
}

// Stop implements Datapath: closing an unpinned datapath detaches it.
func (x *XLB) Stop() error {
	if x.d == nil {
		return nil
	}
	err := x.d.Close()
	x.d = nil
	return err
}
