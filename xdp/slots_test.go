package xdp

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
