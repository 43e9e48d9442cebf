// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Reasons returns every verdict counter summed over CPUs, by name (Reason.String), as
// datapath.Gateway says.
func (d *Datapath) Reasons() (map[string]uint64, error) {
	rs, err := d.ReasonCounts()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(rs))
	for r, n := range rs {
		out[r.String()] = n
	}
	return out, nil
}

// ReasonCounts returns every verdict counter summed over CPUs.
func (d *Datapath) ReasonCounts() (map[Reason]uint64, error) {
	out := make(map[Reason]uint64, numReasons)
	for r := range numReasons {
		var per []uint64
		if err := d.objs.Reasons.Lookup(uint32(r), &per); err != nil {
			return nil, fmt.Errorf("read counter %s: %w", Reason(r), err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[Reason(r)] = sum
	}
	return out, nil
}

func sumTraffic(m *ebpf.Map, id uint32) (datapath.Traffic, error) {
	var per []xlbTraffic
	if err := m.Lookup(id, &per); err != nil {
		return datapath.Traffic{}, err
	}
	var t datapath.Traffic
	for _, v := range per {
		t.Packets += v.Packets
		t.Bytes += v.Bytes
		t.NewFlows += v.NewFlows
	}
	return t, nil
}

// VIPTraffic returns VIP id's counters (client -> VIP packets and the new flows among them).
func (d *Datapath) VIPTraffic(id datapath.VIPID) (datapath.Traffic, error) {
	t, err := sumTraffic(d.objs.VipStats, uint32(id))
	if err != nil {
		return t, fmt.Errorf("read counters of VIP id %d: %w", id, err)
	}
	return t, nil
}

// BackendTraffic returns backend id's counters (packets sent to it).
func (d *Datapath) BackendTraffic(id datapath.BackendID) (datapath.Traffic, error) {
	t, err := sumTraffic(d.objs.BackendStats, uint32(id))
	if err != nil {
		return t, fmt.Errorf("read counters of backend %d: %w", id, err)
	}
	return t, nil
}

func (d *Datapath) zeroTraffic(m *ebpf.Map, id uint32) error {
	zero := make([]xlbTraffic, ebpf.MustPossibleCPU())
	if err := m.Put(id, zero); err != nil {
		return fmt.Errorf("reset counters of id %d: %w", id, err)
	}
	return nil
}
