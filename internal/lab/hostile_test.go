// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// Marker ports: every forged or crafted packet of TestHostile uses one, so that captures
// recognise them (and nothing else) wherever they would surface.
const (
	markReflect  = 61000 // backend-sourced replies sent to the gateways' client side
	markSiteSrc  = 61200 // SYNs to a VIP from the site's own addresses, from the client side
	markUnserved = 61400 // a VIP address's unserved port and protocol
	markICMP     = 61600 // the client port quoted by ICMP errors about flows that do not exist
	markBadCsum  = 61800 // SYNs to a VIP whose IPv4 header checksum is wrong
	markSpan     = 200
)

func marked(p uint16, base int) bool { return int(p) >= base && int(p) < base+markSpan }

// frameL4 builds an Ethernet frame: TCP (flags "S", "SA", "A") or UDP from src to dst.
func frameL4(t *testing.T, smac, dmac net.HardwareAddr, src, dst netip.AddrPort, udp bool, flags string) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	var nl gopacket.NetworkLayer
	var ip gopacket.SerializableLayer
	proto := layers.IPProtocolTCP
	if udp {
		proto = layers.IPProtocolUDP
	}
	if src.Addr().Is4() {
		v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		nl, ip = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		nl, ip = v6, v6
	}
	var l4 gopacket.SerializableLayer
	if udp {
		u := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		l4 = u
	} else {
		c := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Window: 65535, Seq: 1000, Ack: 1}
		for _, f := range flags {
			switch f {
			case 'S':
				c.SYN = true
			case 'A':
				c.ACK = true
			}
		}
		if err := c.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		l4 = c
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, l4, gopacket.Payload("hostile")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fragNeeded builds an ICMP "fragmentation needed" (MTU mtu) from src to dst quoting inner (an
// IPv4 packet, no Ethernet header).
func fragNeeded(t *testing.T, smac, dmac net.HardwareAddr, src, dst netip.Addr, mtu uint16, inner []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: smac, DstMAC: dmac, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4), Seq: mtu}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, icmp, gopacket.Payload(inner[:28])); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// l4Ports returns the ports of an untagged IPv4/IPv6 TCP or UDP frame (ok false otherwise), and
// its source address.
func l4Ports(f []byte) (src netip.Addr, sport, dport uint16, ok bool) {
	if len(f) < 14 {
		return src, 0, 0, false
	}
	var l4 []byte
	var proto byte
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		if len(f) < 34 {
			return src, 0, 0, false
		}
		ihl := int(f[14]&0x0f) * 4
		proto, src, l4 = f[23], netip.AddrFrom4([4]byte(f[26:30])), f[14+ihl:]
	case 0x86dd:
		if len(f) < 54 {
			return src, 0, 0, false
		}
		proto, src, l4 = f[20], netip.AddrFrom16([16]byte(f[22:38])), f[54:]
	default:
		return src, 0, 0, false
	}
	if (proto != 6 && proto != 17) || len(l4) < 4 {
		return src, 0, 0, false
	}
	return src, binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4]), true
}

