// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"slices"
	"testing"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestNodeRoutes reads a real routing table in a namespace standing for a node with Pods of
// both kinds of CNI: Pods routed one by one to their veths (Calico, Cilium: a /32 or /128 per
// Pod), and Pods on a bridge (a bridge CNI: the Pod CIDR routed to the bridge, each Pod a port).
// The uplink's subnet, a route through a gateway and a non-Ethernet interface are left out.
func TestNodeRoutes(t *testing.T) {
	netlab.RequireRoot(t, "it builds a network namespace")
	p := netlab.Prefix()
	node, pods := netlab.New(t, p+"n"), netlab.New(t, p+"p")
	netlab.Veth(t, node, "up0", "02:00:00:00:10:01", pods, "x0", "02:00:00:00:10:02")
	netlab.Veth(t, node, "cali1", "02:00:00:00:10:11", pods, "a1", "02:00:00:00:10:12")
	netlab.Veth(t, node, "cali2", "02:00:00:00:10:21", pods, "a2", "02:00:00:00:10:22")
	netlab.Veth(t, node, "veth1", "02:00:00:00:10:31", pods, "b1", "02:00:00:00:10:32")
	netlab.Veth(t, node, "veth2", "02:00:00:00:10:41", pods, "b2", "02:00:00:00:10:42")
	netlab.Veth(t, node, "veth3", "02:00:00:00:10:51", pods, "b3", "02:00:00:00:10:52")
	for _, cmd := range []string{
		"addr add 198.18.1.2/24 dev up0",
		"route add default via 198.18.1.1",
		"route add 198.18.8.0/24 via 198.18.1.9", // another node's Pods
		"route add 198.18.4.2/32 dev cali1",
		"route add 198.18.4.3/32 dev cali2",
		"-6 route add 2001:db8:4::2/128 dev cali1",
		"link add cni0 type bridge mcast_snooping 0", "link set cni0 up",
		"link set veth1 master cni0", "link set veth2 master cni0",
		"addr add 198.18.6.1/24 dev cni0",
		"tuntap add tun0 mode tun", "link set tun0 up", // no MAC: the node side cannot attach
		"route add 198.18.7.0/24 dev tun0",
		"route add 198.18.9.0/24 dev veth3",
		"route add blackhole 198.18.5.0/26",
	} {
		node.MustIP(t, cmd)
	}
	for _, c := range []struct {
		targets []string
		want    []string
	}{
		{[]string{"198.18.4.0/24"}, []string{"cali1", "cali2"}},                               // a Pod CIDR routed per Pod
		{[]string{"198.18.4.3/32", "2001:db8:4::/64"}, []string{"cali1", "cali2"}},            // an endpoint; an IPv6 CIDR
		{[]string{"198.18.6.0/24"}, []string{"veth1", "veth2"}},                               // a bridge's Pod CIDR: its ports
		{[]string{"198.18.6.9/32"}, []string{"veth1", "veth2"}},                               // an endpoint on the bridge
		{[]string{"198.18.9.0/24"}, []string{"veth3"}},                                        // a CIDR routed whole to a veth
		{[]string{"198.18.8.0/24", "198.18.7.3/32", "198.18.5.0/24", "198.18.200.1/32"}, nil}, // gateway, no MAC, blackhole, default
	} {
		var got []string
		err := node.Do(func() error {
			var err error
			got, err = NodeRoutes{}.Interfaces(prefixes(c.targets...))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: %q, want %q", c.targets, got, c.want)
		}
	}
}
