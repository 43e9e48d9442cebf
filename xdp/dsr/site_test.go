// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The site of the namespace tests. One L2 segment (a bridge in the client's namespace, whose
// address is on the bridge) joins the client, a stand-in gateway and the node; the Pod sits
// behind the node on a veth. The client reaches the VIPs through the gateway, which DNATs to
// the Pod and carries the VIP frontend (relay, in Go); the node's programs remove the carrier
// and rewrite the Pod's replies, which go from the node straight to the client.
//
//	client (br0 .10) --+-- cg ~ g0 gateway (.1, relays VIP -> Pod with the carrier)
//	                   +-- cn ~ n0 node (.2, the programs) v0 (198.18.4.1) ~ p0 Pod (198.18.4.2)
var (
	siteClient  = [2]netip.Addr{netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("2001:db8:1::10")}
	siteGateway = [2]netip.Addr{netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("2001:db8:1::1")}
	siteNode    = [2]netip.Addr{netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("2001:db8:1::2")}
	siteNodePod = [2]netip.Addr{netip.MustParseAddr("198.18.4.1"), netip.MustParseAddr("2001:db8:4::1")}
	sitePod     = [2]netip.Addr{netip.MustParseAddr("198.18.4.2"), netip.MustParseAddr("2001:db8:4::2")}
	siteVIP     = [2]netip.Addr{netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8:100::1")}

	macGateway, _ = net.ParseMAC("02:00:00:00:01:01")
	macNode, _    = net.ParseMAC("02:00:00:00:02:01")
)

// siteMaps are the frontends the gateway relays: {protocol, VIP port} -> the Pod's port. UDP 54
// goes to a port nothing listens on (the Pod answers with ICMP port unreachable).
var siteMaps = []struct {
	proto      datapath.Protocol
	port, dest uint16
}{{datapath.TCP, 80, 8080}, {datapath.UDP, 53, 5353}, {datapath.UDP, 54, 5354}}

// site is a built site.
type site struct {
	client, gateway, node, pod *netlab.NS
}

// newSite builds the site; everything goes when t ends.
func newSite(t *testing.T) *site {
	t.Helper()
	netlab.RequireRoot(t, "it builds network namespaces")
	p := netlab.Prefix()
	s := &site{client: netlab.New(t, p+"c"), gateway: netlab.New(t, p+"g"), node: netlab.New(t, p+"n"), pod: netlab.New(t, p+"p")}
	// No multicast snooping (as the lab's L2): a snooping bridge with no MLD querier can
	// withhold neighbor solicitations from a port whose report it missed; CI once saw an IPv6
	// dial end in "no route to host" (neighbor discovery failed).
	s.client.MustIP(t, "link add br0 type bridge mcast_snooping 0")
	s.client.MustIP(t, "link set br0 up")
	netlab.Veth(t, s.gateway, "g0", macGateway.String(), s.client, "cg", "02:00:00:00:00:c1")
	netlab.Veth(t, s.node, "n0", macNode.String(), s.client, "cn", "02:00:00:00:00:c2")
	netlab.Veth(t, s.node, "v0", "02:00:00:00:02:02", s.pod, "p0", "02:00:00:00:03:01")
	s.client.MustIP(t, "link set cg master br0")
	s.client.MustIP(t, "link set cn master br0")
	for i, plen := range []string{"/24", "/64"} {
		s.client.MustIP(t, "addr add "+siteClient[i].String()+plen+" dev br0 nodad")
		s.gateway.MustIP(t, "addr add "+siteGateway[i].String()+plen+" dev g0 nodad")
		s.node.MustIP(t, "addr add "+siteNode[i].String()+plen+" dev n0 nodad")
		s.node.MustIP(t, "addr add "+siteNodePod[i].String()+plen+" dev v0 nodad")
		s.pod.MustIP(t, "addr add "+sitePod[i].String()+plen+" dev p0 nodad")
		s.client.MustIP(t, "route add "+siteVIP[i].String()+" via "+siteGateway[i].String())
		s.pod.MustIP(t, "route add default via "+siteNodePod[i].String())
		// The gateway drops what it relays, silently: no ICMP from it.
		s.gateway.MustIP(t, "route add blackhole "+siteVIP[i].String())
	}
	s.node.Forwarding(t)
	s.gateway.Forwarding(t)
	// The node's uplink finishes the Pods' checksums in software after the egress program (no
	// offload to a veth peer): the client then checks every checksum the program updated.
	if err := s.node.TxChecksumOff("n0"); err != nil {
		t.Fatal(err)
	}
	s.relay(t)
	return s
}

// allowAll adds the site's pairs to d.
func (s *site) allowAll(t *testing.T, d *Datapath) {
	t.Helper()
	for i := range 2 {
		for _, m := range siteMaps {
			must(t, d.AddDSRService(datapath.DSRService{
				Frontend: datapath.Frontend{Addr: siteVIP[i], Port: m.port, Proto: m.proto},
				Endpoint: netip.AddrPortFrom(sitePod[i], m.dest)}))
		}
	}
}

// attach attaches d to the node's uplink, both directions.
func (s *site) attach(t *testing.T, d *Datapath) {
	t.Helper()
	must(t, s.node.Do(func() error { return d.Attach("n0", Both) }))
}

// relay runs the stand-in gateway until t ends: it reads the frames the client sends to the
// gateway's MAC for a VIP frontend of siteMaps, DNATs them to the Pod (destination address and
// port, checksums recomputed), adds the carrier and sends them to the node's MAC.
func (s *site) relay(t *testing.T) {
	t.Helper()
	var fd int
	err := s.gateway.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("g0")
		if err != nil {
			return err
		}
		tv := unix.Timeval{Usec: 100000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("gateway relay socket: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 9000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the timeout: look at stop again
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			out, ok := relayFrame(buf[:n])
			if !ok {
				continue
			}
			_ = unix.Send(fd, out, 0)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		unix.Close(fd)
	})
}

// relayFrame is what the gateway sends for frame b, if it relays it.
func relayFrame(b []byte) ([]byte, bool) {
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil || eth.DstMAC.String() != macGateway.String() {
		return nil, false
	}
	var nl gopacket.NetworkLayer
	var dst netip.Addr
	fam := 0
	if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		nl, dst = ip4, netip.AddrFrom4([4]byte(ip4.DstIP.To4()))
	} else if ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		nl, dst, fam = ip6, netip.AddrFrom16([16]byte(ip6.DstIP)), 1
	} else {
		return nil, false
	}
	if dst != siteVIP[fam] {
		return nil, false
	}
	var l4 gopacket.SerializableLayer
	var port uint16
	var proto datapath.Protocol
	switch l := pkt.TransportLayer().(type) {
	case *layers.TCP:
		port, proto = uint16(l.DstPort), datapath.TCP
		l4 = l
	case *layers.UDP:
		port, proto = uint16(l.DstPort), datapath.UDP
		l4 = l
	default:
		return nil, false
	}
	var dest uint16
	for _, m := range siteMaps {
		if m.proto == proto && m.port == port {
			dest = m.dest
		}
	}
	if dest == 0 {
		return nil, false
	}
	pod := sitePod[fam].AsSlice()
	switch ip := nl.(type) {
	case *layers.IPv4:
		ip.DstIP = pod
	case *layers.IPv6:
		ip.DstIP = pod
	}
	switch l := l4.(type) {
	case *layers.TCP:
		l.DstPort = layers.TCPPort(dest)
		_ = l.SetNetworkLayerForChecksum(nl)
	case *layers.UDP:
		l.DstPort = layers.UDPPort(dest)
		_ = l.SetNetworkLayerForChecksum(nl)
	}
	buf := gopacket.NewSerializeBuffer()
	eth.SrcMAC, eth.DstMAC = macGateway, macNode
	var payload gopacket.Payload
	if app := pkt.ApplicationLayer(); app != nil {
		payload = app.Payload()
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, nl.(gopacket.SerializableLayer), l4, payload); err != nil {
		return nil, false
	}
	return addCarrier(buf.Bytes(), netip.AddrPortFrom(siteVIP[fam], port)), true
}

