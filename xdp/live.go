package xdp

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The live-flow filter (map ct_live, bpf/live.h): a bit per hash of a forward flow key, set by
// the datapath whenever it creates or revives a conntrack entry, so that a SYN or a flow's first
// packet whose bit is clear skips the conntrack lookup. The datapath never clears a bit; the
// loader keeps the filter from filling up by rebuilding it: it empties the half the datapath does
// not read, sets the bits of every conntrack entry that may still be live, and names that half in
// map clock. The datapath sets its bits in both halves, so an entry it makes during a rebuild is
// in the new half whether or not the walk of conntrack sees it.

const (
	// liveCheckEvery is how often the loader looks at how full the filter's active half is.
	liveCheckEvery = time.Second
	// liveRebuildFill is the share of set bits (of liveFilterBits) above which the active half
	// is rebuilt: at 1/4, three SYNs of new tuples in four skip the conntrack lookup.
	liveRebuildFill = liveFilterBits / 4
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

// liveFilter is the loader's side of ct_live.
type liveFilter struct {
	// mu serializes rebuilds.
	mu sync.Mutex
	// mem is the map's shared mapping; words the same memory as 2*liveFilterWords words.
	mem   []byte
	words []uint64
	// half is the half the datapath reads (map clock's live_half); written under the
	// Datapath's clockMu.
	half uint32
	// last is when the filter was last rebuilt (under mu).
	last time.Time
}

// tupleHash is bpf/lb.h's tuple_hash of forward flow key k: the live-flow filter's bit is its top
// bits (liveBit), the handshake table's slot its low bits.
func tupleHash(k *xlbFlowKey, seed uint32) uint32 {
	x := (k.Src.W[0] ^ seed) * 0x9e3779b1
	x = (x ^ k.Dst.W[0]) * 0x85ebca6b
	if k.Family == uint8(datapath.FamilyV6) {
		x = (x ^ k.Src.W[1] ^ bits.RotateLeft32(k.Src.W[2], 8) ^ bits.RotateLeft32(k.Src.W[3], 16)) * 0x9e3779b1
		x = (x ^ k.Dst.W[1] ^ bits.RotateLeft32(k.Dst.W[2], 8) ^ bits.RotateLeft32(k.Dst.W[3], 16)) * 0x85ebca6b
	}
	x = (x ^ (uint32(k.Sport)<<16 | uint32(k.Dport)) ^ uint32(k.Proto)<<8) * 0xc2b2ae35
	return x ^ x>>15
}

// liveBit is bpf/live.h's live_bit: k's bit in a half of ct_live.
func liveBit(k *xlbFlowKey, seed uint32) uint32 {
	return tupleHash(k, seed) >> (32 - liveFilterLog2)
}

// openLive maps ct_live into the loader's memory and takes the half map clock names.
func (d *Datapath) openLive() error {
	m := d.objs.CtLive
	size := int(m.MaxEntries()) * 8
	if m.MaxEntries() != 2*liveFilterWords || m.ValueSize() != 8 {
		return fmt.Errorf("map ct_live holds %d values of %d bytes, the loader expects %d of 8",
			m.MaxEntries(), m.ValueSize(), 2*liveFilterWords)
	}
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map ct_live into memory: %w", err)
	}
	d.live.mem = mem
	d.live.words = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), 2*liveFilterWords)
	var c xlbClockValue
	if err := d.objs.Clock.Lookup(uint32(0), &c); err == nil {
		d.live.half = c.LiveHalf & 1
	}
	return nil
}

// closeLive unmaps ct_live.
func (d *Datapath) closeLive() error {
	if d.live.mem == nil {
		return nil
	}
	err := unix.Munmap(d.live.mem)
	d.live.mem, d.live.words = nil, nil
	if err != nil {
		return fmt.Errorf("unmap ct_live: %w", err)
	}
	return nil
}

// liveFill returns how many bits of the active half are set.
func (d *Datapath) liveFill() int {
	d.clockMu.Lock()
	half := d.live.half
	d.clockMu.Unlock()
	n := 0
	for i := half; i < 2*liveFilterWords; i += 2 {
		n += bits.OnesCount64(atomic.LoadUint64(&d.live.words[i]))
	}
	return n
}

// rebuildLive rebuilds ct_live's idle half from conntrack and makes the datapath read it.
func (d *Datapath) rebuildLive() error {
	d.live.mu.Lock()
	defer d.live.mu.Unlock()
	if d.live.words == nil {
		return errors.New("rebuild the live-flow filter: ct_live is not mapped")
	}
	d.clockMu.Lock()
	next := 1 - d.live.half
	d.clockMu.Unlock()
	words := d.live.words // half h's word i is words[2*i+h]
	for i := next; i < 2*liveFilterWords; i += 2 {
		atomic.StoreUint64(&words[i], 0)
	}
	now := monotonicNow()
	seed := uint32(d.opts.Seed)
	mark := func(k *xlbFlowKey, e *xlbCtEntry) {
		if e.Flags&ctFlagReverse != 0 || k.Proto != uint8(datapath.TCP) {
			return // only a SYN asks the filter, and of its own (TCP) tuple
		}
		timeout := d.opts.UDPTimeout
		if k.Proto == uint8(datapath.TCP) {
			timeout = d.opts.TCPEstablishedTimeout
			if e.Flags&ctFlagClosing != 0 {
				timeout = d.opts.TCPClosingTimeout
			}
		}
		if e.LastSeen < now && now-e.LastSeen > uint64(timeout+liveSkew) {
			return // idle past its timeout: the datapath would treat it as gone
		}
		b := liveBit(k, seed)
		atomic.OrUint64(&words[b/64*2+next], 1<<(b%64))
	}
	if err := d.walkConntrack(mark); err != nil {
		return fmt.Errorf("rebuild the live-flow filter: %w", err)
	}
	d.clockMu.Lock()
	d.live.half = next
	d.clockMu.Unlock()
	d.live.last = time.Now()
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
// liveRebuildFill, at most every liveRebuildGap, until ctx ends; the first time soon after
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
			recent := time.Since(d.live.last) < liveRebuildGap
			d.live.mu.Unlock()
			if recent || d.liveFill() < liveRebuildFill {
				continue
			}
		}
		if err := d.rebuildLive(); err != nil {
			d.log.Warn("datapath live-flow filter", "error", err)
		}
	}
}
