// SPDX-License-Identifier: Apache-2.0
package maglev

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSizesArePrimes(t *testing.T) {
	want := []int{251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65537, 131071, 262139, 524287, 1048573}
	if got := Sizes(); !slices.Equal(got, want) {
		t.Fatalf("Sizes() = %v, want %v", got, want)
	}
	for _, m := range Sizes() {
		// Trial division written out again, so isPrime is not checking itself.
		for d := 2; d*d <= m; d++ {
			if m%d == 0 {
				t.Errorf("size %d is divisible by %d", m, d)
			}
		}
		if err := CheckSize(m); err != nil {
			t.Errorf("CheckSize(%d): %v", m, err)
		}
	}
	if !slices.Contains(Sizes(), DefaultSize) || slices.Max(Sizes()) != MaxSize {
		t.Errorf("DefaultSize %d and MaxSize %d must be listed, MaxSize last", DefaultSize, MaxSize)
	}
	Sizes()[0] = 7
	if Sizes()[0] != 251 {
		t.Errorf("Sizes() shares its slice")
	}
}

func TestSizeFor(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{-1, 251}, {0, 251}, {1, 251}, {2, 251}, {3, 509}, {5, 509}, {6, 1021},
		{100, 16381}, {327, 32749}, {328, 65537}, {655, 65537}, {656, 131071},
		{1000, 131071}, {10485, 1048573}, {10486, 1048573}, {1 << 30, 1048573},
	} {
		if got := SizeFor(c.n); got != c.want {
			t.Errorf("SizeFor(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	for n := 1; n <= 10485; n++ {
		m := SizeFor(n)
		if m < 100*n {
			t.Fatalf("SizeFor(%d) = %d < 100·n", n, m)
		}
		if i := slices.Index(Sizes(), m); i > 0 && Sizes()[i-1] >= 100*n {
			t.Fatalf("SizeFor(%d) = %d, but %d is enough", n, m, Sizes()[i-1])
		}
	}
}

func TestCheckSize(t *testing.T) {
	for _, m := range []int{2, 3, 13, 65521, 65537, MaxSize} {
		if err := CheckSize(m); err != nil {
			t.Errorf("CheckSize(%d): %v", m, err)
		}
	}
	for _, m := range []int{-13, 0, 1, 4, 9, 65536, 1048575, 1048583} {
		err := CheckSize(m)
		if err == nil {
			t.Errorf("CheckSize(%d) accepted it", m)
		} else if !strings.Contains(err.Error(), strconv.Itoa(m)) {
			t.Errorf("CheckSize(%d): %q does not name the size", m, err)
		}
	}
}
