// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/lb/kube"
)

// syncPodRoutes owns exactly the routes of its protocol: it adds, moves and removes them, and
// leaves other routes alone.
func TestSyncPodRoutes(t *testing.T) {
	p := netlab.Prefix()
	gw := netlab.New(t, p+"gw")
	peer := netlab.New(t, p+"peer")
	netlab.Veth(t, gw, "eth1", "02:00:00:00:60:01", peer, "eth0", "02:00:00:00:60:02")
	gw.MustIP(t, "addr add 198.18.60.1/24 dev eth1")
	gw.MustIP(t, "addr add 2001:db8:60::1/64 dev eth1 nodad")
	gw.MustIP(t, "link set eth1 up")
	// A route of someone else's to a Pod CIDR-like prefix: never touched.
	gw.MustIP(t, "route add 198.18.70.0/24 via 198.18.60.9")

	routes := func() string {
		out, err := gw.Cmd("ip", "-4", "route", "show", "proto", "120").CombinedOutput()
		if err != nil {
			t.Fatalf("ip route: %v: %s", err, out)
		}
		out6, err := gw.Cmd("ip", "-6", "route", "show", "proto", "120").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -6 route: %v: %s", err, out6)
		}
		return strings.TrimSpace(string(out) + string(out6))
	}
	sync := func(want []kube.PodRoute) {
		t.Helper()
		if err := gw.Do(func() error { return syncPodRoutes(want) }); err != nil {
			t.Fatal(err)
		}
	}
	r := func(p, via, node string) kube.PodRoute {
		return kube.PodRoute{Prefix: netip.MustParsePrefix(p), Via: netip.MustParseAddr(via), Node: node}
	}
	sync([]kube.PodRoute{r("198.18.64.0/24", "198.18.60.2", "n1"), r("198.18.65.0/24", "198.18.60.3", "n2"),
		r("2001:db8:64::/64", "2001:db8:60::2", "n1")})
	got := routes()
	for _, want := range []string{"198.18.64.0/24 via 198.18.60.2", "198.18.65.0/24 via 198.18.60.3", "2001:db8:64::/64 via 2001:db8:60::2"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes %q lack %q", got, want)
		}
	}
	// n2's CIDR moves to another node; n1's IPv4 CIDR goes.
	sync([]kube.PodRoute{r("198.18.65.0/24", "198.18.60.4", "n3"), r("2001:db8:64::/64", "2001:db8:60::2", "n1")})
	got = routes()
	if strings.Contains(got, "198.18.64.0") || !strings.Contains(got, "198.18.65.0/24 via 198.18.60.4") {
		t.Errorf("after the change: %q", got)
	}
	sync(nil)
	if got := routes(); got != "" {
		t.Errorf("after removing all: %q", got)
	}
	out, _ := gw.Cmd("ip", "route", "show", "198.18.70.0/24").CombinedOutput()
	if !strings.Contains(string(out), "via 198.18.60.9") {
		t.Errorf("a route xlb does not own was changed: %q", out)
	}
	// A Pod CIDR someone else routes already is left alone, with an error naming it.
	err := gw.Do(func() error { return syncPodRoutes([]kube.PodRoute{r("198.18.70.0/24", "198.18.60.2", "n1")}) })
	if err == nil || !strings.Contains(err.Error(), "does not own") {
		t.Errorf("error %v, want one saying the route is not xlb's", err)
	}
	out, _ = gw.Cmd("ip", "route", "show", "198.18.70.0/24").CombinedOutput()
	if !strings.Contains(string(out), "via 198.18.60.9") || strings.Contains(string(out), "proto 120") {
		t.Errorf("a route xlb does not own was taken over: %q", out)
	}
	// A route that cannot be made (no on-link next hop) is an error naming it; the others are made.
	err = gw.Do(func() error {
		return syncPodRoutes([]kube.PodRoute{r("198.18.66.0/24", "198.18.99.1", "far"), r("198.18.67.0/24", "198.18.60.5", "n5")})
	})
	if err == nil || !strings.Contains(err.Error(), "198.18.66.0/24") || !strings.Contains(err.Error(), "far") {
		t.Errorf("error %v, want one naming 198.18.66.0/24 and node far", err)
	}
	if !strings.Contains(routes(), "198.18.67.0/24 via 198.18.60.5") {
		t.Errorf("the good route was not made: %q", routes())
	}
}
