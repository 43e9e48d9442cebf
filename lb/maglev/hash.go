// SPDX-License-Identifier: Apache-2.0
package maglev

// The hash of (seed, name) that places a backend's permutation. It is part of the table format:
// changing anything here changes every table, which TestGolden catches.
const (
	fnvOffset64 = 14695981039346656037 // FNV-1a 64 offset basis
	fnvPrime64  = 1099511628211        // FNV-1a 64 prime
	skipSalt    = 0x9e3779b97f4a7c15   // ⌊2^64/φ⌋: separates the skip stream from the offset stream
)

// nameHash is FNV-1a 64 over the seed's 4 bytes, least significant first, then the name's bytes.
func nameHash(seed uint32, name string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < 4; i++ {
		h ^= uint64(byte(seed >> (8 * i)))
		h *= fnvPrime64
	}
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= fnvPrime64
	}
	return h
}

// fmix64 is MurmurHash3's 64-bit finalizer: every input bit flips each output bit with
// probability about 1/2, which plain FNV-1a does not achieve for its last bytes.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// permutation returns the offset (0..m-1) and skip (1..m-1) of name's permutation of a table of
// m slots, m a prime ≥ 2: with h = nameHash(seed, name),
//
//	offset = fmix64(h) mod m
//	skip   = fmix64(h XOR 0x9e3779b97f4a7c15) mod (m-1) + 1
//
// Because m is prime and 0 < skip < m, (offset + j·skip) mod m visits every slot once as j runs
// over 0..m-1.
func permutation(seed uint32, name string, m int) (offset, skip uint32) {
	h := nameHash(seed, name)
	offset = uint32(fmix64(h) % uint64(m))
	skip = uint32(fmix64(h^skipSalt)%uint64(m-1)) + 1
	return offset, skip
}
