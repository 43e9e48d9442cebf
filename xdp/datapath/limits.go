// SPDX-License-Identifier: Apache-2.0
package datapath

// The limits of a gateway datapath's ids and tables. datapath.h defines the same numbers for the
// BPF programs (TestHeaderMatchesGo), and the XDP loader checks its maps against them at load.
const (
	// MaxVIPs bounds the VIP ids: a VIP frontend's id is 1 to MaxVIPs-1 (VIP:port:proto
	// entries: 10,000 services with several ports each).
	MaxVIPs = 65536
	// MaxBackends bounds the backend ids: 1 to MaxBackends-1 (10,000 services of 10 backends,
	// with room to spare).
	MaxBackends = 262144
	// MaxMaglevM is the largest Maglev table of one frontend, a prime.
	MaxMaglevM = 1048573
	// MaxReverseCandidates is how many frontends an ambiguous endpoint's reverse NAT entry
	// lists (ReverseNAT.Candidates). Each costs a reply without conntrack entry a few map
	// lookups.
	MaxReverseCandidates = 4
)

// CheckVIPID returns an error wrapping ErrOutOfRange unless id is a usable VIP id.
func CheckVIPID(id VIPID) error {
	if id == 0 || id >= MaxVIPs {
		return errorf(ErrOutOfRange, "VIP id %d: want 1 to %d", id, MaxVIPs-1)
	}
	return nil
}

// CheckBackendID returns an error wrapping ErrOutOfRange unless id is a usable backend id.
func CheckBackendID(id BackendID) error {
	if id == 0 || id >= MaxBackends {
		return errorf(ErrOutOfRange, "backend id %d: want 1 to %d", id, MaxBackends-1)
	}
	return nil
}

// CheckTableSize returns an error wrapping ErrOutOfRange unless n is a usable Maglev table
// size (the datapath does not check that it is prime: lb/maglev does).
func CheckTableSize(n int) error {
	if n <= 0 || n > MaxMaglevM {
		return errorf(ErrOutOfRange, "Maglev table size %d: want 1 to %d", n, MaxMaglevM)
	}
	return nil
}
