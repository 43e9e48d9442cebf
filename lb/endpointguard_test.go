// SPDX-License-Identifier: Apache-2.0
package lb

import (
	"net/netip"
	"strings"
	"testing"
)

// testGuard is a cluster: Pods in 198.18.64.0/20 and 2001:db8:64::/56, nodes 198.18.0.11-12
// and 2001:db8::11, a pool 198.18.100.0/24 (and 198.18.101.10-20), a Service holding
// 198.18.102.7 outside every pool, cluster IPs in 198.18.96.0/24 and one outside it
// (198.18.97.1), an external IP 198.18.99.9, a reserved gateway 198.18.1.1.
func testGuard() *EndpointGuard {
	g := &EndpointGuard{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/20"), netip.MustParsePrefix("2001:db8:64::/56")}}
	for _, n := range []string{"198.18.0.11", "198.18.0.12", "2001:db8::11"} {
		g.Reserve(netip.MustParseAddr(n), KindNode)
	}
	g.Reserve(netip.MustParseAddr("198.18.102.7"), KindFrontend)
	g.Reserve(netip.MustParseAddr("198.18.99.9"), KindFrontend)
	g.Reserve(netip.MustParseAddr("198.18.97.1"), KindClusterIP)
	// A node's address that is also an external IP (kube-proxy answers there) stays a frontend.
	g.Reserve(netip.MustParseAddr("198.18.0.12"), KindFrontend)
	g.Reserve(netip.MustParseAddr("198.18.0.12"), KindNode)
	g.Ranges = []AddrRange{
		PrefixRange(netip.MustParsePrefix("198.18.100.0/24"), KindFrontend),
		{First: netip.MustParseAddr("198.18.101.10"), Last: netip.MustParseAddr("198.18.101.20"), Kind: KindFrontend},
		PrefixRange(netip.MustParsePrefix("198.18.96.0/24"), KindClusterIP),
		PrefixRange(netip.MustParsePrefix("198.18.1.1/32"), KindReserved),
		PrefixRange(netip.MustParsePrefix("2001:db8:96::/112"), KindClusterIP),
	}
	return g
}

// TestEndpointGuard: hostile endpoint addresses a tenant can write into an EndpointSlice, each
// refused with its reason, and the Pods that must keep working.
func TestEndpointGuard(t *testing.T) {
	g := testGuard()
	pod := func(a, ns string) EndpointRef {
		return EndpointRef{Addr: netip.MustParseAddr(a), Pod: true, PodNamespace: ns}
	}
	bare := func(a string) EndpointRef { return EndpointRef{Addr: netip.MustParseAddr(a)} }
	external := []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24"), netip.MustParsePrefix("198.18.0.11/32")}
	for _, c := range []struct {
		name    string
		e       EndpointRef
		allowed []netip.Prefix
		want    EndpointRefusal
	}{
		{"a Pod of the namespace", pod("198.18.64.5", "team-a"), nil, ""},
		{"a Pod, targetRef without namespace", pod("198.18.64.5", ""), nil, ""},
		{"an IPv6 Pod", pod("2001:db8:64::5", "team-a"), nil, ""},
		{"a Pod address without targetRef (a manual slice)", bare("198.18.65.1"), nil, ""},
		{"another namespace's Pod", pod("198.18.64.9", "team-b"), nil, RefusedOtherNamespace},
		{"another namespace's Pod, allowed prefix", pod("198.18.200.9", "team-b"), external, RefusedOtherNamespace},
		{"a node", bare("198.18.0.11"), nil, RefusedNode},
		{"a node as a Pod of the namespace (forged targetRef)", pod("198.18.0.11", "team-a"), nil, RefusedNode},
		{"an IPv6 node", bare("2001:db8::11"), nil, RefusedNode},
		{"a node the pool allows (hostNetwork backends)", bare("198.18.0.11"), external, ""},
		{"a node that is also an external IP, allowed", bare("198.18.0.12"), []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, RefusedFrontend},
		{"a VIP of a pool", pod("198.18.100.1", "team-a"), nil, RefusedFrontend},
		{"a VIP of a pool, allowed prefix over it", bare("198.18.100.1"), []netip.Prefix{netip.MustParsePrefix("198.18.100.0/24")}, RefusedFrontend},
		{"a pool's range end", bare("198.18.101.20"), nil, RefusedFrontend},
		{"just past a pool's range", bare("198.18.101.21"), nil, RefusedOutsidePods},
		{"a VIP held outside every pool", bare("198.18.102.7"), nil, RefusedFrontend},
		{"an external IP", bare("198.18.99.9"), nil, RefusedFrontend},
		{"a cluster IP in the service CIDR", bare("198.18.96.10"), nil, RefusedClusterIP},
		{"the service CIDR's last address", bare("198.18.96.255"), external, RefusedClusterIP},
		{"an IPv6 cluster IP", bare("2001:db8:96::a"), nil, RefusedClusterIP},
		{"a cluster IP outside the known CIDRs", bare("198.18.97.1"), nil, RefusedClusterIP},
		{"a reserved gateway", bare("198.18.1.1"), nil, RefusedReserved},
		{"a reserved gateway, allowed", bare("198.18.1.1"), []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}, RefusedReserved},
		{"outside the Pod networks", bare("198.18.30.1"), nil, RefusedOutsidePods},
		{"outside the Pod networks with a forged Pod targetRef", pod("198.18.30.1", "team-a"), nil, RefusedOutsidePods},
		{"an external server the pool allows", bare("198.18.200.5"), external, ""},
		{"loopback", pod("127.0.0.1", "team-a"), nil, RefusedNotUnicast},
		{"loopback, allowed everywhere", bare("127.0.0.1"), []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, RefusedNotUnicast},
		{"IPv6 loopback", bare("::1"), nil, RefusedNotUnicast},
		{"link-local (the cloud metadata address)", bare("169.254.169.254"), nil, RefusedNotUnicast},
		{"IPv6 link-local", bare("fe80::1"), nil, RefusedNotUnicast},
		{"IPv6 link-local with a zone", bare("fe80::1%eth0"), nil, RefusedNotUnicast},
		{"v4-mapped node", bare("::ffff:198.18.0.11"), nil, RefusedNotUnicast},
		{"v4-mapped Pod", pod("::ffff:198.18.64.5", "team-a"), nil, RefusedNotUnicast},
		{"unspecified", bare("0.0.0.0"), nil, RefusedNotUnicast},
		{"IPv6 unspecified", bare("::"), nil, RefusedNotUnicast},
		{"multicast", bare("224.0.0.1"), nil, RefusedNotUnicast},
		{"IPv6 multicast", bare("ff02::1"), nil, RefusedNotUnicast},
		{"broadcast", bare("255.255.255.255"), nil, RefusedNotUnicast},
		{"no address", EndpointRef{}, nil, RefusedNotUnicast},
	} {
		if got := g.Check("team-a", c.e, c.allowed); got != c.want {
			t.Errorf("%s (%v): %q, want %q", c.name, c.e.Addr, got, c.want)
		}
	}
}

