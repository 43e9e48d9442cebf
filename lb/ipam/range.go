// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
)

// Range is an inclusive range of addresses of one family, First ≤ Last. A CIDR is the range
// from its first to its last address.
type Range struct {
	// First and Last are the range's lowest and highest addresses, both included; neither is
	// IPv4-mapped or zoned.
	First, Last netip.Addr
}

// reserved are the prefixes a pool may not touch: no VIP can be one of these.
var reserved = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// ParseRange parses a pool's address range: a CIDR ("198.18.100.0/24", "2001:db8:100::/120"),
// two addresses of one family joined by '-' ("198.18.101.10-198.18.101.20"), or one address.
// A CIDR must have no host bits set; a range must not touch loopback, multicast, link-local
// or unspecified addresses, which cannot be VIPs.
func ParseRange(s string) (Range, error) {
	s = strings.TrimSpace(s)
	var r Range
	switch {
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Range{}, fmt.Errorf("%q is not a CIDR (want an address and a prefix length, such as 198.18.100.0/24 or 2001:db8:100::/120)", s)
		}
		if p.Addr().Is4In6() {
			return Range{}, fmt.Errorf("%s is an IPv4-mapped IPv6 prefix; write it in IPv4 form", p)
		}
		if p.Masked() != p {
			return Range{}, fmt.Errorf("%s has host bits set (did you mean %s?)", p, p.Masked())
		}
		r = RangeOf(p)
	case strings.Contains(s, "-"):
		a, b, _ := strings.Cut(s, "-")
		first, err1 := parseAddr(strings.TrimSpace(a))
		last, err2 := parseAddr(strings.TrimSpace(b))
		switch {
		case err1 != nil:
			return Range{}, fmt.Errorf("range %q: %w", s, err1)
		case err2 != nil:
			return Range{}, fmt.Errorf("range %q: %w", s, err2)
		case first.Is4() != last.Is4():
			return Range{}, fmt.Errorf("range %q mixes IPv4 and IPv6", s)
		case last.Less(first):
			return Range{}, fmt.Errorf("range %q ends before it starts (write the lower address first)", s)
		}
		r = Range{First: first, Last: last}
	default:
		a, err := parseAddr(s)
		if err != nil {
			return Range{}, fmt.Errorf("%w (want a CIDR such as 198.18.100.0/24, a range such as 198.18.101.10-198.18.101.20, or one address)", err)
		}
		r = Range{First: a, Last: a}
	}
	for _, rs := range reserved {
		if r.Overlaps(RangeOf(rs.prefix)) {
			return Range{}, fmt.Errorf("%s overlaps %s (%s), which cannot be a VIP", r, rs.prefix, rs.what)
		}
	}
	return r, nil
}

// parseAddr parses one address of a range: no zone, not IPv4-mapped.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s has a zone; a VIP cannot", a)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%s is an IPv4-mapped IPv6 address; write it in IPv4 form", a)
	}
	return a, nil
}

// RangeOf returns the range of prefix p's addresses (p masked first).
func RangeOf(p netip.Prefix) Range {
	p = p.Masked()
	b := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 12
	}
	for i := p.Bits() + off*8; i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		last = last.Unmap()
	}
	return Range{First: p.Addr(), Last: last}
}

// Family returns the range's family.
func (r Range) Family() Family { return FamilyOf(r.First) }

// Contains reports whether a is in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.IsValid() && a.Is4() == r.First.Is4() && a.Zone() == "" && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether r and o share an address.
func (r Range) Overlaps(o Range) bool {
	return r.First.Is4() == o.First.Is4() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// String returns the range as ParseRange reads it: one address, a CIDR when the range is
// exactly one, or "first-last".
func (r Range) String() string {
	if r.First == r.Last {
		return r.First.String()
	}
	for bits := 0; bits <= r.First.BitLen(); bits++ {
		p := netip.PrefixFrom(r.First, bits)
		if p.Masked().Addr() == r.First && RangeOf(p).Last == r.Last {
			return p.String()
		}
	}
	return r.First.String() + "-" + r.Last.String()
}

// Size returns the number of addresses in r, saturating at math.MaxUint64 (an IPv6 range may
// hold up to 2^128).
func (r Range) Size() uint64 {
	hi, lo := sub128(r.Last, r.First)
	if hi != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

// sub128 returns a - b as a 128-bit number (a ≥ b, same family).
func sub128(a, b netip.Addr) (hi, lo uint64) {
	ah, al := split128(a)
	bh, bl := split128(b)
	lo = al - bl
	borrow := uint64(0)
	if al < bl {
		borrow = 1
	}
	return ah - bh - borrow, lo
}

// split128 returns a's 16-byte form as two big-endian halves.
func split128(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return hi, lo
}

// buggy reports whether a is an IPv4 address ending in .0 or .255.
func buggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// buggyCount returns how many IPv4 addresses of r end in .0 or .255.
func buggyCount(r Range) uint64 {
	if !r.First.Is4() {
		return 0
	}
	f, l := r.First.As4(), r.Last.As4()
	first := int64(f[0])<<24 | int64(f[1])<<16 | int64(f[2])<<8 | int64(f[3])
	last := int64(l[0])<<24 | int64(l[1])<<16 | int64(l[2])<<8 | int64(l[3])
	// count(x ≡ k mod 256, first ≤ x ≤ last) = ⌊(last-k)/256⌋ - ⌊(first-1-k)/256⌋, floors
	// of possibly negative numbers.
	floorDiv := func(a int64) int64 {
		if a < 0 {
			return -((-a + 255) / 256)
		}
		return a / 256
	}
	var n int64
	for _, k := range []int64{0, 255} {
		n += floorDiv(last-k) - floorDiv(first-1-k)
	}
	return uint64(n)
}
