// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
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

// The state byte of a handshake slot (bpf/consts.h, HS_ST_*: the first padding byte of its key).
const (
	hsStConn    = 1 << 0 // the slot holds a connection whose handshake completed
	hsStClosing = 1 << 1 // of that connection, a FIN or RST seen
)

// slotConnEntry returns the connection handshake slot e holds (state hsStConn) as the conntrack
// entry the datapath's hs_promote would make of it at time now (its key's padding zero), with how
// long it has been idle (slotAge), and false when the slot holds none (empty, a handshake in
// flight, a first datagram). Callers judge idleness by the age, never by now - LastSeen: a slot's
// LastSeen is 0 when its age reaches back before the clock's zero.
func slotConnEntry(e *xlbHsEntry, now uint64) (xlbFlowKey, xlbCtEntry, time.Duration, bool) {
	if e.Key.Family == 0 || e.Key.Pad[0]&hsStConn == 0 {
		return xlbFlowKey{}, xlbCtEntry{}, 0, false
	}
	k := e.Key
	k.Pad = [2]uint8{}
	age := slotAge(e.SynTime, now)
	ce := xlbCtEntry{LastSeen: readingBefore(now, age), BackendId: e.BackendId, VipId: e.VipId, VipPort: k.Dport}
	if e.Key.Pad[0]&hsStClosing != 0 {
		ce.Flags = ctFlagClosing
	}
	return k, ce, age, true
}

// slotConn is slotConnEntry as a forward Flow with InSlot set.
func slotConn(e *xlbHsEntry, now uint64) (xlbFlowKey, datapath.Flow, bool) {
	k, ce, age, ok := slotConnEntry(e, now)
	if !ok {
		return k, datapath.Flow{}, false
	}
	f := flowOf(k, ce, now)
	f.Idle, f.InSlot = age, true
	return k, f, true
}

// ctRecord is one conntrack entry, key and value.
type ctRecord struct {
	key xlbFlowKey
	val xlbCtEntry
}

// rescueSlotConns returns the connections handshake table m (of this build's slot layout) holds,
// as the conntrack entries that keep them when m is replaced (a new HandshakeSize): Load writes
// them into conntrack. Connections idle past their timeouts are left out.
func rescueSlotConns(m *ebpf.Map, s datapath.Settings) ([]ctRecord, error) {
	now := monotonicNow()
	var out []ctRecord
	err := walkHandshakes(m, func(_ uint32, e *xlbHsEntry) {
		k, ce, age, ok := slotConnEntry(e, now)
		if !ok {
			return
		}
		// As hs_conn_live: idle for at most its timeout, judged by the slot's age.
		if age <= s.Timeout(datapath.TCP, ce.Flags&ctFlagClosing != 0) {
			out = append(out, ctRecord{k, ce})
		}
	})
	return out, err
}

// Flows returns the conntrack entries, forward (conntrack) and reverse (ct_reverse), expired
// ones included until the LRU reuses them (see Flow.Idle), and the connections held in the
// handshake table (Flow.InSlot; idle ones until a new tuple takes the slot). It reads the tables
// in batches, bucket by bucket, so that entries the datapath inserts and evicts meanwhile (a full
// table under load) cannot make it start over, as a walk key by key does when the key under its
// cursor goes; an entry that moved is listed once, and a connection the datapath moved from its
// slot into conntrack during the walk, once.
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
	seen := map[xlbFlowKey]bool{}
	err := walkHandshakes(d.objs.HsSlots, func(_ uint32, e *xlbHsEntry) {
		if k, f, ok := slotConn(e, now); ok && !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list the connections in the handshake table: %w", err)
	}
	// Listed last, so that one promoted meanwhile was seen in its slot: drop its conntrack copy.
	if len(seen) > 0 {
		out = slices.DeleteFunc(out, func(f datapath.Flow) bool {
			if f.InSlot || f.Reverse {
				return false
			}
			k, _ := wireKey(f.Src, f.Dst, f.Proto)
			return seen[k]
		})
	}
	return out, nil
}

// wireKey returns the flow_key of the packets from src to dst of protocol proto, as conntrack
// and the handshake table key them, and false when the two addresses are of different families
// (no such packet).
func wireKey(src, dst netip.AddrPort, proto datapath.Protocol) (xlbFlowKey, bool) {
	s, sfam := toWire(src.Addr())
	d, dfam := toWire(dst.Addr())
	k := xlbFlowKey{Sport: htons(src.Port()), Dport: htons(dst.Port()), Proto: uint8(proto), Family: dfam}
	k.Src.W, k.Dst.W = s.W, d.W
	return k, sfam == dfam
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

// FlushFlows deletes the conntrack entries (forward and reverse) and the connections held in the
// handshake table (Flow.InSlot) for which match returns true (all when match is nil) and returns
// how many it deleted. Their flows are re-balanced by Maglev on their next packet. The handshakes
// in flight that match (seen as Flows with their SYN's backend and VIP) are deleted too, so that
// their ACKs are re-balanced as well; they are not counted.
func (d *Datapath) FlushFlows(match func(datapath.Flow) bool) (int, error) {
	total, err := d.flushHandshakes(match)
	if err != nil {
		return 0, err
	}
	defer func() { _ = d.invalidateCaches() }()
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
// occupied slots when nil), and returns how many of them held connections (Flow.InSlot). A SYN
// that takes a slot over while it is emptied loses its entry (its ACK falls back to Maglev), as
// it would to another tuple's SYN.
func (d *Datapath) flushHandshakes(match func(datapath.Flow) bool) (int, error) {
	now := monotonicNow()
	var slots []uint32
	conns := 0
	err := walkHandshakes(d.objs.HsSlots, func(i uint32, e *xlbHsEntry) {
		if e.Key.Family == 0 {
			return
		}
		_, f, conn := slotConn(e, now)
		if !conn {
			age := slotAge(e.SynTime, now)
			f = flowOf(e.Key, xlbCtEntry{LastSeen: readingBefore(now, age), BackendId: e.BackendId, VipId: e.VipId}, now)
			f.Idle = age
		}
		if match == nil || match(f) {
			slots = append(slots, i)
			if conn {
				conns++
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("flush handshakes: list: %w", err)
	}
	if d.live.mem == nil {
		return 0, errors.New("flush handshakes: the handshake table is not mapped")
	}
	for _, i := range slots {
		if i < d.live.slots {
			d.live.empty(i) // through the mapping: the slot's live-flow filter bits stay
		}
	}
	return conns, nil
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
			now := monotonicNow()
			err := walkHandshakes(d.objs.HsSlots, func(_ uint32, e *xlbHsEntry) {
				if _, _, ok := slotConn(e, now); ok {
					total++
				}
			})
			if err != nil {
				return total, fmt.Errorf("count the connections in the handshake table: %w", err)
			}
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("count conntrack entries: %w", err)
		}
	}
}

// MaxFlowBackend returns the highest backend id a conntrack entry or a handshake-table slot
// (a handshake in flight, a first datagram, a connection) names (0 if none). A caller handing out
// backend ids starts above it after a restart, so that an id flows may still name is not given to
// another endpoint soon.
func (d *Datapath) MaxFlowBackend() (datapath.BackendID, error) {
	const chunk = 4096
	keys := make([]xlbFlowKey, chunk)
	vals := make([]xlbCtEntry, chunk)
	var cursor ebpf.MapBatchCursor
	var top uint32
	err := walkHandshakes(d.objs.HsSlots, func(_ uint32, e *xlbHsEntry) {
		if e.Key.Family != 0 {
			top = max(top, e.BackendId)
		}
	})
	if err != nil {
		return 0, err
	}
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
