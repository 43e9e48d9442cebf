// SPDX-License-Identifier: Apache-2.0
package maglev

import (
	"fmt"
	"slices"
	"strings"
)

// Backend is one member of a table.
type Backend struct {
	// Name identifies the backend, stably and identically on every gateway (for example
	// "198.18.1.10:8080"). It places the backend's permutation, so renaming a backend moves its
	// slots. Names must be unique and not empty.
	Name string
	// Weight is the backend's relative share of the slots. 0 means draining: no slot, so no new
	// flow, while the caller keeps the backend configured for its established flows.
	Weight uint32
}

// Build returns the table of m slots for backends with the given seed: table[i] is the index in
// backends of slot i's owner, or -1 for every slot when no backend has a weight above zero (an
// empty backends included). m must be a prime from 2 to [MaxSize] (see [SizeFor]) and at least
// the number of backends with a weight above zero; names must be unique and not empty.
//
// The result depends on the set of backends, not their order. To build repeatedly, a [Builder]
// saves the allocations.
func Build(backends []Backend, m int, seed uint32) ([]int, error) {
	b := Builder{Seed: seed}
	return b.Build(backends, m)
}

// Builder builds tables, keeping its scratch memory (about 4·M + 56·N bytes) between builds: a
// rebuild after a change of backends allocates only the returned table. The zero value is ready
// to use, with seed 0. A Builder is not safe for concurrent use.
type Builder struct {
	// Seed places every backend's permutation (see the package documentation). Every gateway
	// must use the same seed to build the same tables.
	Seed uint32

	byName []int // indices in backends, sorted by name
	pop    population
}

// Build returns the table of m slots for backends, as [Build] does with b.Seed.
func (b *Builder) Build(backends []Backend, m int) ([]int, error) {
	if err := CheckSize(m); err != nil {
		return nil, err
	}
	if err := b.sortByName(backends); err != nil {
		return nil, err
	}
	ts := b.pop.turns[:0]
	for _, i := range b.byName {
		if w := backends[i].Weight; w > 0 {
			next, skip := permutation(b.Seed, backends[i].Name, m)
			ts = append(ts, turn{next: next, skip: skip, weight: uint64(w)})
		}
	}
	b.pop.turns = ts
	if len(ts) > m {
		return nil, fmt.Errorf("maglev: %d backends with a weight above 0 do not fit a table of %d slots", len(ts), m)
	}
	b.pop.slots = slices.Grow(b.pop.slots[:0], m)[:m]
	b.pop.fill()

	// owner[k] is the index in backends of the k-th weighted backend in turn order.
	owner := b.byName[:0]
	for _, i := range b.byName {
		if backends[i].Weight > 0 {
			owner = append(owner, i)
		}
	}
	table := make([]int, m)
	for s, k := range b.pop.slots {
		if k < 0 {
			table[s] = -1
		} else {
			table[s] = owner[k]
		}
	}
	return table, nil
}

// sortByName sets b.byName to the indices of backends in byte order of their names, and checks
// that the names are unique and not empty.
func (b *Builder) sortByName(backends []Backend) error {
	b.byName = b.byName[:0]
	for i := range backends {
		if backends[i].Name == "" {
			return fmt.Errorf("maglev: backend %d has an empty name", i)
		}
		b.byName = append(b.byName, i)
	}
	slices.SortFunc(b.byName, func(i, j int) int {
		return strings.Compare(backends[i].Name, backends[j].Name)
	})
	for k := 1; k < len(b.byName); k++ {
		i, j := b.byName[k-1], b.byName[k]
		if backends[i].Name == backends[j].Name {
			return fmt.Errorf("maglev: backends %d and %d have the same name %q", min(i, j), max(i, j), backends[i].Name)
		}
	}
	return nil
}
