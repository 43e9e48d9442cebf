// SPDX-License-Identifier: Apache-2.0
package maglev

import (
	"fmt"
	"slices"
	"testing"
)

// TestGolden pins small tables slot by slot. A change to the hash, the permutation or the
// population loop changes every table on every gateway; if this test fails, that change must be
// deliberate (and rolled out to all gateways at once), and the tables below updated. The
// expected values come from testdata/reference.py, a separate implementation written from the
// package documentation alone, not from this code.
func TestGolden(t *testing.T) {
	names := func(n int) []Backend {
		bs := make([]Backend, n)
		for i := range bs {
			bs[i].Name = fmt.Sprintf("198.18.1.%d:8080", 10+i)
		}
		return bs
	}
	for _, c := range []struct {
		name string
		ws   []uint32
		seed uint32
		want []int
	}{
		{"equal weights, seed 1", []uint32{1, 1, 1}, 1, []int{2, 1, 1, 1, 0, 0, 2, 0, 2, 2, 0, 1, 0}},
		{"equal weights, seed 2", []uint32{1, 1, 1}, 2, []int{2, 0, 2, 0, 0, 1, 2, 1, 1, 1, 0, 2, 0}},
		{"weights 1,2,3", []uint32{1, 2, 3}, 1, []int{2, 1, 2, 1, 0, 1, 2, 2, 2, 2, 0, 1, 1}},
		{"weights 3,3,3,3,3,40", []uint32{3, 3, 3, 3, 3, 40}, 1, []int{5, 5, 4, 5, 3, 1, 5, 2, 5, 5, 0, 5, 5}},
	} {
		bs := names(len(c.ws))
		for i := range bs {
			bs[i].Weight = c.ws[i]
		}
		if got := mustBuild(t, bs, 13, c.seed); !slices.Equal(got, c.want) {
			t.Errorf("%s: M=13 table = %#v, want %#v", c.name, got, c.want)
		}
	}
	// Larger tables, pinned by checksum (FNV-1a 64 over the entries as int32, little-endian).
	for _, c := range []struct {
		name   string
		n, m   int
		weight func(i int) uint32
		seed   uint32
		want   uint64
	}{
		{"N=1000 equal weights", 1000, 65537, func(int) uint32 { return 1 }, 1, 0x6854d26979f4f635},
		{"N=100 weights 1..100", 100, 16381, func(i int) uint32 { return uint32(1 + i*37%100) }, 7, 0x2458b03d447ca867},
		{"N=40 weights 200,1,1,… (heap path)", 40, 251, func(i int) uint32 { return map[bool]uint32{true: 200, false: 1}[i == 0] }, 3, 0x0ffc6741311cd915},
	} {
		bs := backendsN(c.n)
		for i := range bs {
			bs[i].Weight = c.weight(i)
		}
		if got := tableChecksum(mustBuild(t, bs, c.m, c.seed)); got != c.want {
			t.Errorf("%s, M=%d, seed %d: checksum %#x, want %#x", c.name, c.m, c.seed, got, c.want)
		}
	}
	if 40*200 <= roundsFactor*(200+39) {
		t.Errorf("the heap-path case no longer takes the heap path: raise its heavy weight")
	}

	// The hash itself, for implementations in other languages.
	const name = "198.18.1.10:8080"
	if h := nameHash(1, name); h != 0xd081ff1b776c2697 {
		t.Errorf("nameHash(1, %q) = %#x, want 0xd081ff1b776c2697", name, h)
	}
	if off, skip := permutation(1, name, 65537); off != 44001 || skip != 54934 {
		t.Errorf("permutation(1, %q, 65537) = %d, %d; want 44001, 54934", name, off, skip)
	}
}

// tableChecksum is FNV-1a 64 over the table's entries as int32, little-endian.
func tableChecksum(table []int) uint64 {
	h := uint64(fnvOffset64)
	for _, v := range table {
		for i := range 4 {
			h ^= uint64(byte(uint32(int32(v)) >> (8 * i)))
			h *= fnvPrime64
		}
	}
	return h
}
