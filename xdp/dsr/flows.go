// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Flow is one recorded flow: the Pod's replies to Client from Pod get VIP as their source.
type Flow struct {
	// Pod is the endpoint the flow was sent to (the replies' original source).
	Pod netip.AddrPort
	// Client is the client (the replies' destination).
	Client netip.AddrPort
	Proto  datapath.Protocol
	// VIP is the frontend the client sent to: the replies' new source.
	VIP netip.AddrPort
	// Idle is how long ago the flow last had a carried packet or a reply (refreshed at most
	// once a second). Past Options' timeout its replies are no longer rewritten.
	Idle time.Duration
	// HalfOpen marks a TCP flow of which the node saw the carried SYN and not yet the
	// handshake's ACK (it is in the half_open table, not in flows; docs/dsr.md).
	HalfOpen bool
}

// Flows returns the recorded flows, half-open ones included (HalfOpen), sorted by Pod, client,
// protocol and half-openness. The LRUs may hold flows long idle (they go when room is needed).
func (d *Datapath) Flows() ([]Flow, error) { return readFlows(d.objs.Flows, d.objs.HalfOpen) }

// readFlows reads and sorts the flows of flows and, when not nil, half-open.
func readFlows(flows, halfOpen *ebpf.Map) ([]Flow, error) {
	now, err := coarseNow()
	if err != nil {
		return nil, err
	}
	var out []Flow
	for _, t := range []struct {
		m    *ebpf.Map
		half bool
	}{{flows, false}, {halfOpen, true}} {
		if t.m == nil {
			continue
		}
		var k dsrFlowKey
		var v dsrFlowValue
		it := t.m.Iterate()
		for it.Next(&k, &v) {
			f := Flow{
				Pod:      netip.AddrPortFrom(datapath.AddrFromWire(k.Pod.W, k.Family), datapath.WirePort(k.PodPort)),
				Client:   netip.AddrPortFrom(datapath.AddrFromWire(k.Client.W, k.Family), datapath.WirePort(k.ClientPort)),
				Proto:    datapath.Protocol(k.Proto),
				VIP:      netip.AddrPortFrom(datapath.AddrFromWire(v.Vip.W, k.Family), datapath.WirePort(v.VipPort)),
				HalfOpen: t.half,
			}
			if now > v.SeenNs {
				f.Idle = time.Duration(now - v.SeenNs)
			}
			out = append(out, f)
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("dsr: read flows (half-open: %t): %w", t.half, err)
		}
	}
	slices.SortFunc(out, func(a, b Flow) int {
		if c := a.Pod.Compare(b.Pod); c != 0 {
			return c
		}
		if c := a.Client.Compare(b.Client); c != 0 {
			return c
		}
		if c := int(a.Proto) - int(b.Proto); c != 0 {
			return c
		}
		if a.HalfOpen == b.HalfOpen {
			return 0
		}
		if a.HalfOpen {
			return 1
		}
		return -1
	})
	return out, nil
}

// coarseNow is the clock the programs stamp entries with (bpf_ktime_get_coarse_ns).
func coarseNow() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("dsr: read the clock: %w", err)
	}
	return uint64(ts.Nano()), nil
}
