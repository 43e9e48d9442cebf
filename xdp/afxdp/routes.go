// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"hash/maphash"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The Resolver's copy of the routing tables.
const (
	// routeRefresh is how often the copy is read again: route changes take effect within it
	// (plus the dump and the per-destination cache).
	routeRefresh = time.Second
	// routeRetry is how long a namespace whose tables cannot be copied (see loadRoutes) waits
	// before the next try.
	routeRetry = 30 * time.Second
	// maxTableRoutes bounds the copy: a namespace with more routes (a full BGP table) is asked
	// route by route instead (RouteGet, a netlink round trip per new destination).
	maxTableRoutes = 65536
)

// route is one route of the copy: its type and metric, and where it sends (one next hop, or
// several: multipath, each listed as often as its weight).
type route struct {
	typ    int
	metric int
	hops   []routeHop
}

// routeHop is a next hop: the egress interface and the gateway (invalid: on link).
type routeHop struct {
	link int
	gw   netip.Addr
}

// prefixMap holds routes by prefix length, for a longest-prefix match.
type prefixMap[K comparable] struct {
	byLen []map[K]route
}

// routeTable is a copy of the kernel's local and main routing tables, matched by longest prefix
// in Go: a destination the Resolver has not cached costs a few map lookups instead of a netlink
// round trip, which matters on the reply path, where every client is a destination. It is only
// made when it answers as the kernel would (see loadRoutes); otherwise the kernel is asked.
type routeTable struct {
	main4, local4 prefixMap[[4]byte]
	main6, local6 prefixMap[[16]byte]
	loaded        time.Time
	seed          maphash.Seed
}

// defaultRules reports whether rules are the kernel's own (local, main, default): then a
// lookup is the local table, then the main one (the default table is empty unless filled).
func defaultRules(rules []netlink.Rule) bool {
	for _, r := range rules {
		switch {
		case r.Priority == 0 && r.Table == unix.RT_TABLE_LOCAL:
		case r.Priority == 32766 && r.Table == unix.RT_TABLE_MAIN:
		case r.Priority == 32767 && r.Table == unix.RT_TABLE_DEFAULT:
		default:
			return false
		}
		if r.Src != nil || r.Dst != nil || r.Mark != 0 || r.Tos != 0 || r.IifName != "" || r.OifName != "" ||
			r.Invert || r.Goto > 0 || r.SuppressPrefixlen > 0 || r.SuppressIfgroup > 0 {
			return false
		}
	}
	return true
}

// loadRoutes copies the local and main tables of h's namespace. ok is false when the copy
// would not answer as the kernel does, and the kernel must be asked per destination: policy
// rules other than the kernel's own, routes in the default table, routes selected by TOS,
// more than maxTableRoutes routes, or a failed read.
func loadRoutes(h *netlink.Handle, now time.Time, seed maphash.Seed) (*routeTable, bool) {
	t := &routeTable{loaded: now, seed: seed}
	n, ok := 0, true
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := h.RuleList(family)
		if err != nil || !defaultRules(rules) {
			return nil, false
		}
		err = h.RouteListFilteredIter(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE,
			func(rt netlink.Route) bool {
				if n++; n > maxTableRoutes || rt.Tos != 0 || rt.Table == unix.RT_TABLE_DEFAULT {
					ok = false
					return false
				}
				t.add(rt, family)
				return true
			})
		if err != nil || !ok {
			return nil, false
		}
	}
	return t, true
}

