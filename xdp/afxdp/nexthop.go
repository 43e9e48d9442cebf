// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"context"
	"errors"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"golang.org/x/sys/unix"
)

// Resolver caps.
const (
	// negativeTTL is how long a destination whose neighbour is unknown stays so before the
	// kernel is asked again (its resolution was started on the first miss).
	negativeTTL = 20 * time.Millisecond
	// maxCachedHops bounds the per-destination cache; a full cache starts afresh.
	maxCachedHops = 1 << 16
)

// Resolver answers next-hop lookups from the kernel's routing and neighbour tables over
// netlink, as bpf_fib_lookup answers the XDP datapath, and caches each destination's answer for
// a TTL (the XDP datapath's NextHopCacheTTL): route and neighbour changes take effect within it.
// A destination not cached is matched against a copy of the local and main routing tables
// (routeTable, kept by RefreshRoutes, and only where it answers as the kernel would: see
// loadRoutes); without one, or with the cache off, the kernel is asked per destination
// (RouteGet: a netlink round trip, ~10 µs). Neighbour tables are read whole, at most once per
// negativeTTL per interface. A destination whose neighbour is unknown gets its resolution
// started (a neighbour entry "used", NTF_USE, as a packet to it would); the engine holds its
// frames meanwhile.
// Its methods are safe for concurrent use.
type Resolver struct {
	h   *netlink.Handle
	ttl time.Duration

	mu     sync.Mutex
	cache  map[netip.Addr]cachedHop
	links  map[int]cachedLink
	neighs map[neighKey]cachedNeighbours
	// routes is the copy of the routing tables RefreshRoutes keeps (nil, or stale: ask the
	// kernel); seed picks a multipath route's hop, the same for a destination while the
	// Resolver lives.
	routes atomic.Pointer[routeTable]
	seed   maphash.Seed
	// sources caches Source's answers (the kernel's, per destination) for the TTL.
	sources map[netip.Addr]cachedSource
}

type cachedSource struct {
	src     netip.Addr
	expires time.Time
}

// RefreshRoutes reads the routing tables of h's namespace (the Resolver's) into the copy
// lookups match against, every routeRefresh until ctx ends, outside the packet path (h: a
// handle of its own, so that a dump never waits behind a lookup). While there is no copy (see
// loadRoutes: policy rules, TOS routes, too many routes; tried again every routeRetry), or it is
// stale, lookups ask the kernel per destination.
func (r *Resolver) RefreshRoutes(ctx context.Context, h *netlink.Handle) {
	for {
		t, ok := loadRoutes(h, time.Now(), r.seed)
		wait := routeRefresh
		if !ok {
			t, wait = nil, routeRetry
		}
		r.routes.Store(t)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

type cachedHop struct {
	hop     Hop
	kind    HopKind
	expires time.Time
}

type cachedLink struct {
	mac     net.HardwareAddr
	mtu     int
	expires time.Time
}

// NewResolver returns a resolver asking the network namespace h was opened in; ttl 0 means
// 500 ms, a negative ttl no cache (every lookup asks the kernel).
func NewResolver(h *netlink.Handle, ttl time.Duration) *Resolver {
	if ttl == 0 {
		ttl = datapath.DefaultNextHopCacheTTL
	}
	return &Resolver{h: h, ttl: ttl, cache: map[netip.Addr]cachedHop{}, links: map[int]cachedLink{},
		neighs: map[neighKey]cachedNeighbours{}, seed: maphash.MakeSeed(), sources: map[netip.Addr]cachedSource{}}
}

// Source implements NextHops: the preferred source address of the kernel's route to dst (the
// route's own, or the one the kernel picks for it), cached for the TTL.
func (r *Resolver) Source(dst netip.Addr) (netip.Addr, bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.sources[dst]; ok && now.Before(c.expires) {
		return c.src, c.src.IsValid()
	}
	var src netip.Addr
	if routes, err := r.h.RouteGet(dst.AsSlice()); err == nil && len(routes) > 0 {
		src = addrOr(routes[0].Src)
	}
	if r.ttl >= 0 {
		if len(r.sources) >= maxCachedHops {
			clear(r.sources)
		}
		r.sources[dst] = cachedSource{src: src, expires: now.Add(r.ttl)}
	}
	return src, src.IsValid()
}

// Lookup implements NextHops.
func (r *Resolver) Lookup(dst netip.Addr) (Hop, HopKind) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cache[dst]; ok && now.Before(c.expires) {
		return c.hop, c.kind
	}
	hop, kind := r.resolve(dst, now)
	if r.ttl < 0 {
		return hop, kind
	}
	ttl := r.ttl
	if kind != HopSend {
		ttl = min(ttl, negativeTTL)
	}
	if len(r.cache) >= maxCachedHops {
		clear(r.cache)
	}
	r.cache[dst] = cachedHop{hop: hop, kind: kind, expires: now.Add(ttl)}
	return hop, kind
}

// route returns the route to dst: from the copy of the routing tables when RefreshRoutes
// keeps one (and the cache is on), else from the kernel.
func (r *Resolver) route(dst netip.Addr, now time.Time) (typ, link int, gw netip.Addr, ok bool) {
	if t := r.routes.Load(); t != nil && r.ttl >= 0 && now.Sub(t.loaded) < 3*routeRefresh {
		return t.lookup(dst)
	}
	routes, err := r.h.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return 0, 0, netip.Addr{}, false
	}
	return routes[0].Type, routes[0].LinkIndex, addrOr(routes[0].Gw), true
}

