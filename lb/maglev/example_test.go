// SPDX-License-Identifier: Apache-2.0
package maglev_test

import (
	"fmt"

	"github.com/xlb-dev/xlb/lb/maglev"
)

// A VIP with three backends, one draining. The datapath wants one backend id per slot, 0 for an
// empty slot: the caller maps indices to its ids.
func ExampleBuild() {
	backends := []maglev.Backend{
		{Name: "198.18.1.10:8080", Weight: 1},
		{Name: "198.18.1.11:8080", Weight: 1},
		{Name: "198.18.1.12:8080", Weight: 0}, // draining: keeps its flows, gets no new one
	}
	ids := []uint32{21, 22, 23} // the datapath's BackendID of each backend

	m := maglev.SizeFor(len(backends)) // 509: the smallest listed size ≥ 100·3
	table, err := maglev.Build(backends, m, 1)
	if err != nil {
		panic(err)
	}
	slots := make([]uint32, m) // for xdp.Datapath.SetMaglevTable, as []xdp.BackendID
	perID := map[uint32]int{}
	for s, i := range table {
		if i >= 0 {
			slots[s] = ids[i]
		}
		perID[slots[s]]++
	}
	fmt.Println("M =", m)
	fmt.Println("slots per backend id:", perID)
	// Output:
	// M = 509
	// slots per backend id: map[21:255 22:254]
}

// A Builder keeps its memory between builds: rebuild a VIP's table whenever its backends change.
func ExampleBuilder() {
	b := maglev.Builder{Seed: 1}
	backends := []maglev.Backend{{Name: "a", Weight: 1}, {Name: "b", Weight: 3}}
	before, _ := b.Build(backends, 13)
	backends = append(backends, maglev.Backend{Name: "c", Weight: 1})
	after, _ := b.Build(backends, 13)
	fmt.Println(before)
	fmt.Println(after)
	// Output:
	// [1 0 1 1 1 1 1 0 1 1 0 1 1]
	// [1 0 2 1 1 1 1 0 1 2 0 1 1]
}
