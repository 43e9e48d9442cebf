// SPDX-License-Identifier: Apache-2.0
package maglev

import (
	"fmt"
	"testing"
)

// backendsN returns n backends of weight 1 named like Pod endpoints, "198.18.x.y:8080".
func backendsN(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{Name: fmt.Sprintf("198.18.%d.%d:8080", i/250, i%250+1), Weight: 1}
	}
	return bs
}

// mustBuild builds the table or fails the test.
func mustBuild(tb testing.TB, bs []Backend, m int, seed uint32) []int {
	tb.Helper()
	table, err := Build(bs, m, seed)
	if err != nil {
		tb.Fatalf("Build(%d backends, m=%d, seed=%d): %v", len(bs), m, seed, err)
	}
	return table
}

// ownerNames maps a table of indices to the owners' names ("" for an empty slot): tables built
// from different slices compare by name.
func ownerNames(table []int, bs []Backend) []string {
	out := make([]string, len(table))
	for s, i := range table {
		if i >= 0 {
			out[s] = bs[i].Name
		}
	}
	return out
}

// counts returns the number of slots each backend owns, by index.
func counts(table []int, n int) []int {
	c := make([]int, n)
	for _, i := range table {
		if i >= 0 {
			c[i]++
		}
	}
	return c
}

// moved returns the number of slots whose owner differs between a and b (names).
func moved(a, b []string) int {
	n := 0
	for s := range a {
		if a[s] != b[s] {
			n++
		}
	}
	return n
}
