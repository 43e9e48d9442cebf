// SPDX-License-Identifier: Apache-2.0
package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Route is one announced host route. Its next hop is always the session's local address.
type Route struct {
	// Prefix is the VIP as a host route: an IPv4 /32 or an IPv6 /128.
	Prefix netip.Prefix
	// Communities are RFC 1997 communities, each (ASN<<16 | value); ParseCommunity reads
	// the "65000:100" form.
	Communities []uint32
	// LargeCommunities are RFC 8092 large communities.
	LargeCommunities []LargeCommunity
	// LocalPref, when set, is sent to iBGP peers (eBGP peers never get LOCAL_PREF).
	LocalPref *uint32
	// MED, when set, is sent as MULTI_EXIT_DISC.
	MED *uint32
}

// LargeCommunity is an RFC 8092 large community, written "global:local1:local2".
type LargeCommunity struct {
	// Global is the global administrator (usually an AS number); Local1 and Local2 are the
	// two local data parts.
	Global, Local1, Local2 uint32
}

// String returns the community in "global:local1:local2" form.
func (c LargeCommunity) String() string {
	return fmt.Sprintf("%d:%d:%d", c.Global, c.Local1, c.Local2)
}

// ParseCommunity parses an RFC 1997 community written "ASN:value" (each 0–65535).
func ParseCommunity(s string) (uint32, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("community %q: want ASN:value", s)
	}
	hi, err1 := strconv.ParseUint(a, 10, 16)
	lo, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: want two numbers 0-65535", s)
	}
	return uint32(hi)<<16 | uint32(lo), nil
}

// ParseLargeCommunity parses an RFC 8092 large community written "global:local1:local2".
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return LargeCommunity{}, fmt.Errorf("large community %q: want global:local1:local2", s)
	}
	var v [3]uint32
	for i, x := range f {
		n, err := strconv.ParseUint(x, 10, 32)
		if err != nil {
			return LargeCommunity{}, fmt.Errorf("large community %q: want three numbers 0-4294967295", s)
		}
		v[i] = uint32(n)
	}
	return LargeCommunity{v[0], v[1], v[2]}, nil
}

// Validate checks that the route is a host route.
func (r Route) Validate() error {
	p := r.Prefix
	switch {
	case !p.IsValid():
		return fmt.Errorf("route %v: invalid prefix", p)
	case p.Addr().Is4In6() || p.Addr().Zone() != "":
		return fmt.Errorf("route %v: not a plain IPv4 or IPv6 prefix", p)
	case p.Bits() != p.Addr().BitLen():
		return fmt.Errorf("route %v: must be a /32 or /128 host route", p)
	case p.Addr().IsUnspecified() || p.Addr().IsMulticast():
		return fmt.Errorf("route %v: not a unicast address", p)
	}
	return nil
}

// Equal reports whether r and o announce the same thing: the same prefix with the same
// attributes, in the same order.
func (r Route) Equal(o Route) bool {
	return r.Prefix == o.Prefix && slices.Equal(r.Communities, o.Communities) &&
		slices.Equal(r.LargeCommunities, o.LargeCommunities) &&
		optEqual(r.LocalPref, o.LocalPref) && optEqual(r.MED, o.MED)
}

// optEqual reports whether two optional attributes are both unset or hold the same value.
func optEqual(a, b *uint32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Clone returns a deep copy of r: it shares no slice or pointer with r.
func (r Route) Clone() Route {
	r.Communities = slices.Clone(r.Communities)
	r.LargeCommunities = slices.Clone(r.LargeCommunities)
	if r.LocalPref != nil {
		v := *r.LocalPref
		r.LocalPref = &v
	}
	if r.MED != nil {
		v := *r.MED
		r.MED = &v
	}
	return r
}
