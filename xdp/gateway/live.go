// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The live-flow filter (bpf/live.h): a bit per hash of a forward flow key, kept in the key's
// handshake slot (hs_entry.live: liveSlotBits bits in each of two halves), set by the datapath
// whenever it creates or revives a conntrack entry, so that a SYN or a datagram whose bit is
// clear skips the conntrack lookup. The datapath never clears a bit; the loader keeps the filter from filling up
// by rebuilding it: it empties the half the datapath does not read, sets the bits of every
// conntrack entry that may still be live, and names that half in map clock. The datapath sets
// its bits in both halves, so an entry it makes during a rebuild is in the new half whether or
// not the walk of conntrack sees it.

const (
	// liveCheckEvery is how often the loader looks at how full the filter's active half is.
	liveCheckEvery = time.Second
	// liveRebuildShare is the share of set bits (1/liveRebuildShare of a half's bits) above
	// which the active half is rebuilt: at 1/4, three SYNs of new tuples in four skip the
	// conntrack lookup. It is rebuilt only once it also holds liveRebuildGrowth times as many
	// bits as the last rebuild left set: the bits of live flows stay whatever a rebuild does, so
	// a site with many of them is not walked every liveRebuildGap for nothing.
	liveRebuildShare  = 4
	liveRebuildGrowth = 2
	// liveRebuildGap is the least time between two rebuilds: a rebuild walks all of conntrack,
	// so under a flood of new flows it runs at most this often (the filter then fills and SYNs
	// look conntrack up, as without it: slower, never wrong).
	liveRebuildGap = 5 * time.Second
	// liveSkew is how far past its idle timeout an entry still counts as possibly live: the
	// datapath's clock and the loader's may differ by a clock tick or a stale CPU.
	liveSkew = 5 * time.Second
	// liveBatch is how many conntrack entries a rebuild reads per system call.
	liveBatch = 4096
)

// Where in a handshake slot (struct hs_entry, one per hsEntrySize bytes of the map's mapping)
// the loader reads and writes: the aligned 64-bit word of check and live (live its high half,
// the word the datapath's live_mark ors into: the loader uses 64-bit atomics on it too, the
// same size as the datapath's), and the key's family byte (0: an empty slot).
var (
	hsEntrySize    = unsafe.Sizeof(xlbHsEntry{})
	hsCheckOffset  = unsafe.Offsetof(xlbHsEntry{}.Check)
	hsLiveOffset   = unsafe.Offsetof(xlbHsEntry{}.Live)
	hsFamilyOffset = unsafe.Offsetof(xlbHsEntry{}.Key) + unsafe.Offsetof(xlbFlowKey{}.Family)
)

// liveFilter is the loader's side of the live-flow filter, and its mapping of the handshake
// table.
type liveFilter struct {
	// mu serializes rebuilds.
	mu sync.Mutex
	// mem is the handshake table's shared mapping, slots its number of slots.
	mem   []byte
	slots uint32
	// half is the half the datapath reads (map clock's live_half); written under the
	// Datapath's clockMu.
	half uint32
	// last is when the filter was last rebuilt, and kept how many bits it left set (under mu).
	last time.Time
	kept int
}

// checkLive returns slot i's check+live word (i < slots).
func (l *liveFilter) checkLive(i uint32) *uint64 {
	return (*uint64)(unsafe.Pointer(&l.mem[uintptr(i)*hsEntrySize+hsCheckOffset]))
}

// bits returns slot i's live word: both halves of the filter's bits there.
func (l *liveFilter) bits(i uint32) uint32 {
	return uint32(atomic.LoadUint64(l.checkLive(i)) >> 32)
}

// keep clears the bits of slot i's live word that mask does not have, leaving check alone.
func (l *liveFilter) keep(i, mask uint32) {
	atomic.AndUint64(l.checkLive(i), uint64(mask)<<32|math.MaxUint32)
}

// set sets mask's bits in slot i's live word.
func (l *liveFilter) set(i, mask uint32) {
	atomic.OrUint64(l.checkLive(i), uint64(mask)<<32)
}

// empty empties slot i (i < slots) as the datapath's hs_retire does, by its key's family byte,
// leaving the filter's bits and the other fields alone.
func (l *liveFilter) empty(i uint32) {
	l.mem[uintptr(i)*hsEntrySize+hsFamilyOffset] = 0
}

