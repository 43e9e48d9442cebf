// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// labSeed is the flow-hash seed of the lab's datapath.
const labSeed = 0x5eed

// lab addresses: VIPs 198.18.100.0/24 and 2001:db8:100::/48, backends 198.18.1.0/24, clients
// 198.18.0.0/24 (198.18.0.0/24 is VIP 1's source range).
var (
	v4, v4b, v4c = netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("198.18.100.3")
	v6           = netip.MustParseAddr("2001:db8:100::1")
	client       = netip.MustParseAddr("198.18.0.10")
)

// lab is a datapath pinned in a directory of its own whose program remembered flows, and the
// read-only view of its pins.
type lab struct {
	d    *gateway.Datapath
	p    *gateway.Pinned
	dir  string
	opts gateway.Options
}

// newLab loads a pinned datapath (removed, with its directory, when t ends), configures it and
// runs flows through its program (BPF_PROG_TEST_RUN: nothing is sent, nothing attached):
//
//   - VIP 1 198.18.100.1:80/TCP: affinity ClientIP, source range 198.18.0.0/24, backends 1 and 2
//     with 9 and 4 of 13 slots; four clients' flows.
//   - VIP 2 [2001:db8:100::1]:53/UDP: no table.
//   - VIP 3 198.18.100.2:*/TCP: all ports, backend 3 keeping the client's port, 2 of 13 slots
//     empty (0 and 5); one flow to port 443, the most recent of all.
//   - VIPs 4 and 5 198.18.100.1:81 and :82/TCP: one endpoint, backends 5 and 6, ambiguous
//     (its flows keep reverse entries); one flow to :81.
//   - VIPs 6 198.18.100.3:80/TCP and 7 :53/UDP: five backends 8 to 12; 20 flows to :80.
//   - backend 7: in no table (draining).
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (BPF)")
	}
	l := &lab{dir: filepath.Join("/sys/fs/bpf", netlab.Prefix())}
	l.opts = gateway.Options{PinPath: l.dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096, Seed: labSeed,
		TCPEstablishedTimeout: 2 * time.Hour, UDPTimeout: time.Second}}
	var err error
	if l.d, err = gateway.Load(l.opts); err != nil {
		t.Fatal(err)
	}
	// The lab's packets are run with BPF_PROG_TEST_RUN: they arrive on lo, a client's side.
	if err := l.d.SetIfindexRole(1, datapath.RoleClient); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.d.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		os.RemoveAll(l.dir)
	})
	for f, cfg := range map[datapath.Frontend]datapath.VIPConfig{
		{Addr: v4, Port: 80, Proto: datapath.TCP}: {ID: 1, Affinity: datapath.AffinityClientIP,
			SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}},
		{Addr: v6, Port: 53, Proto: datapath.UDP}:  {ID: 2},
		{Addr: v4b, Port: 0, Proto: datapath.TCP}:  {ID: 3},
		{Addr: v4, Port: 81, Proto: datapath.TCP}:  {ID: 4},
		{Addr: v4, Port: 82, Proto: datapath.TCP}:  {ID: 5},
		{Addr: v4c, Port: 80, Proto: datapath.TCP}: {ID: 6},
		{Addr: v4c, Port: 53, Proto: datapath.UDP}: {ID: 7},
	} {
		l.must(t, l.d.UpsertVIP(f, cfg))
	}
	for id, ep := range map[datapath.BackendID]string{1: "198.18.1.10:8080", 2: "198.18.1.11:8080", 3: "198.18.1.13:0",
		5: "198.18.1.14:9000", 6: "198.18.1.14:9000", 7: "198.18.1.12:8080", 8: "198.18.1.20:8080", 9: "198.18.1.21:8080",
		10: "198.18.1.22:8080", 11: "198.18.1.23:8080", 12: "198.18.1.24:8080"} {
		a := netip.MustParseAddrPort(ep)
		l.must(t, l.d.UpsertBackend(id, datapath.Backend{Addr: a.Addr(), Port: a.Port()}))
	}
	web := make([]datapath.BackendID, 13)
	for i := range web {
		web[i] = datapath.BackendID(1 + i%3%2) // 1, 2, 1, 1, 2, 1, ...: 9 and 4 slots
	}
	l.must(t, l.d.SetMaglevTable(1, web))
	all := fill(13, 3)
	all[0], all[5] = 0, 0
	l.must(t, l.d.SetMaglevTable(3, all))
	l.must(t, l.d.SetMaglevTable(4, fill(13, 5)))
	l.must(t, l.d.SetMaglevTable(5, fill(13, 6)))
	l.must(t, l.d.SetMaglevTable(6, fill(13, 8, 9, 10, 11, 12)))
	l.must(t, l.d.SetMaglevTable(7, fill(13, 8, 9, 10, 11, 12)))
	l.must(t, l.d.SetReverse(datapath.Endpoint{Addr: netip.MustParseAddr("198.18.1.14"), Port: 9000, Proto: datapath.TCP},
		datapath.ReverseNAT{VIP: 4, Ambiguous: true, Candidates: [4]datapath.VIPID{4, 5}}))

	for p := range uint16(4) {
		l.send(t, tcpFrame(t, netip.AddrPortFrom(client, 1000+p), netip.AddrPortFrom(v4, 80), false, 1))
	}
	l.send(t, tcpFrame(t, netip.AddrPortFrom(client, 2000), netip.AddrPortFrom(v4, 81), false, 1))
	for i := range uint16(20) {
		l.send(t, tcpFrame(t, netip.AddrPortFrom(netip.MustParseAddr("198.18.0.30"), 5000+7*i), netip.AddrPortFrom(v4c, 80), false, 1))
	}
	time.Sleep(100 * time.Millisecond) // the datapath's clock moves in 10 ms ticks
	l.send(t, tcpFrame(t, netip.AddrPortFrom(client, 3000), netip.AddrPortFrom(v4b, 443), false, 1))

	if l.p, err = gateway.OpenPinned(l.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.p.Close() })
	return l
}

func (l *lab) must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// send runs frame through the datapath's program.
func (l *lab) send(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := l.d.Program().Run(&ebpf.RunOptions{Data: frame}); err != nil {
		t.Fatal(err)
	}
}

// fill returns a table of m slots, ids repeated in turn.
func fill(m int, ids ...datapath.BackendID) []datapath.BackendID {
	tb := make([]datapath.BackendID, m)
	for i := range tb {
		tb[i] = ids[i%len(ids)]
	}
	return tb
}

// tcpFrame is an IPv4 TCP segment from src to dst as it reaches the gateway (checksums right):
// a SYN of sequence number seq when syn, else an ACK of it.
func tcpFrame(t *testing.T, src, dst netip.AddrPort, syn bool, seq uint32) []byte {
	t.Helper()
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: seq, Window: 1024}
	if syn {
		tcp.SYN = true
	} else {
		tcp.ACK, tcp.Ack = true, 1
	}
	return frame(t, src, dst, layers.IPProtocolTCP, tcp)
}

// udpFrame is an IPv4 UDP datagram from src to dst.
func udpFrame(t *testing.T, src, dst netip.AddrPort) []byte {
	t.Helper()
	return frame(t, src, dst, layers.IPProtocolUDP, &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())})
}

func frame(t *testing.T, src, dst netip.AddrPort, proto layers.IPProtocol, l4 interface {
	gopacket.SerializableLayer
	SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
}) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
	if err := l4.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, l4, gopacket.Payload("x")); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// text is doc as `xlb show` prints it.
func text(t *testing.T, doc Document) string {
	t.Helper()
	var b bytes.Buffer
	if err := doc.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