// addCarrier inserts the carrier for frontend f after the fixed IP header of Ethernet frame b
// (which has no IPv4 options or IPv6 extension headers).
func addCarrier(b []byte, f netip.AddrPort) []byte {
	const l3 = 14
	if f.Addr().Is4() {
		out := append(append(append([]byte(nil), b[:l3+20]...), carrier4(f)...), b[l3+20:]...)
		out[l3] = 0x47
		binary.BigEndian.PutUint16(out[l3+2:], uint16(len(out)-l3))
		out[l3+10], out[l3+11] = 0, 0
		binary.BigEndian.PutUint16(out[l3+10:], ipChecksum(out[l3:l3+28]))
		return out
	}
	next := layers.IPProtocol(b[l3+6])
	out := append(append(append([]byte(nil), b[:l3+40]...), carrier6(f, next)...), b[l3+40:]...)
	out[l3+6] = byte(layers.IPProtocolIPv6Destination)
	binary.BigEndian.PutUint16(out[l3+4:], uint16(len(out)-l3-40))
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// servePod runs, in the Pod, a TCP server on 8080 and a UDP server on 5353 that answer every
// line or datagram with the address they see it from.
func (s *site) servePod(t *testing.T) {
	t.Helper()
	var closers []func() error
	err := s.pod.Do(func() error {
		l, err := net.Listen("tcp", ":8080")
		if err != nil {
			return err
		}
		closers = append(closers, l.Close)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					buf := make([]byte, 512)
					for {
						if _, err := c.Read(buf); err != nil {
							return
						}
						if _, err := fmt.Fprintf(c, "%s\n", c.RemoteAddr()); err != nil {
							return
						}
					}
				}()
			}
		}()
		u, err := net.ListenUDP("udp", &net.UDPAddr{Port: 5353})
		if err != nil {
			return err
		}
		closers = append(closers, u.Close)
		go func() {
			buf := make([]byte, 512)
			for {
				_, from, err := u.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				_, _ = u.WriteToUDPAddrPort([]byte(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String()), from)
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatalf("pod servers: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range closers {
			_ = c()
		}
	})
}

