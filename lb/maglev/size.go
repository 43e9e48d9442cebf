// SPDX-License-Identifier: Apache-2.0
package maglev

import "fmt"

// DefaultSize is the table size of the Maglev paper and of Katran: 65537 slots, enough for the
// 100-slots-per-backend rule up to 655 backends.
const DefaultSize = 65537

// MaxSize is the largest table size: the largest the datapath accepts (xdp.SetMaglevTable) and
// the last entry of [Sizes].
const MaxSize = 1048573

// slotsPerBackend is the paper's advice: M at least 100 times the number of backends.
const slotsPerBackend = 100

// sizes are the table sizes SizeFor chooses from: primes, each roughly twice the previous one,
// so that growing a table at most doubles its memory.
var sizes = [...]int{
	251, 509, 1021, 2039, 4093, 8191, 16381, 32749,
	65537, 131071, 262139, 524287, 1048573,
}

// Sizes returns the table sizes [SizeFor] chooses from, in increasing order: primes from 251 to
// [MaxSize], each roughly twice the previous one. The slice is a copy.
func Sizes() []int {
	return append([]int(nil), sizes[:]...)
}

// SizeFor returns the table size for n backends: the smallest of [Sizes] that is at least 100·n,
// or [MaxSize] when none is (n > 10485). n ≤ 2 gives the smallest size, 251.
func SizeFor(n int) int {
	for _, m := range sizes {
		if n <= m/slotsPerBackend {
			return m
		}
	}
	return MaxSize
}

// CheckSize returns an error when m cannot be a table size: not a prime from 2 to MaxSize.
func CheckSize(m int) error {
	if m < 2 || m > MaxSize {
		return fmt.Errorf("maglev: table size %d out of range 2..%d", m, MaxSize)
	}
	if !isPrime(m) {
		return fmt.Errorf("maglev: table size %d is not a prime", m)
	}
	return nil
}

// isPrime reports whether n is a prime, by trial division (n ≤ MaxSize needs divisors to 1024).
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := 3; d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}
