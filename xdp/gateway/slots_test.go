// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"testing"
	"time"
)

func TestSlotAllocator(t *testing.T) {
	now := time.Unix(1000, 0)
	a := newSlotAllocator(100)
	off1, ok := a.alloc(30, now)
	if !ok || off1 != 0 {
		t.Fatalf("alloc 30: %d %v", off1, ok)
	}
	off2, ok := a.alloc(30, now)
	if !ok || off2 != 30 {
		t.Fatalf("alloc 30 again: %d %v", off2, ok)
	}
	if _, ok := a.alloc(41, now); ok {
		t.Fatal("allocated 41 slots with 40 free")
	}
	a.freeAt(off1, 30, now)
	// Quarantined: not reusable yet.
	if _, ok := a.alloc(50, now); ok {
		t.Fatal("reused a quarantined region")
	}
	later := now.Add(slotQuarantine)
	if got := a.available(); got != 40 {
		t.Fatalf("available before release %d, want 40", got)
	}
	a.freeAt(off2, 30, now)
	off, ok := a.alloc(100, later) // everything merged back into one region
	if !ok || off != 0 {
		t.Fatalf("alloc 100 after release: %d %v", off, ok)
	}
}

func TestSlotAllocatorReserve(t *testing.T) {
	a := newSlotAllocator(100)
	if !a.reserve(10, 20) || !a.reserve(50, 10) {
		t.Fatal("reserve of free regions failed")
	}
	if a.reserve(25, 10) {
		t.Fatal("reserved an overlapping region")
	}
	if a.reserve(95, 10) {
		t.Fatal("reserved past the end")
	}
	off, ok := a.alloc(15, time.Now())
	if !ok || off != 30 {
		t.Fatalf("first fit after reservations: %d %v, want 30", off, ok)
	}
	if got := a.available(); got != 100-20-10-15 {
		t.Fatalf("available %d", got)
	}
}

// TestSlotAllocatorWait: an allocation that only quarantined regions stand in the way of waits
// until they are released (never longer than the quarantine); one that cannot fit fails at once.
func TestSlotAllocatorWait(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	var slept time.Duration
	sleep := func(d time.Duration) { slept += d; now = now.Add(d) }
	a := newSlotAllocator(100)
	off1, _ := a.alloc(40, now)
	off2, _ := a.alloc(40, now)
	a.freeAt(off2, 40, now)
	now = now.Add(slotQuarantine / 2)
	a.freeAt(off1, 40, now)
	// 20 free, 80 quarantined: 50 needs the first freed region (next to the free 20) released,
	// half a quarantine from now.
	if off, ok := a.allocWait(50, clock, sleep); !ok || off != 40 || slept != slotQuarantine/2 {
		t.Fatalf("allocWait 50: %d %v after %v, want 40 after %v", off, ok, slept, slotQuarantine/2)
	}
	slept = 0
	if _, ok := a.allocWait(200, clock, sleep); ok || slept > slotQuarantine {
		t.Fatalf("allocWait of more than the whole array: %v after %v", ok, slept)
	}
}