// tcpConn is a client's TCP connection to a VIP frontend.
type tcpConn struct {
	c    net.Conn
	name string
}

// dialTCP connects from the client to VIP fam:80.
func (s *site) dialTCP(t *testing.T, fam int) *tcpConn {
	t.Helper()
	var c net.Conn
	vip := netip.AddrPortFrom(siteVIP[fam], 80)
	err := s.client.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", vip.String(), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("client: connect to %s: %v", vip, err)
	}
	t.Cleanup(func() { c.Close() })
	return &tcpConn{c: c, name: "TCP to " + vip.String()}
}

// exchange sends a line and checks the answer: the Pod saw the client's own address and port.
func (c *tcpConn) exchange(t *testing.T) {
	t.Helper()
	_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write([]byte("hello\n")); err != nil {
		t.Fatalf("%s: write: %v", c.name, err)
	}
	buf := make([]byte, 128)
	n, err := c.c.Read(buf)
	if err != nil {
		t.Fatalf("%s: read: %v", c.name, err)
	}
	if got, want := string(buf[:n]), c.c.LocalAddr().String()+"\n"; got != want {
		t.Errorf("%s: the Pod saw the client as %q, want %q", c.name, got, want)
	}
}

// udpExchange sends a datagram from the client to VIP fam:port on a connected socket (which
// takes replies from that address only) and returns the answer or the error.
func (s *site) udpExchange(t *testing.T, fam int, port uint16) (string, string, error) {
	t.Helper()
	vip := netip.AddrPortFrom(siteVIP[fam], port)
	var answer, local string
	err := s.client.Do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(vip))
		if err != nil {
			return err
		}
		defer c.Close()
		local = c.LocalAddr().String()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("query")); err != nil {
			return err
		}
		buf := make([]byte, 128)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if from != vip {
			return fmt.Errorf("answer from %s, want %s", from, vip)
		}
		answer = string(buf[:n])
		return nil
	})
	return answer, local, err
}

// isRefused reports whether err is a connection refused (an ICMP port unreachable).
func isRefused(err error) bool { return errors.Is(err, unix.ECONNREFUSED) }