// tupleHash is bpf/lb.h's tuple_hash of forward flow key k: the live-flow filter's bit is its top
// bits (liveMask), the handshake table's slot its low bits.
func tupleHash(k *xlbFlowKey, seed uint32) uint32 {
	x := (k.Src.W[0] ^ seed) * 0x9e3779b1
	x = (x ^ k.Dst.W[0]) * 0x85ebca6b
	if k.Family == uint8(datapath.FamilyV6) {
		x = (x ^ k.Src.W[1] ^ bits.RotateLeft32(k.Src.W[2], 8) ^ bits.RotateLeft32(k.Src.W[3], 16)) * 0x9e3779b1
		x = (x ^ k.Dst.W[1] ^ bits.RotateLeft32(k.Dst.W[2], 8) ^ bits.RotateLeft32(k.Dst.W[3], 16)) * 0x85ebca6b
	}
	x = (x ^ (uint32(k.Sport)<<16 | uint32(k.Dport)) ^ uint32(k.Proto)<<8) * 0xc2b2ae35
	x = (x ^ x>>16) * 0x7feb352d
	x = (x ^ x>>15) * 0x846ca68b
	return x ^ x>>16
}

// liveSlot returns the handshake slot holding k's bit of the live-flow filter in a table of
// slots slots (a power of two), and the bit in half h's word (bpf/live.h's live_bit, shifted to
// half h).
func liveSlot(k *xlbFlowKey, seed, slots, h uint32) (slot uint32, mask uint32) {
	x := tupleHash(k, seed)
	return x & (slots - 1), 1 << (h*liveSlotBits + x>>(32-liveSlotLog2))
}

// slotAge returns how long before now (a recent clock reading) a handshake slot's SYN time t
// (its units, bpf/lb.h's hs_time) was written, exactly as bpf/hs.h computes a slot's age: the
// difference of the units taken as a signed 32-bit number. That is right whatever the clock
// reads — in the first minutes after boot as after months — because it never subtracts a
// duration from the clock: it only compares two readings. A time up to a second after now
// (another CPU's clock, as hs_fresh allows) is 0; one further ahead (a slot silent for more than
// the ~26 days the signed units span, or written by no clock of this boot) is slotAgeUnknown,
// which the datapath treats as neither fresh nor live.
func slotAge(t uint32, now uint64) time.Duration {
	d := int32(uint32(now>>hsTimeShift) - t)
	switch {
	case d >= 0:
		return time.Duration(uint64(d) << hsTimeShift)
	case d >= -int32(time.Second>>hsTimeShift):
		return 0
	default:
		return slotAgeUnknown
	}
}

// slotAgeUnknown is the age of a slot whose time is further ahead of the clock than CPUs' clocks
// ever differ: older than anything a timeout allows.
const slotAgeUnknown = datapath.AgeUnknown

// readingBefore returns the clock reading age before now, as bpf/lb.h's hs_promote stamps a
// connection it moves into conntrack, or 0 when that would be before the clock's zero (an age
// this boot cannot have produced: a time written by a test, or one of unknown age).
func readingBefore(now uint64, age time.Duration) uint64 {
	if age < 0 || uint64(age) > now {
		return 0
	}
	return now - uint64(age)
}