// TestEndpointGuardNoPodCIDRs: a cluster whose Pod networks are unknown (the CNI allocates and
// sets no podCIDRs) takes a Pod of the Service's namespace anywhere but on a reserved address,
// and nothing else outside the pool's externalEndpoints.
func TestEndpointGuardNoPodCIDRs(t *testing.T) {
	g := testGuard()
	g.PodCIDRs = nil
	for _, c := range []struct {
		e    EndpointRef
		want EndpointRefusal
	}{
		{EndpointRef{Addr: netip.MustParseAddr("198.18.30.1"), Pod: true, PodNamespace: "team-a"}, ""},
		{EndpointRef{Addr: netip.MustParseAddr("198.18.30.1")}, RefusedOutsidePods},
		{EndpointRef{Addr: netip.MustParseAddr("198.18.30.1"), Pod: true, PodNamespace: "team-b"}, RefusedOtherNamespace},
		{EndpointRef{Addr: netip.MustParseAddr("198.18.0.11"), Pod: true, PodNamespace: "team-a"}, RefusedNode},
		{EndpointRef{Addr: netip.MustParseAddr("198.18.100.3"), Pod: true, PodNamespace: "team-a"}, RefusedFrontend},
	} {
		if got := g.Check("team-a", c.e, nil); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
	var zero EndpointGuard
	if got := zero.Check("team-a", EndpointRef{Addr: netip.MustParseAddr("198.18.30.1"), Pod: true}, nil); got != "" {
		t.Errorf("the zero guard refuses a Pod of the namespace: %q", got)
	}
}

// TestEndpointRefusalExplain: every refusal has words of its own that name no other object.
func TestEndpointRefusalExplain(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range []EndpointRefusal{RefusedNotUnicast, RefusedNode, RefusedFrontend, RefusedClusterIP, RefusedReserved, RefusedOtherNamespace, RefusedOutsidePods} {
		s := r.Explain()
		if s == string(r) || seen[s] || strings.ContainsAny(s, "/") {
			t.Errorf("%s: %q", r, s)
		}
		seen[s] = true
	}
}

func TestPrefixRange(t *testing.T) {
	for p, want := range map[string]string{
		"198.18.96.0/24": "198.18.96.0-198.18.96.255", "198.18.1.1/32": "198.18.1.1-198.18.1.1", "198.18.96.77/20": "198.18.96.0-198.18.111.255",
		"0.0.0.0/0": "0.0.0.0-255.255.255.255", "2001:db8:96::/112": "2001:db8:96::-2001:db8:96::ffff", "::/0": "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	} {
		r := PrefixRange(netip.MustParsePrefix(p), KindClusterIP)
		if got := r.First.String() + "-" + r.Last.String(); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}
