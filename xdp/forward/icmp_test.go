// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestEcho: an echo request to a VIP address is answered unless every frontend on the address
// has source ranges and none admits the client; to another address it is not ours.
func TestEcho(t *testing.T) {
	b := setup(t, datapath.Settings{Seed: 9})
	ranged := netip.MustParseAddr("198.18.100.5")
	must(t, b.UpsertVIP(datapath.Frontend{Addr: ranged, Port: 80, Proto: datapath.TCP},
		datapath.VIPConfig{ID: 3, SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/24")}}))
	for _, tc := range []struct {
		src, dst netip.Addr
		action   Action
		reason   Reason
	}{
		{client4, vip4, Answer, ReasonICMPEchoReply},
		{client4, ranged, Answer, ReasonICMPEchoReply},
		{netip.MustParseAddr("198.18.200.1"), ranged, Drop, ReasonDropICMPSrcRange},
		{client4, netip.MustParseAddr("198.18.100.9"), NotOurs, 0},
	} {
		p := PacketOf(netip.AddrPortFrom(tc.src, 0), netip.AddrPortFrom(tc.dst, 0), datapath.Protocol(1))
		if d := b.Echo(&p); d.Action != tc.action || d.Reason != tc.reason {
			t.Errorf("echo %s -> %s: %v/%v, want %v/%v", tc.src, tc.dst, d.Action, d.Reason, tc.action, tc.reason)
		}
	}
	// A frontend without ranges on the address answers everyone.
	must(t, b.UpsertVIP(datapath.Frontend{Addr: ranged, Port: 81, Proto: datapath.TCP}, datapath.VIPConfig{ID: 4}))
	p := PacketOf(netip.AddrPortFrom(netip.MustParseAddr("198.18.200.1"), 0), netip.AddrPortFrom(ranged, 0), datapath.Protocol(1))
	if d := b.Echo(&p); d.Action != Answer {
		t.Errorf("echo to an address with an unrestricted frontend: %v/%v, want answered", d.Action, d.Reason)
	}
}

// TestRelay: an ICMP error about a flow the balancer knows is relayed (client side: to the
// flow's backend; cluster side: to the client, from the VIP), from the wrong side, about an
// unknown flow, below the path MTU floors or too short to name a flow it is dropped.
func TestRelay(t *testing.T) {
	b := setup(t, datapath.Settings{Seed: 9})
	now := time.Second
	syn := tcp(4000, TCPSYN, 1)
	b.Forward(&syn, now)
	ack := tcp(4000, TCPACK, 2)
	d := b.Forward(&ack, now)
	be := addr(d)
	c := netip.AddrPortFrom(client4, 4000)
	vip := netip.AddrPortFrom(vip4, 80)
	router := netip.MustParseAddr("198.18.0.2")
	errFrom := func(outerSrc, outerDst netip.Addr, role datapath.Role, qsrc, qdst netip.AddrPort, quoted bool, mtu uint32) *ICMPError {
		o := PacketOf(netip.AddrPortFrom(outerSrc, 0), netip.AddrPortFrom(outerDst, 0), datapath.Protocol(1))
		o.Role, o.TTL = role, 64
		e := &ICMPError{Outer: o, Quoted: quoted, PTB: mtu > 0, MTU: mtu}
		if quoted {
			e.Inner = PacketOf(qsrc, qdst, datapath.TCP)
		}
		return e
	}
	for _, tc := range []struct {
		name   string
		e      *ICMPError
		action Action
		reason Reason
		to     netip.AddrPort
	}{
		{"client side", errFrom(router, vip4, datapath.RoleClient, vip, c, true, 1400), ToBackend, ReasonICMPToBackend, be},
		{"client side, MTU below the floor", errFrom(router, vip4, datapath.RoleClient, vip, c, true, 551), Drop, ReasonDropICMPPTBLow, netip.AddrPort{}},
		{"client side, unknown flow", errFrom(router, vip4, datapath.RoleClient, vip, netip.AddrPortFrom(client4, 4001), true, 0), Drop, ReasonDropICMPUnknown, netip.AddrPort{}},
		{"client side, from the cluster", errFrom(router, vip4, datapath.RoleCluster, vip, c, true, 0), Drop, ReasonDropWrongSide, netip.AddrPort{}},
		{"to a VIP, no quote", errFrom(router, vip4, datapath.RoleClient, netip.AddrPort{}, netip.AddrPort{}, false, 0), Drop, ReasonDropICMPUnknown, netip.AddrPort{}},
		{"cluster side", errFrom(be.Addr(), client4, datapath.RoleCluster, c, be, true, 0), ToClient, ReasonICMPToClient, vip},
		{"cluster side, another backend", errFrom(be.Addr(), client4, datapath.RoleCluster, c,
			netip.AddrPortFrom(otherBackend(be.Addr()), 8080), true, 0), Drop, ReasonDropICMPUnknown, netip.AddrPort{}},
		{"cluster side, from the client side", errFrom(be.Addr(), client4, datapath.RoleClient, c, be, true, 0), Drop, ReasonDropReplyWrongSide, netip.AddrPort{}},
		{"about nothing of ours", errFrom(router, client4, datapath.RoleClient, netip.MustParseAddrPort("198.18.128.9:1"), c, true, 0), NotOurs, 0, netip.AddrPort{}},
	} {
		d := b.Relay(tc.e, now)
		if d.Action != tc.action || d.Reason != tc.reason {
			t.Errorf("%s: %v/%v, want %v/%v", tc.name, d.Action, d.Reason, tc.action, tc.reason)
			continue
		}
		if tc.to.IsValid() && addr(d) != tc.to {
			t.Errorf("%s: rewritten to %s, want %s", tc.name, addr(d), tc.to)
		}
	}
}

func otherBackend(a netip.Addr) netip.Addr {
	for _, x := range bes {
		if x != a {
			return x
		}
	}
	return a
}
