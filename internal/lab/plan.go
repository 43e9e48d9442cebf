// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"net/netip"
)

// The address plan. Every address is a lab address (198.18.0.0/15, 2001:db8::/32). Indexes
// start at 1: client i, gateway g, node n, pod j.
//
//	client i     198.18.(10+i).10/24      2001:db8:10:i::10/64    router .1 / ::1 on link "c<i>"
//	gateway g    198.18.(20+g).2/24       2001:db8:20:g::2/64     router .1 / ::1 on link "g<g>"
//	cluster L2   198.18.3.0/24            2001:db8:3::/64         gateway g .g, node n .(10+n)
//	pod CIDR n   198.18.(64+n).0/24       2001:db8:64:n::/64      node's side of pod links .1, fe80::1
//	pod j        198.18.(64+n).(10+j)/32  2001:db8:64:n::(10+j)/128
//	VIPs         198.18.100.1 (198.18.100.0/24), 2001:db8:100::1 (2001:db8:100::/64)
//
// Hex-looking groups in the IPv6 addresses are the decimal index written as is ("::11" for
// pod 1), so that both families read alike.
var (
	// VIP4 and VIP6 are the site's VIPs, configured on no interface.
	VIP4 = netip.MustParseAddr("198.18.100.1")
	VIP6 = netip.MustParseAddr("2001:db8:100::1")
	// VIPPrefix4 and VIPPrefix6 are what the router routes to the gateways (ECMP).
	VIPPrefix4 = netip.MustParsePrefix("198.18.100.0/24")
	VIPPrefix6 = netip.MustParsePrefix("2001:db8:100::/64")
	// VIPSame4/6 and VIPOther4/6 are the VIPs of Options.SharedServices: ServiceSame on
	// PortHTTP and ServiceOther on PortOther, both over the same pods' TargetHTTP as the demo
	// service.
	VIPSame4  = netip.MustParseAddr("198.18.100.2")
	VIPSame6  = netip.MustParseAddr("2001:db8:100::2")
	VIPOther4 = netip.MustParseAddr("198.18.100.3")
	VIPOther6 = netip.MustParseAddr("2001:db8:100::3")
	// ClusterPrefix4 and ClusterPrefix6 are the cluster L2 segment (gateways and nodes).
	ClusterPrefix4 = netip.MustParsePrefix("198.18.3.0/24")
	ClusterPrefix6 = netip.MustParsePrefix("2001:db8:3::/64")
)

// Service ports: what clients address at the VIP, and what the pods listen on.
const (
	PortHTTP       = 80   // TCP: HTTP, answers with the pod's name and the client it saw
	PortWho        = 80   // UDP: answers each datagram like the HTTP server does
	PortEcho       = 7    // TCP and UDP: echo
	TargetHTTP     = 8080 // pods' HTTP server (TCP) and who server (UDP)
	ExtraHTTPPorts = 9    // the pods' HTTP server also listens on TargetHTTP+1 ... TargetHTTP+9
	TargetEcho     = 7007 // pods' TCP and UDP echo servers
	MetricsPort    = 9610 // each gateway's xlb HTTP server, on the gateway namespace's 127.0.0.1
	ServiceName    = "demo"
	ServiceSame    = "demo-same"  // Options.SharedServices: VIPSame4/6:PortHTTP → the pods' TargetHTTP
	ServiceOther   = "demo-other" // Options.SharedServices: VIPOther4/6:PortOther → the pods' TargetHTTP
	PortOther      = 8081
	MaxBody        = 64 << 20 // the largest body a pod's /bytes/<n> sends
	maxClients     = 9
	maxGateways    = 9
	maxNodes       = 30
	maxPods        = 200
	clusterNodeOff = 10
)

func mustAddr(format string, args ...any) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf(format, args...))
}

func clientAddrs(i int) (client4, router4, client6, router6 netip.Addr) {
	return mustAddr("198.18.%d.10", 10+i), mustAddr("198.18.%d.1", 10+i),
		mustAddr("2001:db8:10:%d::10", i), mustAddr("2001:db8:10:%d::1", i)
}

func upstreamAddrs(g int) (gw4, router4, gw6, router6 netip.Addr) {
	return mustAddr("198.18.%d.2", 20+g), mustAddr("198.18.%d.1", 20+g),
		mustAddr("2001:db8:20:%d::2", g), mustAddr("2001:db8:20:%d::1", g)
}

func gatewayClusterAddrs(g int) (netip.Addr, netip.Addr) {
	return mustAddr("198.18.3.%d", g), mustAddr("2001:db8:3::%d", g)
}

func nodeClusterAddrs(n int) (netip.Addr, netip.Addr) {
	return mustAddr("198.18.3.%d", clusterNodeOff+n), mustAddr("2001:db8:3::%d", clusterNodeOff+n)
}

func podCIDRs(n int) (netip.Prefix, netip.Prefix) {
	return netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", 64+n)),
		netip.MustParsePrefix(fmt.Sprintf("2001:db8:64:%d::/64", n))
}

// nodePodSide4 is the node's address on every pod link (the pods' IPv4 default gateway); the
// IPv6 one is podGateway6, a link-local address.
func nodePodSide4(n int) netip.Addr { return mustAddr("198.18.%d.1", 64+n) }

var podGateway6 = netip.MustParseAddr("fe80::1")

func podAddrs(n, j int) (netip.Addr, netip.Addr) {
	return mustAddr("198.18.%d.%d", 64+n, 10+j), mustAddr("2001:db8:64:%d::%d", n, 10+j)
}

// routerClusterAddrs is the router's leg on the cluster L2 (the DSR topology): the nodes'
// default route.
func routerClusterAddrs() (netip.Addr, netip.Addr) {
	return netip.MustParseAddr("198.18.3.254"), netip.MustParseAddr("2001:db8:3::fe")
}
