// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"errors"
	"hash/maphash"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestRouteTableMatchesKernel: the Resolver's copy of the routing tables sends every
// destination where the kernel's own lookup (RouteGet) does: connected, host, default, more
// and less specific routes, multipath, blackhole and unreachable, local addresses, IPv4 and
// IPv6.
func TestRouteTableMatchesKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the route test needs root (netns); run it with `make test` as root")
	}
	p := netlab.Prefix()
	ns, peer := netlab.New(t, p+"g"), netlab.New(t, p+"p")
	netlab.Veth(t, ns, "e0", "02:00:00:00:01:01", peer, "p0", "02:00:00:00:02:01")
	netlab.Veth(t, ns, "e1", "02:00:00:00:01:02", peer, "p1", "02:00:00:00:02:02")
	for _, c := range []string{
		"addr add 198.18.0.1/24 dev e0",
		"addr add 198.18.1.1/24 dev e1",
		"addr add 2001:db8::1/64 dev e0 nodad",
		"addr add 2001:db8:1::1/64 dev e1 nodad",
		"route add default via 198.18.0.2",
		"route add 198.18.64.0/18 via 198.18.1.2",
		"route add 198.18.70.0/24 via 198.18.0.3",
		"route add 198.18.70.9/32 via 198.18.1.9",
		"route add blackhole 198.18.80.0/24",
		"route add unreachable 198.18.81.0/24",
		"route add 198.18.90.0/24 nexthop via 198.18.0.2 nexthop via 198.18.1.2",
		"-6 route add default via 2001:db8::2",
		"-6 route add 2001:db8:40::/48 via 2001:db8:1::2",
		"-6 route add blackhole 2001:db8:50::/48",
		"-6 route add ::ffff:198.18.200.0/120 via 2001:db8::2", // an IPv4-mapped IPv6 prefix
		"route add 198.18.100.0/24 via 198.18.1.2 metric 600",  // the same prefix twice:
		"route add 198.18.100.0/24 via 198.18.0.2 metric 100",  // the lower metric wins
		"route add local 198.18.250.0/24 dev e0",               // local table, a range
	} {
		ns.MustIP(t, c)
	}
	dsts := []string{
		"198.18.0.7", "198.18.1.7", "198.18.5.5", "198.18.64.1", "198.18.70.1", "198.18.70.9",
		"198.18.71.1", "198.18.80.1", "198.18.81.1", "198.18.90.1", "198.18.90.2", "198.18.0.1",
		"198.18.1.1", "198.18.0.255",
		"198.18.100.9", "198.18.250.7",
		"2001:db8::7", "2001:db8:1::7", "2001:db8:40::1", "2001:db8:40:1::1", "2001:db8:50::1",
		"2001:db8:99::1", "2001:db8::1", "::ffff:198.18.200.5",
	}
	err := ns.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		table, ok := loadRoutes(h, time.Now(), maphash.MakeSeed())
		if !ok {
			return errors.New("the routes could not be copied")
		}
		for _, s := range dsts {
			dst := netip.MustParseAddr(s)
			typ, link, gw, ok := table.lookup(dst)
			if dst.Is4In6() {
				// netlink's RouteGet would ask for the IPv4 address: check the IPv6 route.
				if !ok || typ != unix.RTN_UNICAST || gw != netip.MustParseAddr("2001:db8::2") {
					t.Errorf("%s: type %d via %s (found %v), want the IPv4-mapped IPv6 route via 2001:db8::2", dst, typ, gw, ok)
				}
				continue
			}
			kernel, kerr := h.RouteGet(dst.AsSlice())
			dropped := !ok || typ == unix.RTN_BLACKHOLE || typ == unix.RTN_UNREACHABLE || typ == unix.RTN_PROHIBIT
			if kerr != nil || len(kernel) == 0 {
				if !dropped {
					t.Errorf("%s: the kernel has no route (%v), the copy type %d via %d %s", dst, kerr, typ, link, gw)
				}
				continue
			}
			k := kernel[0]
			if typ != k.Type {
				t.Errorf("%s: type %d, the kernel's %d", dst, typ, k.Type)
				continue
			}
			if typ != unix.RTN_UNICAST {
				continue
			}
			if s == "198.18.90.1" || s == "198.18.90.2" { // multipath: either hop
				hops := []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.1.2")}
				if !slices.Contains(hops, gw) {
					t.Errorf("%s: via %s, not one of the multipath route's next hops", dst, gw)
				}
				continue
			}
			if link != k.LinkIndex || gw != addrOr(k.Gw) {
				t.Errorf("%s: via %d %s, the kernel's via %d %s", dst, link, gw, k.LinkIndex, addrOr(k.Gw))
			}
		}
		// What the copy saves per new destination (logged, not asserted).
		const n = 2000
		start := time.Now()
		for i := range n {
			table.lookup(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}))
		}
		copied := time.Since(start) / n
		start = time.Now()
		for i := range n {
			_, _ = h.RouteGet(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).AsSlice())
		}
		t.Logf("a new destination's route: %v from the copy, %v from the kernel (RouteGet)", copied, time.Since(start)/n)

		// A policy rule: the copy would not answer as the kernel does, so there is none.
		if err := ns.IP("rule add from 198.18.0.0/24 table 100"); err != nil {
			return err
		}
		if _, ok := loadRoutes(h, time.Now(), maphash.MakeSeed()); ok {
			t.Errorf("the routes were copied although a policy rule decides some lookups")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
