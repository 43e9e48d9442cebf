// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"errors"
	"fmt"
	"net/netip"
)

// Errors a datapath's writes wrap (test them with errors.Is), so that a caller can tell what
// kind of input or state was refused whatever datapath refused it.
var (
	// ErrOutOfRange: an id or a table size outside the limits (MaxVIPs, MaxBackends,
	// MaxMaglevM).
	ErrOutOfRange = errors.New("out of range")
	// ErrBadAddress: no address, an address with a zone, or one of the wrong family.
	ErrBadAddress = errors.New("unusable address")
	// ErrBadProtocol: a protocol other than TCP and UDP.
	ErrBadProtocol = errors.New("protocol not balanced (TCP and UDP are)")
	// ErrUnknownVIP: a VIP id no frontend has.
	ErrUnknownVIP = errors.New("no such VIP")
	// ErrIDInUse: a VIP id another frontend has.
	ErrIDInUse = errors.New("id in use")
	// ErrFull: no room left (the Maglev slot array, a map of fixed size).
	ErrFull = errors.New("no room")
)

// errorf returns an error that wraps sentinel, with the message format makes.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}

// CheckAddr returns an error wrapping ErrBadAddress unless a is an address without zone.
func CheckAddr(a netip.Addr) error {
	if !a.IsValid() {
		return errorf(ErrBadAddress, "no address")
	}
	if a.Zone() != "" {
		return errorf(ErrBadAddress, "address %s has a zone", a)
	}
	return nil
}

// CheckFrontend returns an error wrapping ErrBadAddress or ErrBadProtocol unless f can be a
// gateway frontend.
func CheckFrontend(f Frontend) error {
	if err := CheckAddr(f.Addr); err != nil {
		return fmt.Errorf("VIP %s: %w", f, err)
	}
	if !f.Proto.Valid() {
		return fmt.Errorf("VIP %s: %w", f, ErrBadProtocol)
	}
	return nil
}

// CheckSourceRanges returns an error wrapping ErrBadAddress unless every range is a prefix of
// vip's family written in its own form (IPv4 prefixes as IPv4).
func CheckSourceRanges(vip netip.Addr, ranges []netip.Prefix) error {
	for _, p := range ranges {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Is4() != vip.Unmap().Is4() {
			return errorf(ErrBadAddress, "source range %s: not a prefix of the VIP's family (write IPv4 prefixes in IPv4 form)", p)
		}
	}
	return nil
}

// CheckCandidates returns an error wrapping ErrOutOfRange if the candidate ids have a gap: the
// datapath stops at the first 0, so the used ones must come first.
func CheckCandidates(c [MaxReverseCandidates]VIPID) error {
	for i, id := range c {
		if id != 0 {
			continue
		}
		for _, later := range c[i+1:] {
			if later != 0 {
				return errorf(ErrOutOfRange, "candidate VIP ids %v have a gap", c)
			}
		}
		break
	}
	return nil
}