func (r *Resolver) resolve(dst netip.Addr, now time.Time) (Hop, HopKind) {
	typ, link, gw, ok := r.route(dst, now)
	if !ok {
		return Hop{}, HopUnreachable
	}
	switch typ {
	case unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_ANYCAST:
		return Hop{}, HopLocal
	case unix.RTN_UNICAST:
	default:
		return Hop{}, HopUnreachable
	}
	l, err := r.link(link, now)
	if err != nil {
		return Hop{}, HopUnreachable
	}
	if !gw.IsValid() {
		gw = dst // on link
	}
	family := netlink.FAMILY_V4
	if gw.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := r.neighbours(link, family, now)
	if err != nil {
		return Hop{}, HopUnreachable
	}
	if mac, ok := neighs[gw]; ok {
		return Hop{Ifindex: link, Src: l.mac, Dst: mac, MTU: l.mtu}, HopSend
	}
	// Start resolution as a packet to gw would: the next lookup after negativeTTL finds it.
	_ = r.h.NeighSet(&netlink.Neigh{LinkIndex: link, Family: family, IP: gw.AsSlice(),
		Flags: unix.NTF_USE})
	return Hop{}, HopNoNeigh
}

// neighKey names one neighbour table: an interface's, of one family.
type neighKey struct{ link, family int }

// cachedNeighbours is a neighbour table's usable entries, dumped at once: one dump serves every
// destination behind the interface for negativeTTL.
type cachedNeighbours struct {
	macs    map[netip.Addr]net.HardwareAddr
	expires time.Time
}

// neighbours returns the usable neighbour entries of link (address -> MAC).
func (r *Resolver) neighbours(link, family int, now time.Time) (map[netip.Addr]net.HardwareAddr, error) {
	k := neighKey{link, family}
	if c, ok := r.neighs[k]; ok && now.Before(c.expires) {
		return c.macs, nil
	}
	list, err := r.h.NeighList(link, family)
	if err != nil {
		return nil, err
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_PERMANENT | netlink.NUD_STALE |
		netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_NOARP
	macs := map[netip.Addr]net.HardwareAddr{}
	for _, n := range list {
		if a, ok := netip.AddrFromSlice(n.IP); ok && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
			macs[a.Unmap()] = n.HardwareAddr
		}
	}
	r.neighs[k] = cachedNeighbours{macs: macs, expires: now.Add(negativeTTL)}
	return macs, nil
}

func (r *Resolver) link(index int, now time.Time) (cachedLink, error) {
	if l, ok := r.links[index]; ok && now.Before(l.expires) {
		return l, nil
	}
	link, err := r.h.LinkByIndex(index)
	if err != nil {
		return cachedLink{}, err
	}
	a := link.Attrs()
	if len(a.HardwareAddr) != 6 {
		return cachedLink{}, errors.New("not an Ethernet interface")
	}
	l := cachedLink{mac: a.HardwareAddr, mtu: a.MTU, expires: now.Add(r.ttl)}
	r.links[index] = l
	return l, nil
}