// openLive maps the handshake table into the loader's memory and takes the half map clock names.
func (d *Datapath) openLive() error {
	m := d.objs.HsSlots
	if m.ValueSize() != uint32(hsEntrySize) {
		return fmt.Errorf("map %s holds values of %d bytes, the loader expects %d", xlbMapHsSlots,
			m.ValueSize(), hsEntrySize)
	}
	// The values of an array map with BPF_F_MMAPABLE are laid out one after the other.
	mem, err := unix.Mmap(m.FD(), 0, int(m.MaxEntries())*int(hsEntrySize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s into memory: %w", xlbMapHsSlots, err)
	}
	d.live.mem, d.live.slots = mem, m.MaxEntries()
	var c xlbClockValue
	if err := d.objs.Clock.Lookup(uint32(0), &c); err == nil {
		d.live.half = c.LiveHalf & 1
	}
	return nil
}

// closeLive unmaps the handshake table.
func (d *Datapath) closeLive() error {
	if d.live.mem == nil {
		return nil
	}
	err := unix.Munmap(d.live.mem)
	d.live.mem, d.live.slots = nil, 0
	if err != nil {
		return fmt.Errorf("unmap %s: %w", xlbMapHsSlots, err)
	}
	return nil
}

// liveFill returns how many bits of the active half are set, and how many it has.
func (d *Datapath) liveFill() (set, of int) {
	d.clockMu.Lock()
	half := d.live.half
	d.clockMu.Unlock()
	return d.halfFill(half), int(d.live.slots) * liveSlotBits
}

// halfFill returns how many bits of half h are set.
func (d *Datapath) halfFill(half uint32) (set int) {
	for i := range d.live.slots {
		w := d.live.bits(i) >> (half * liveSlotBits)
		set += bits.OnesCount32(w & (1<<liveSlotBits - 1))
	}
	return set
}

// rebuildLive rebuilds the live-flow filter's idle half from conntrack and makes the datapath
// read it.
func (d *Datapath) rebuildLive() error {
	d.live.mu.Lock()
	defer d.live.mu.Unlock()
	if d.live.mem == nil {
		return errors.New("rebuild the live-flow filter: the handshake table is not mapped")
	}
	d.clockMu.Lock()
	next := 1 - d.live.half
	d.clockMu.Unlock()
	keep := uint32(1<<liveSlotBits-1) << ((1 - next) * liveSlotBits) // the active half's bits
	for i := range d.live.slots {
		d.live.keep(i, keep)
	}
	now := monotonicNow()
	seed := uint32(d.opts.Seed)
	mark := func(k *xlbFlowKey, e *xlbCtEntry) {
		if e.Flags&ctFlagReverse != 0 {
			return // a SYN and a datagram ask the filter of their own forward tuple
		}
		timeout := d.opts.TCPEstablishedTimeout
		switch {
		case k.Proto != uint8(datapath.TCP):
			timeout = d.opts.UDPTimeout
		case e.Flags&ctFlagClosing != 0:
			timeout = d.opts.TCPClosingTimeout
		}
		if e.LastSeen < now && now-e.LastSeen > uint64(timeout+liveSkew) {
			return // idle past its timeout: the datapath would treat it as gone
		}
		slot, mask := liveSlot(k, seed, d.live.slots, next)
		d.live.set(slot, mask)
	}
	if err := d.walkConntrack(mark); err != nil {
		return fmt.Errorf("rebuild the live-flow filter: %w", err)
	}
	d.clockMu.Lock()
	d.live.half = next
	d.clockMu.Unlock()
	d.live.last, d.live.kept = time.Now(), d.halfFill(next)
	if err := d.tick(); err != nil {
		return fmt.Errorf("rebuild the live-flow filter: %w", err)
	}
	return nil
}

// walkConntrack calls fn for every conntrack entry, in batches where the kernel can.
func (d *Datapath) walkConntrack(fn func(*xlbFlowKey, *xlbCtEntry)) error {
	keys := make([]xlbFlowKey, liveBatch)
	vals := make([]xlbCtEntry, liveBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.Conntrack.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(&keys[i], &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			break // no batch support, or a bucket larger than a batch: walk key by key
		}
	}
	var k xlbFlowKey
	var e xlbCtEntry
	it := d.objs.Conntrack.Iterate()
	for it.Next(&k, &e) {
		fn(&k, &e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk conntrack: %w", err)
	}
	return nil
}

// runLive rebuilds the live-flow filter whenever its active half is fuller than
// 1/liveRebuildShare and than liveRebuildGrowth times what the last rebuild left, at most every
// liveRebuildGap, until ctx ends; the first time soon after
// Load, for the entries an earlier build's program (attached until ours replaces it) made
// without setting their bits.
func (d *Datapath) runLive(ctx context.Context, done chan struct{}) {
	defer close(done)
	first := time.NewTimer(liveRebuildGap)
	defer first.Stop()
	t := time.NewTicker(liveCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-first.C:
		case <-t.C:
			d.live.mu.Lock()
			recent, kept := time.Since(d.live.last) < liveRebuildGap, d.live.kept
			d.live.mu.Unlock()
			set, of := d.liveFill()
			if recent || set < of/liveRebuildShare || set < liveRebuildGrowth*kept {
				continue
			}
		}
		if err := d.rebuildLive(); err != nil {
			d.log.Warn("datapath live-flow filter", "error", err)
		}
	}
}
