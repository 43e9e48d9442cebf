// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// The in-cluster hairpin: a client Pod A on the node reaches a VIP whose pick is Pod B on the
// same node. A's packets leave by the node's uplink to the gateway and come back carried to B
// (ingress records the flow {B, A}); B's reply to A is routed inside the node, from B's veth to
// A's, and never crosses the uplink's egress. The egress program attached to A's host-side
// veth rewrites it there, as the packets go into A.
//
//	site (site_test.go) + a0 Pod A (198.18.5.2, 2001:db8:5::2) ~ v1 (198.18.5.1) on the node
var (
	siteNodePodA = [2]netip.Addr{netip.MustParseAddr("198.18.5.1"), netip.MustParseAddr("2001:db8:5::1")}
	sitePodA     = [2]netip.Addr{netip.MustParseAddr("198.18.5.2"), netip.MustParseAddr("2001:db8:5::2")}
)

// addPodA puts Pod A behind the node on veth v1 ~ a0. The node routes the VIPs to the gateway.
// Pod B sends complete checksums and Pod A checks them, so that a wrong checksum update by the
// egress program on v1 is caught.
func (s *site) addPodA(t *testing.T, podA *netlab.NS) {
	t.Helper()
	netlab.Veth(t, s.node, "v1", "02:00:00:00:02:03", podA, "a0", "02:00:00:00:04:01")
	for i, plen := range []string{"/24", "/64"} {
		s.node.MustIP(t, "addr add "+siteNodePodA[i].String()+plen+" dev v1 nodad")
		podA.MustIP(t, "addr add "+sitePodA[i].String()+plen+" dev a0 nodad")
		podA.MustIP(t, "route add default via "+siteNodePodA[i].String())
	}
	if out, err := podA.Cmd("ethtool", "-K", "a0", "rx", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K a0 rx off: %v: %s", err, out)
	}
}

// TestSiteHairpin: Pod A's TCP connection and UDP exchange with a VIP whose endpoint is Pod B on
// the same node complete only once the egress program is attached to A's host-side veth (the
// uplink's does not see B's replies); B sees A's own address. When A's veth is deleted and made
// again under the same name (a Pod recreated), Attach replaces the link the deleted interface
// left, and the hairpin works again.
func TestSiteHairpin(t *testing.T) {
	s := newSite(t)
	s.servePod(t)
	if err := s.pod.TxChecksumOff("p0"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		s.node.MustIP(t, "route add "+siteVIP[i].String()+" via "+siteGateway[i].String())
	}
	podA := netlab.New(t, netlab.Prefix()+"a")
	s.addPodA(t, podA)
	d := newDP(t, Options{})
	s.allowAll(t, d)
	s.attach(t, d) // the uplink, both ways

	tcp := func(fam int) error {
		vip := netip.AddrPortFrom(siteVIP[fam], 80)
		return podA.Do(func() error {
			c, err := net.DialTimeout("tcp", vip.String(), 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("hello\n")); err != nil {
				return err
			}
			buf := make([]byte, 128)
			n, err := c.Read(buf)
			if err != nil {
				return err
			}
			if got, want := strings.TrimSpace(string(buf[:n])), c.LocalAddr().String(); got != want {
				t.Errorf("TCP to %s: Pod B saw Pod A as %q, want %q", vip, got, want)
			}
			return nil
		})
	}
	udp := func(fam int) error {
		vip := netip.AddrPortFrom(siteVIP[fam], 53)
		return podA.Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(vip))
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("query")); err != nil {
				return err
			}
			buf := make([]byte, 128)
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return err
			}
			if from != vip || string(buf[:n]) != c.LocalAddr().String() {
				t.Errorf("UDP to %s: answer %q from %s, want %s from the VIP", vip, buf[:n], from, c.LocalAddr())
			}
			return nil
		})
	}
	// The uplink alone: B's replies to A go out unrewritten, and A drops them.
	if err := udp(0); err == nil {
		t.Fatal("the hairpin UDP exchange completed without the egress program on Pod A's veth")
	}
	before := counters(t, d)["reply_rewritten"]
	must(t, s.node.Do(func() error { return d.Attach("v1", Egress) }))
	for fam := range 2 {
		t.Run(famNames[fam], func(t *testing.T) {
			if err := tcp(fam); err != nil {
				t.Errorf("TCP: %v", err)
			}
			if err := udp(fam); err != nil {
				t.Errorf("UDP: %v", err)
			}
		})
	}
	c := counters(t, d)
	if c["reply_rewritten"]-before < 4 || c["drop_rewrite_failed"] != 0 {
		t.Errorf("counters %v: want at least 4 more replies rewritten (on v1), none failed", c)
	}
	if got := d.Interfaces(); got["v1"] != Egress || got["n0"] != Both {
		t.Errorf("interfaces %v, want n0 both and v1 egress", got)
	}

	// Pod A is recreated: its veth goes and comes back under the same name.
	s.node.MustIP(t, "link del v1")
	s.addPodA(t, podA)
	if err := udp(0); err == nil {
		t.Fatal("the hairpin worked through a link of a deleted interface")
	}
	must(t, s.node.Do(func() error { return d.Attach("v1", Egress) }))
	if err := udp(0); err != nil {
		t.Errorf("UDP after Pod A's veth was made again and attached: %v", err)
	}
	if err := tcp(1); err != nil {
		t.Errorf("TCP (IPv6) after Pod A's veth was made again and attached: %v", err)
	}
	must(t, s.node.Do(func() error { return d.Detach("v1", Egress) }))
	if err := udp(0); err == nil {
		t.Error("the hairpin still works with the egress program detached from Pod A's veth")
	}
}