// add puts a route of the local or main table in the copy (other tables are never asked:
// defaultRules).
func (t *routeTable) add(rt netlink.Route, family int) {
	var pfx netip.Prefix
	if rt.Dst != nil {
		a, ok := netip.AddrFromSlice(rt.Dst.IP)
		ones, bits := rt.Dst.Mask.Size()
		if !ok || (family == netlink.FAMILY_V4) != (bits == 32) {
			return
		}
		if family == netlink.FAMILY_V4 {
			a = a.Unmap() // a 4-byte form; an IPv6 route keeps its 16 bytes, mapped or not
		}
		if pfx = netip.PrefixFrom(a, ones); !pfx.IsValid() {
			return
		}
		pfx = pfx.Masked()
	} else if family == netlink.FAMILY_V6 {
		pfx = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	} else {
		pfx = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	r := route{typ: rt.Type, metric: rt.Priority}
	if len(rt.MultiPath) > 0 {
		for _, nh := range rt.MultiPath {
			if nh.Flags&unix.RTNH_F_DEAD != 0 {
				continue // the kernel skips a dead next hop
			}
			for range min(nh.Hops+1, 16) { // the weight, as the kernel counts it
				r.hops = append(r.hops, routeHop{link: nh.LinkIndex, gw: addrOr(nh.Gw)})
			}
		}
		if len(r.hops) == 0 {
			r.typ = unix.RTN_UNREACHABLE // every next hop dead
		}
	} else {
		r.hops = []routeHop{{link: rt.LinkIndex, gw: addrOr(rt.Gw)}}
	}
	switch {
	case rt.Table == unix.RT_TABLE_LOCAL && pfx.Addr().Is4():
		put(&t.local4, pfx.Bits(), pfx.Addr().As4(), r)
	case rt.Table == unix.RT_TABLE_LOCAL:
		put(&t.local6, pfx.Bits(), pfx.Addr().As16(), r)
	case rt.Table == unix.RT_TABLE_MAIN && pfx.Addr().Is4():
		put(&t.main4, pfx.Bits(), pfx.Addr().As4(), r)
	case rt.Table == unix.RT_TABLE_MAIN:
		put(&t.main6, pfx.Bits(), pfx.Addr().As16(), r)
	}
}

// put adds r unless the prefix already has a route of a lower metric (the one the kernel uses).
func put[K comparable](m *prefixMap[K], bits int, k K, r route) {
	if m.byLen == nil {
		m.byLen = make([]map[K]route, 129)
	}
	if m.byLen[bits] == nil {
		m.byLen[bits] = map[K]route{}
	}
	if old, ok := m.byLen[bits][k]; ok && old.metric <= r.metric {
		return
	}
	m.byLen[bits][k] = r
}

// match is the longest prefix of m that holds dst (key derives its key at a length).
func match[K comparable](m *prefixMap[K], maxBits int, key func(bits int) K) (route, bool) {
	if m.byLen == nil {
		return route{}, false
	}
	for bits := maxBits; bits >= 0; bits-- {
		if mm := m.byLen[bits]; mm != nil {
			if r, ok := mm[key(bits)]; ok {
				return r, true
			}
		}
	}
	return route{}, false
}

func addrOr(ip []byte) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// lookup returns the route dst takes, the local table first: its type, egress interface and
// gateway (invalid: on link); ok is false when no route matches. A multipath route's hop is
// chosen by a hash of dst (the same while the Resolver lives), weighted.
func (t *routeTable) lookup(dst netip.Addr) (typ, link int, gw netip.Addr, ok bool) {
	var r route
	if dst.Is4() {
		key := func(bits int) [4]byte { p, _ := dst.Prefix(bits); return p.Addr().As4() }
		if r, ok = match(&t.local4, 32, key); !ok {
			r, ok = match(&t.main4, 32, key)
		}
	} else {
		key := func(bits int) [16]byte { p, _ := dst.Prefix(bits); return p.Addr().As16() }
		if r, ok = match(&t.local6, 128, key); !ok {
			r, ok = match(&t.main6, 128, key)
		}
	}
	if !ok {
		return 0, 0, netip.Addr{}, false
	}
	if len(r.hops) == 0 {
		return r.typ, 0, netip.Addr{}, true
	}
	h := r.hops[0]
	if len(r.hops) > 1 {
		b := dst.As16()
		h = r.hops[maphash.Bytes(t.seed, b[:])%uint64(len(r.hops))]
	}
	return r.typ, h.link, h.gw, true
}
