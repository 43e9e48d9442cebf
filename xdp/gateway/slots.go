// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"sort"
	"time"
)

// slotAllocator hands out regions of the flat Maglev array (map maglev_slots). It holds no
// state of its own worth keeping: on load it is rebuilt from the VIP descriptors in map vips.
// A freed region waits out a quarantine before reuse, so a packet that read a VIP's old
// descriptor just before a swap never finds another VIP's table in its slot.
type slotAllocator struct {
	size uint32
	// free: disjoint free regions sorted by offset.
	free []region
	// quarantined: freed regions and when they may be reused.
	quarantined []quarantinedRegion
}

type region struct{ off, n uint32 }

type quarantinedRegion struct {
	region
	until time.Time
}

// slotQuarantine is how long a freed region stays unused.
const slotQuarantine = time.Second

func newSlotAllocator(size uint32) *slotAllocator {
	return &slotAllocator{size: size, free: []region{{0, size}}}
}

// reserve marks [off, off+n) used; it reports false if any of it is not free.
func (a *slotAllocator) reserve(off, n uint32) bool {
	for i, r := range a.free {
		if off >= r.off && off+n <= r.off+r.n {
			var repl []region
			if off > r.off {
				repl = append(repl, region{r.off, off - r.off})
			}
			if end := off + n; end < r.off+r.n {
				repl = append(repl, region{end, r.off + r.n - end})
			}
			a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
			return true
		}
	}
	return false
}

// alloc returns the offset of a free region of n slots (first fit).
func (a *slotAllocator) alloc(n uint32, now time.Time) (uint32, bool) {
	a.release(now)
	for _, r := range a.free {
		if r.n >= n {
			a.reserve(r.off, n)
			return r.off, true
		}
	}
	return 0, false
}

// freeAt returns a region; it becomes reusable after the quarantine.
func (a *slotAllocator) freeAt(off, n uint32, now time.Time) {
	if n == 0 {
		return
	}
	a.quarantined = append(a.quarantined, quarantinedRegion{region{off, n}, now.Add(slotQuarantine)})
}

// release moves regions out of quarantine and merges neighbours.
func (a *slotAllocator) release(now time.Time) {
	kept := a.quarantined[:0]
	for _, q := range a.quarantined {
		if now.Before(q.until) {
			kept = append(kept, q)
			continue
		}
		a.free = append(a.free, q.region)
	}
	a.quarantined = kept
	sort.Slice(a.free, func(i, j int) bool { return a.free[i].off < a.free[j].off })
	merged := a.free[:0]
	for _, r := range a.free {
		if l := len(merged); l > 0 && merged[l-1].off+merged[l-1].n == r.off {
			merged[l-1].n += r.n
			continue
		}
		merged = append(merged, r)
	}
	a.free = merged
}

// nextRelease returns when the next quarantined region becomes reusable; false when none is
// quarantined.
func (a *slotAllocator) nextRelease() (time.Time, bool) {
	var next time.Time
	for _, q := range a.quarantined {
		if next.IsZero() || q.until.Before(next) {
			next = q.until
		}
	}
	return next, !next.IsZero()
}

// allocWait is alloc that, when only quarantined regions stand in the way, waits for them
// (sleep is time.Sleep, or a test's clock): at most slotQuarantine in all, as every region in
// quarantine leaves it within that. A burst of table rewrites (every frontend of a backend whose
// health changed, several times within a second) then waits a moment instead of failing.
func (a *slotAllocator) allocWait(n uint32, now func() time.Time, sleep func(time.Duration)) (uint32, bool) {
	off, ok := a.alloc(n, now())
	for !ok {
		next, pending := a.nextRelease()
		if !pending {
			return 0, false
		}
		if d := next.Sub(now()); d > 0 {
			sleep(d)
		}
		off, ok = a.alloc(n, now())
	}
	return off, true
}

// available is the number of free (not quarantined) slots.
func (a *slotAllocator) available() uint64 {
	var n uint64
	for _, r := range a.free {
		n += uint64(r.n)
	}
	return n
}
