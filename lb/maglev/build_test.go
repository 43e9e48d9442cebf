// SPDX-License-Identifier: Apache-2.0
package maglev

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestOrderIndependent: shuffling the input gives the same owner, by name, in every slot.
func TestOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		n, m     int
		weighted bool
	}{{3, 13, false}, {100, 16381, false}, {100, 16381, true}, {1000, DefaultSize, true}} {
		bs := backendsN(c.n)
		if c.weighted {
			for i := range bs {
				bs[i].Weight = uint32(rng.IntN(5)) // draining backends included
			}
		}
		want := ownerNames(mustBuild(t, bs, c.m, 42), bs)
		for range 50 {
			rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
			if got := ownerNames(mustBuild(t, bs, c.m, 42), bs); !slices.Equal(got, want) {
				t.Fatalf("N=%d M=%d weighted=%v: a shuffled input gives another table", c.n, c.m, c.weighted)
			}
		}
	}
}

// TestSeeds: the seed changes the table.
func TestSeeds(t *testing.T) {
	bs := backendsN(10)
	seen := map[string]uint32{}
	for seed := range uint32(20) {
		key := strings.Join(ownerNames(mustBuild(t, bs, 1021, seed), bs), ",")
		if other, dup := seen[key]; dup {
			t.Errorf("seeds %d and %d give the same table", other, seed)
		}
		seen[key] = seed
	}
}

// TestDraining: weight-0 backends own no slot and do not change the others' table; when all are
// draining (or there are none) every slot is -1.
func TestDraining(t *testing.T) {
	bs := backendsN(20)
	want := ownerNames(mustBuild(t, bs[:10], 1021, 1), bs[:10])
	for i := 10; i < 20; i++ {
		bs[i].Weight = 0
	}
	table := mustBuild(t, bs, 1021, 1)
	for i, c := range counts(table, len(bs)) {
		if i >= 10 && c != 0 {
			t.Errorf("draining backend %d owns %d slots", i, c)
		}
	}
	if !slices.Equal(ownerNames(table, bs), want) {
		t.Errorf("draining backends change the table")
	}
	for _, empty := range [][]Backend{nil, {}, {{Name: "a"}, {Name: "b"}}} {
		table := mustBuild(t, empty, 13, 1)
		if len(table) != 13 || slices.ContainsFunc(table, func(i int) bool { return i != -1 }) {
			t.Errorf("Build(%v) = %v, want 13 × -1", empty, table)
		}
	}
}

// TestEverySlotOwned: every slot is owned, and with equal weights every backend owns one even
// when N = M.
func TestEverySlotOwned(t *testing.T) {
	for _, n := range []int{1, 2, 12, 13} {
		bs := backendsN(n)
		if n < 13 {
			bs[0].Weight = 1000
		}
		table := mustBuild(t, bs, 13, 7)
		for s, i := range table {
			if i < 0 || i >= n {
				t.Fatalf("N=%d: slot %d owned by %d", n, s, i)
			}
		}
		if n == 13 && slices.Min(counts(table, n)) != 1 {
			t.Errorf("N=M=13: counts %v, want one slot each", counts(table, n))
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, c := range []struct {
		name     string
		backends []Backend
		m        int
		want     string
	}{
		{"not prime", backendsN(3), 65536, "table size 65536 is not a prime"},
		{"too big", backendsN(3), 2097143, "table size 2097143 out of range 2..1048573"},
		{"zero", backendsN(3), 0, "table size 0 out of range"},
		{"duplicate", append(backendsN(3), Backend{Name: "198.18.0.2:8080", Weight: 0}), 13,
			`backends 1 and 3 have the same name "198.18.0.2:8080"`},
		{"empty name", []Backend{{Name: "a", Weight: 1}, {Weight: 1}}, 13, "backend 1 has an empty name"},
		{"too many", backendsN(14), 13, "14 backends with a weight above 0 do not fit a table of 13 slots"},
	} {
		table, err := Build(c.backends, c.m, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Build = %v, %v; want an error containing %q", c.name, table, err, c.want)
		}
	}
	// Draining backends do not count against M.
	bs := backendsN(20)
	for i := 13; i < 20; i++ {
		bs[i].Weight = 0
	}
	if _, err := Build(bs, 13, 1); err != nil {
		t.Errorf("13 weighted + 7 draining backends in 13 slots: %v", err)
	}
}

// TestBuilderReuse: a Builder reused across sets, sizes, seeds and failed builds gives what a
// fresh Build gives.
func TestBuilderReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all := backendsN(300)
	var b Builder
	for i := range 60 {
		bs := slices.Clone(all[:1+rng.IntN(len(all))])
		for j := range bs {
			bs[j].Weight = uint32(rng.IntN(4))
			if i%3 == 0 && rng.IntN(50) == 0 {
				bs[j].Weight = 100000 // a few heavy backends: the heap path
			}
		}
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		m := Sizes()[rng.IntN(8)]
		b.Seed = uint32(rng.IntN(3))
		if i%7 == 0 {
			if _, err := b.Build(append(bs, bs[0]), m); err == nil {
				t.Fatalf("duplicate accepted")
			}
		}
		got, err := b.Build(bs, m)
		want, err2 := Build(bs, m, b.Seed)
		if (err == nil) != (err2 == nil) || !slices.Equal(got, want) {
			t.Fatalf("build %d (N=%d M=%d seed %d): Builder and Build disagree (%v, %v)", i, len(bs), m, b.Seed, err, err2)
		}
	}
}

// TestHeapMatchesRounds: both schedulers take the same turns, so they fill the same table.
func TestHeapMatchesRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		m := []int{13, 251, 4093, 65537}[i%4]
		ts := make([]turn, 1+rng.IntN(min(m, 300)))
		for j := range ts {
			next, skip := permutation(uint32(i), strings.Repeat("x", j+1), m)
			w := 1 + rng.Uint64N(10)
			if i%2 == 0 {
				w = 1 + rng.Uint64N(1<<32-1)
			}
			ts[j] = turn{next: next, skip: skip, weight: w}
		}
		var maxW uint64
		for _, t := range ts {
			maxW = max(maxW, t.weight)
		}
		a, b := make([]int32, m), make([]int32, m)
		for s := range a {
			a[s], b[s] = -1, -1
		}
		ts2 := slices.Clone(ts)
		populateRounds(a, ts, maxW)
		populateHeap(b, ts2, maxW, nil)
		if !slices.Equal(a, b) {
			t.Fatalf("case %d (M=%d, %d backends): rounds and heap fill different tables", i, m, len(ts))
		}
	}
}