// macOf is the MAC address of interface ifname in namespace ns.
func macOf(t *testing.T, ns *netlab.NS, ifname string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := ns.Do(func() error {
		i, err := net.InterfaceByName(ifname)
		if err == nil {
			mac = i.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestHostile sends a hostile network's packets through the real gateways while clients use the
// site: backend-sourced "replies" delivered to the gateways' client side (a reflector: they
// would leave with a VIP as source), SYNs to a VIP forged from the site's own addresses (a Pod's,
// a VIP, a gateway's), traffic to a VIP's unserved port and protocol (it looped between router
// and gateways), and ICMP errors about flows that do not exist. Captures on every pod and on the
// client prove that none was forwarded; each drop is on its named counter, once per packet (no
// loop); 50 idle keep-alive connections stay on their pods and a steady request load is served
// throughout. The floods, path MTU and fragments are TestFlood's; spoofed SYNs on live tuples
// are not yet here.
func TestHostile(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin})
	waitHealthy(t, s, s.Pods...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.Clients[0]
	cMAC, rcMAC := macOf(t, c.NS, "eth0"), macOf(t, s.Router.NS, c.Name)

	// 50 established keep-alive connections, idle through the attack.
	type kept struct {
		conn *HTTPConn
		pod  string
	}
	var conns []kept
	for range 50 {
		h, err := c.DialHTTP(ctx, VIP4)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		a, err := h.Get()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, kept{h, a.Pod})
	}

	// Captures: every pod's eth0 (nothing marked may reach a pod), the client's eth0 (nothing
	// marked may come back from a VIP), the router's links to the gateways (each unserved
	// packet crosses once: no loop).
	var stops []func() (int, error)
	var podStops []func() (int, error)
	for _, p := range s.Pods {
		stop, err := Capture(ctx, p.NS, "eth0", func(f []byte) bool {
			if _, sp, dp, ok := l4Ports(f); ok {
				return marked(sp, markSiteSrc) || marked(dp, markReflect) || marked(sp, markUnserved) || marked(dp, markICMP) ||
					marked(sp, markBadCsum)
			}
			// An ICMPv4 error quoting a marked flow: relayed to a backend.
			if len(f) < 34 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 || f[23] != 1 {
				return false
			}
			in := 14 + int(f[14]&0x0f)*4 + 8 // the quoted IPv4 header
			if len(f) < in+20 {
				return false
			}
			l4 := in + int(f[in]&0x0f)*4
			return len(f) >= l4+4 && marked(binary.BigEndian.Uint16(f[l4+2:l4+4]), markICMP)
		})
		if err != nil {
			t.Fatal(err)
		}
		podStops = append(podStops, stop)
	}
	stopClient, err := Capture(ctx, c.NS, "eth0", func(f []byte) bool {
		src, _, dp, ok := l4Ports(f)
		return ok && (src == VIP4 || src == VIP6) && (marked(dp, markReflect) || marked(dp, markSiteSrc))
	})
	if err != nil {
		t.Fatal(err)
	}
	stops = append(stops, stopClient)
	var routerStops []func() (int, error)
	for _, g := range s.Gateways {
		stop, err := Capture(ctx, s.Router.NS, g.Name, func(f []byte) bool {
			_, sp, _, ok := l4Ports(f)
			return ok && marked(sp, markUnserved)
		})
		if err != nil {
			t.Fatal(err)
		}
		routerStops = append(routerStops, stop)
	}

	// A steady request load through the attack.
	var okN, failN atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 5000 && loadCtx.Err() == nil; i++ {
			if _, _, err := c.Get(loadCtx, VIP4); err != nil {
				if loadCtx.Err() == nil {
					failN.Add(1)
				}
			} else {
				okN.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	before := map[string][]float64{}
	counters := []string{"drop_reply_wrong_side", "drop_site_source", "drop_vip_unserved", "drop_icmp_unknown"}
	for _, r := range counters {
		before[r] = reasons(t, s, r)
	}

	// 1. Reflector: "replies" from every pod's HTTP endpoint to the client, handed to each
	// gateway's client-facing interface by the router's links; and SYNs with a corrupted IPv4
	// header checksum.
	sent := map[string]int{}
	for _, g := range s.Gateways {
		gMAC, rMAC := macOf(t, g.NS, "up0"), macOf(t, s.Router.NS, g.Name)
		var frames [][]byte
		for i, p := range s.Pods {
			for j := range 10 {
				port := uint16(markReflect + (i*10+j)%markSpan)
				frames = append(frames,
					frameL4(t, rMAC, gMAC, netip.AddrPortFrom(p.Addr4, TargetHTTP), netip.AddrPortFrom(c.Addr4, port), false, "SA"),
					frameL4(t, rMAC, gMAC, netip.AddrPortFrom(p.Addr6, TargetHTTP), netip.AddrPortFrom(c.Addr6, port), false, "SA"),
					frameL4(t, rMAC, gMAC, netip.AddrPortFrom(p.Addr4, TargetHTTP), netip.AddrPortFrom(c.Addr4, port), true, ""))
			}
		}
		// SYNs to the VIP whose IPv4 header checksum is wrong, handed to the gateway by the
		// router's link (the router's kernel would drop them itself): a gateway must not
		// launder them (a right checksum on the way out, the carrier's insertion included),
		// so the node's kernel drops them and no pod sees one.
		for i := range markSpan {
			f := frameL4(t, rMAC, gMAC, netip.AddrPortFrom(c.Addr4, uint16(markBadCsum+i)), netip.AddrPortFrom(VIP4, PortHTTP), false, "S")
			f[14+11] ^= 0x5a
			frames = append(frames, f)
		}
		if err := SendFrames(s.Router.NS, g.Name, frames); err != nil {
			t.Fatal(err)
		}
		// In the DSR mode no endpoint has a reverse entry: such a packet is no reply of
		// ours, and is passed untranslated. Through the gateways, it is refused.
		if s.DSR() {
			sent["drop_reply_wrong_side"] = 0
		} else {
			sent["drop_reply_wrong_side"] += len(frames)
		}
	}

	// 2. SYNs to the VIPs from the site's own addresses, sent by the client into the router.
	var frames [][]byte
	// g1's address on the cluster leg (a site prefix for every gateway; its upstream address is
	// its own alone: g2 would take it for a client's).
	gw4, gw6 := gatewayClusterAddrs(1)
	srcs4 := []netip.Addr{VIP4, gw4}
	srcs6 := []netip.Addr{VIP6, gw6}
	for _, p := range s.Pods {
		srcs4, srcs6 = append(srcs4, p.Addr4), append(srcs6, p.Addr6)
	}
	for _, n := range s.Nodes {
		srcs4, srcs6 = append(srcs4, n.Addr4), append(srcs6, n.Addr6)
	}
	for i := range markSpan {
		port := uint16(markSiteSrc + i)
		frames = append(frames,
			frameL4(t, cMAC, rcMAC, netip.AddrPortFrom(srcs4[i%len(srcs4)], port), netip.AddrPortFrom(VIP4, PortHTTP), false, "S"),
			frameL4(t, cMAC, rcMAC, netip.AddrPortFrom(srcs6[i%len(srcs6)], port), netip.AddrPortFrom(VIP6, PortHTTP), false, "S"))
	}
	sent["drop_site_source"] = len(frames)
	// 3. A VIP's unserved TCP port and UDP port, from the client's own address.
	for i := range 100 {
		port := uint16(markUnserved + i)
		frames = append(frames,
			frameL4(t, cMAC, rcMAC, netip.AddrPortFrom(c.Addr4, port), netip.AddrPortFrom(VIP4, 22), false, "S"),
			frameL4(t, cMAC, rcMAC, netip.AddrPortFrom(c.Addr4, port), netip.AddrPortFrom(VIP4, 9999), true, ""))
	}
	sent["drop_vip_unserved"] = 200
	// 4. "Fragmentation needed" to the VIP about flows that do not exist (the client's marked
	// ports never connected).
	for i := range 100 {
		quoted := frameL4(t, rcMAC, cMAC, netip.AddrPortFrom(VIP4, PortHTTP), netip.AddrPortFrom(c.Addr4, uint16(markICMP+i)), false, "SA")[14:]
		frames = append(frames, fragNeeded(t, cMAC, rcMAC, c.Addr4, VIP4, 1200, quoted))
	}
	sent["drop_icmp_unknown"] = 100
	if err := SendFrames(c.NS, "eth0", frames); err != nil {
		t.Fatal(err)
	}

	time.Sleep(time.Second) // let anything forwarded arrive
	stopLoad()
	wg.Wait()
	podSaw := 0
	for _, stop := range podStops {
		n, err := stop()
		if err != nil {
			t.Fatal(err)
		}
		podSaw += n
	}
	clientSaw, err := stops[0]()
	if err != nil {
		t.Fatal(err)
	}
	routerSaw := 0
	for _, stop := range routerStops {
		n, err := stop()
		if err != nil {
			t.Fatal(err)
		}
		routerSaw += n
	}
	moved := map[string]float64{}
	for _, r := range counters {
		for i, v := range reasons(t, s, r) {
			moved[r] += v - before[r][i]
		}
	}
	t.Logf("sent %v; gateways' drops %v; marked packets at the pods %d, from a VIP at the client %d; unserved packets on the router's gateway links %d (sent 200)",
		sent, moved, podSaw, clientSaw, routerSaw)
	if podSaw != 0 || clientSaw != 0 {
		t.Errorf("forwarded: %d forged or crafted packets reached a pod, %d left a gateway with a VIP as source", podSaw, clientSaw)
	}
	for r, n := range sent {
		if moved[r] != float64(n) {
			t.Errorf("%s moved by %v, want %d (one per packet sent)", r, moved[r], n)
		}
	}
	if routerSaw > 200 {
		t.Errorf("the unserved packets crossed the router's gateway links %d times, want once each (200): a loop", routerSaw)
	}

	// The site served throughout.
	t.Logf("request load during the attack: %d answered, %d failed", okN.Load(), failN.Load())
	if failN.Load() != 0 || okN.Load() < 20 {
		t.Errorf("request load: %d answered, %d failed: want every request answered", okN.Load(), failN.Load())
	}
	broken := 0
	for _, k := range conns {
		a, err := k.conn.Get()
		if err != nil || a.Pod != k.pod {
			broken++
		}
	}
	t.Logf("%d established connections kept, %d broken", len(conns)-broken, broken)
	if broken != 0 {
		t.Errorf("%d of %d established connections broken or moved", broken, len(conns))
	}
}
