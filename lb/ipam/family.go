// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"net/netip"
)

// Family is an IP address family.
type Family uint8

// The address families.
const (
	// IPv4 is the IPv4 family.
	IPv4 Family = 4
	// IPv6 is the IPv6 family.
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("family %d", uint8(f))
}

// valid reports whether f is IPv4 or IPv6.
func (f Family) valid() bool { return f == IPv4 || f == IPv6 }

// FamilyOf returns the family of a (an IPv4-mapped IPv6 address is IPv6; unmap it first to
// treat it as IPv4).
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}
