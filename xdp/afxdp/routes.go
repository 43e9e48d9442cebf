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
	// routeRefresh is how often the copy is read again: route changes take effect within it.
	routeRefresh = time.Second
	// maxTableRoutes bounds the copy: a namespace with more routes (a full BGP table) is asked
	// route by route instead (RouteGet, a netlink round trip per new destination).
	maxTableRoutes = 65536
)

// route is one route of the copy: its type, and where it sends (one next hop, or several:
// multipath).
type route struct {
	typ  int
	hops []routeHop
}

// routeHop is a next hop: the egress interface and the gateway (invalid: on link).
type routeHop struct {
	link int
	gw   netip.Addr
}

// routeTable is a copy of the kernel's main and local routing tables, matched by longest
// prefix in Go: a destination the Resolver has not cached costs a few map lookups instead of a
// netlink round trip, which matters on the reply path, where every client is a destination.
// Policy routing rules are not applied (the main table is the one asked, as RouteGet without a
// source or an ingress interface mostly does).
type routeTable struct {
	v4     [33]map[[4]byte]route
	v6     [129]map[[16]byte]route
	local  map[netip.Addr]int // local table: address -> type (local, broadcast)
	loaded time.Time
	seed   maphash.Seed
}

// loadRoutes reads the main and local tables of h's namespace; ok is false when there are more
// than maxTableRoutes routes (or they cannot be read): ask RouteGet then.
func loadRoutes(h *netlink.Handle, now time.Time) (*routeTable, bool) {
	t := &routeTable{local: map[netip.Addr]int{}, loaded: now, seed: maphash.MakeSeed()}
	n := 0
	err := h.RouteListFilteredIter(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC},
		netlink.RT_FILTER_TABLE, func(rt netlink.Route) bool {
			if n++; n > maxTableRoutes {
				return false
			}
			t.add(rt)
			return true
		})
	if err != nil || n > maxTableRoutes {
		return nil, false
	}
	return t, true
}

// add puts a route of the main or local table in the copy.
func (t *routeTable) add(rt netlink.Route) {
	var pfx netip.Prefix
	if rt.Dst != nil {
		a, ok := netip.AddrFromSlice(rt.Dst.IP)
		ones, _ := rt.Dst.Mask.Size()
		if !ok {
			return
		}
		pfx = netip.PrefixFrom(a.Unmap(), ones).Masked()
	} else if rt.Family == netlink.FAMILY_V6 {
		pfx = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	} else {
		pfx = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	switch rt.Table {
	case unix.RT_TABLE_LOCAL:
		if (rt.Type == unix.RTN_LOCAL || rt.Type == unix.RTN_BROADCAST) && pfx.IsSingleIP() {
			t.local[pfx.Addr()] = rt.Type
		}
		return
	case unix.RT_TABLE_MAIN:
	default:
		return
	}
	r := route{typ: rt.Type}
	if len(rt.MultiPath) > 0 {
		for _, nh := range rt.MultiPath {
			r.hops = append(r.hops, routeHop{link: nh.LinkIndex, gw: addrOr(nh.Gw)})
		}
	} else {
		r.hops = []routeHop{{link: rt.LinkIndex, gw: addrOr(rt.Gw)}}
	}
	if pfx.Addr().Is4() {
		m := &t.v4[pfx.Bits()]
		if *m == nil {
			*m = map[[4]byte]route{}
		}
		(*m)[pfx.Addr().As4()] = r
	} else {
		m := &t.v6[pfx.Bits()]
		if *m == nil {
			*m = map[[16]byte]route{}
		}
		(*m)[pfx.Addr().As16()] = r
	}
}

func addrOr(ip []byte) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// lookup returns the route dst takes: its type, egress interface and gateway (invalid: on
// link); ok is false when no route matches. A multipath route's hop is chosen by a hash of dst.
func (t *routeTable) lookup(dst netip.Addr) (typ, link int, gw netip.Addr, ok bool) {
	if typ, local := t.local[dst]; local {
		return typ, 0, netip.Addr{}, true
	}
	var r route
	found := false
	if dst.Is4() {
		for bits := 32; bits >= 0 && !found; bits-- {
			if m := t.v4[bits]; m != nil {
				p, _ := dst.Prefix(bits)
				r, found = m[p.Addr().As4()]
			}
		}
	} else {
		for bits := 128; bits >= 0 && !found; bits-- {
			if m := t.v6[bits]; m != nil {
				p, _ := dst.Prefix(bits)
				r, found = m[p.Addr().As16()]
			}
		}
	}
	if !found || len(r.hops) == 0 {
		return 0, 0, netip.Addr{}, false
	}
	h := r.hops[0]
	if len(r.hops) > 1 {
		b := dst.As16()
		h = r.hops[maphash.Bytes(t.seed, b[:])%uint64(len(r.hops))]
	}
	return r.typ, h.link, h.gw, true
}
