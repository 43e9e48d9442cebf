package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"golang.org/x/sys/unix"
)

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return uint64(ts.Nano())
}

func flowOf(k xlbFlowKey, e xlbCtEntry, now uint64) datapath.Flow {
	f := datapath.Flow{
		Src:     netip.AddrPortFrom(fromWire(k.Src, k.Family), ntohs(k.Sport)),
		Dst:     netip.AddrPortFrom(fromWire(k.Dst, k.Family), ntohs(k.Dport)),
		Proto:   datapath.Protocol(k.Proto),
		Reverse: e.Flags&ctFlagReverse != 0,
		Backend: datapath.BackendID(e.BackendId),
		VIP:     datapath.VIPID(e.VipId),
		VIPPort: ntohs(e.VipPort),
		Closing: e.Flags&ctFlagClosing != 0,
	}
	if now > e.LastSeen {
		f.Idle = time.Duration(now - e.LastSeen)
	}
	return f
}

// Flows returns the conntrack entries, forward (conntrack) and reverse (ct_reverse), expired
// ones included until the LRU reuses them (see Flow.Idle). It reads the tables in batches,
// bucket by bucket, so that entries the datapath inserts and evicts meanwhile (a full table
// under load) cannot make it start over, as a walk key by key does when the key under its cursor
// goes; an entry that moved is listed once.
func (d *Datapath) Flows() ([]datapath.Flow, error) {
	var out []datapath.Flow
	now := monotonicNow()
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"conntrack", d.objs.Conntrack}, {"ct_reverse", d.objs.CtReverse}} {
		flows, err := listFlows(m.m, now)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", m.name, err)
		}
		out = append(out, flows...)
	}
	return out, nil
}

// listFlows reads the entries of a conntrack-shaped map in batches.
func listFlows(m *ebpf.Map, now uint64) ([]datapath.Flow, error) {
	const chunk = 4096
	keys := make([]xlbFlowKey, chunk)
	vals := make([]xlbCtEntry, chunk)
	var cursor ebpf.MapBatchCursor
	seen := map[xlbFlowKey]bool{}
	var out []datapath.Flow
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if !seen[keys[i]] {
				seen[keys[i]] = true
				out = append(out, flowOf(keys[i], vals[i], now))
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// FlushFlows deletes the conntrack entries (forward and reverse) for which match returns true
// (all when match is nil) and returns how many it deleted. Their flows are re-balanced by Maglev
// on their next packet. The handshakes in flight that match (seen as Flows with their SYN's
// backend and VIP) are deleted too, so that their ACKs are re-balanced as well; they are not
// counted.
func (d *Datapath) FlushFlows(match func(datapath.Flow) bool) (int, error) {
	if err := d.flushHandshakes(match); err != nil {
		return 0, err
	}
	defer func() { _ = d.invalidateCaches() }()
	total := 0
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"conntrack", d.objs.Conntrack}, {"ct_reverse", d.objs.CtReverse}} {
		n, err := flushMap(m.m, match)
		total += n
		if err != nil {
			return total, fmt.Errorf("flush %s: %w", m.name, err)
		}
	}
	return total, nil
}

// flushMap deletes the entries of a conntrack-shaped map for which match returns true.
func flushMap(m *ebpf.Map, match func(datapath.Flow) bool) (int, error) {
	now := monotonicNow()
	var keys []xlbFlowKey
	var k xlbFlowKey
	var e xlbCtEntry
	it := m.Iterate()
	for it.Next(&k, &e) {
		if match == nil || match(flowOf(k, e, now)) {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("list: %w", err)
	}
	n := 0
	for i := range keys {
		if err := m.Delete(&keys[i]); err == nil {
			n++
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("delete: %w", err)
		}
	}
	return n, nil
}

// flushHandshakes empties the handshake table's slots whose entries match returns true for (all
// occupied slots when nil). A SYN that takes a slot over while it is emptied loses its entry (its
// ACK falls back to Maglev), as it would to another tuple's SYN.
func (d *Datapath) flushHandshakes(match func(datapath.Flow) bool) error {
	now := monotonicNow()
	var slots []uint32
	err := walkHandshakes(d.objs.HsSlots, func(i uint32, e *xlbHsEntry) {
		if e.Key.Family == 0 {
			return
		}
		if match == nil || match(flowOf(e.Key, xlbCtEntry{LastSeen: synSeen(e.SynTime, now), BackendId: e.BackendId, VipId: e.VipId}, now)) {
			slots = append(slots, i)
		}
	})
	if err != nil {
		return fmt.Errorf("flush handshakes: list: %w", err)
	}
	if d.live.mem == nil {
		return errors.New("flush handshakes: the handshake table is not mapped")
	}
	for _, i := range slots {
		if i < d.live.slots {
			d.live.empty(i) // through the mapping: the slot's live-flow filter bits stay
		}
	}
	return nil
}

// hsSlots is the handshake table's size for Settings.HandshakeSize n: n rounded up to a power
// of two (the datapath masks a tuple's hash), at least 2.
func hsSlots(n uint32) uint32 {
	s := uint32(2)
	for s < n && s < 1<<31 {
		s <<= 1
	}
	return s
}

// walkHandshakes calls fn with every slot of handshake table m, read in batches where the
// kernel can.
func walkHandshakes(m *ebpf.Map, fn func(uint32, *xlbHsEntry)) error {
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]xlbHsEntry, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(keys[i], &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			break // no batch support: one slot at a time, from the start
		}
	}
	var k uint32
	var e xlbHsEntry
	it := m.Iterate()
	for it.Next(&k, &e) {
		fn(k, &e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the handshake table: %w", err)
	}
	return nil
}

// FlowCount returns the number of conntrack entries (expired ones included until the LRU reuses
// them), reading the table in batches.
func (d *Datapath) FlowCount() (int, error) {
	const chunk = 4096
	keys := make([]xlbFlowKey, chunk)
	vals := make([]xlbCtEntry, chunk)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := d.objs.Conntrack.BatchLookup(&cursor, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("count conntrack entries: %w", err)
		}
	}
}

// MaxFlowBackend returns the highest backend id a conntrack entry names (0 if none). A caller
// handing out backend ids starts above it after a restart, so that an id flows may still name is
// not given to another endpoint soon.
func (d *Datapath) MaxFlowBackend() (datapath.BackendID, error) {
	const chunk = 4096
	keys := make([]xlbFlowKey, chunk)
	vals := make([]xlbCtEntry, chunk)
	var cursor ebpf.MapBatchCursor
	var top uint32
	for {
		n, err := d.objs.Conntrack.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			top = max(top, vals[i].BackendId)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return datapath.BackendID(top), nil
		}
		if err != nil {
			return datapath.BackendID(top), fmt.Errorf("read conntrack: %w", err)
		}
	}
}
