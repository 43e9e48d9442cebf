// SPDX-License-Identifier: Apache-2.0
package afxdp

// Parity with the XDP datapath: the same configuration in both, the same frames through the XDP
// program (BPF_PROG_TEST_RUN) and through the Engine, byte-for-byte the same output. This checks
// the engine's Maglev pick, conntrack and handshake rules, reverse NAT (ambiguous endpoints and
// their Maglev re-derivation included), rewrites and checksums against the datapath the golden
// tests in xdp/ pin down.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/progrun"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// XDP verdicts.
const (
	xdpTX       = 3
	xdpRedirect = 4
)

const (
	macExt    = "02:00:00:00:01:01"
	macInt    = "02:00:00:00:01:02"
	macRouter = "02:00:00:00:0c:02"
	macBE     = "02:00:00:00:0b:01"
)

// parity is a gateway namespace with both datapaths configured alike.
type parity struct {
	ns       *netlab.NS
	dp       *gateway.Datapath
	eng      *Engine
	ext, int int
	now      time.Duration
}

// configurer is what both datapaths offer to be configured by.
type configurer interface {
	UpsertVIP(datapath.Frontend, datapath.VIPConfig) error
	UpsertBackend(datapath.BackendID, datapath.Backend) error
	SetMaglevTable(datapath.VIPID, []datapath.BackendID) error
	SetReverse(datapath.Endpoint, datapath.ReverseNAT) error
	SetSiteSource(netip.Prefix, datapath.SiteKind) error
}

var (
	pVIP      = netip.MustParseAddr("198.18.100.1")
	pVIPAll   = netip.MustParseAddr("198.18.100.2")
	pVIPAmb   = netip.MustParseAddr("198.18.100.3")
	pVIP6     = netip.MustParseAddr("2001:db8:100::1")
	pVIPDSR   = netip.MustParseAddr("198.18.100.4")
	pVIP6DSR  = netip.MustParseAddr("2001:db8:100::4")
	pVIPRange = netip.MustParseAddr("198.18.100.5")
	pBE       = []netip.Addr{netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("198.18.1.11"), netip.MustParseAddr("198.18.1.12")}
	pBE6      = netip.MustParseAddr("2001:db8:1::10")
	pClients  = netip.MustParsePrefix("198.18.128.0/17")
)

func newParity(t testing.TB) *parity {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the parity tests need root (BPF, netns); run them with `make test` as root")
	}
	p := netlab.Prefix()
	ns := netlab.New(t, p+"g")
	peer := netlab.New(t, p+"p")
	peer.Sysctl(t, "net.ipv6.conf.all.disable_ipv6", "1")
	peer.Sysctl(t, "net.ipv6.conf.default.disable_ipv6", "1")
	netlab.Veth(t, ns, "ext0", macExt, peer, "extp", "02:00:00:00:0c:01")
	netlab.Veth(t, ns, "int0", macInt, peer, "intp", "02:00:00:00:0b:09")
	for _, c := range []string{
		"addr add 198.18.0.1/24 dev ext0",
		"addr add 2001:db8::1/64 dev ext0 nodad",
		"addr add 198.18.1.1/24 dev int0",
		"addr add 2001:db8:1::1/64 dev int0 nodad",
		"route add 198.18.128.0/17 via 198.18.0.2",
		"-6 route add 2001:db8:80::/48 via 2001:db8::2",
		"neigh replace 198.18.0.2 lladdr " + macRouter + " dev ext0 nud permanent",
		"neigh replace 2001:db8::2 lladdr " + macRouter + " dev ext0 nud permanent",
		"neigh replace 198.18.1.10 lladdr " + macBE + " dev int0 nud permanent",
		"neigh replace 198.18.1.11 lladdr " + macBE + " dev int0 nud permanent",
		"neigh replace 198.18.1.12 lladdr " + macBE + " dev int0 nud permanent",
		"neigh replace 2001:db8:1::10 lladdr " + macBE + " dev int0 nud permanent",
	} {
		ns.MustIP(t, c)
	}
	ns.Forwarding(t)
	px := &parity{ns: ns}
	dp, err := gateway.Load(gateway.Options{NoPin: true, Settings: datapath.Settings{Seed: 7, NewFlowRate: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	px.dp = dp
	var h *netlink.Handle
	err = ns.Do(func() (err error) {
		for _, ifname := range []string{"ext0", "int0"} {
			if err := dp.Attach(ifname, datapath.AttachNative, map[string]datapath.Role{"ext0": datapath.RoleClient, "int0": datapath.RoleCluster}[ifname]); err != nil {
				return err
			}
		}
		if px.ext, err = ifindex("ext0"); err != nil {
			return err
		}
		if px.int, err = ifindex("int0"); err != nil {
			return err
		}
		h, err = netlink.NewHandle()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	px.eng, err = NewEngine(datapath.Settings{Seed: 7, NewFlowRate: -1}, NewResolver(h, 0))
	if err != nil {
		t.Fatal(err)
	}
	px.eng.setPort(px.ext, datapath.RoleClient)
	px.eng.setPort(px.int, datapath.RoleCluster)
	for _, c := range []configurer{dp, px.eng} {
		configureParity(t, c)
	}
	return px
}

func ifindex(name string) (int, error) {
	i, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return i.Index, nil
}

// configureParity sets up, in c: VIP 1 pVIP:80/TCP and VIP 2 pVIP:53/UDP over the three IPv4
// backends, VIP 3 [pVIP6]:443/TCP to pBE6, VIP 4 pVIPAll (all ports)/TCP to pBE[2], and VIPs 5
// and 6 pVIPAmb:80 and :8000/TCP to one endpoint pBE[0]:9090 (ambiguous).
func configureParity(t testing.TB, c configurer) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const m = 251
	fill := func(id datapath.VIPID, bids ...datapath.BackendID) {
		table := make([]datapath.BackendID, m)
		for i := range table {
			table[i] = bids[(i*7+int(id))%len(bids)]
		}
		must(c.SetMaglevTable(id, table))
	}
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIP, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIP, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 2}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIP6, Port: 443, Proto: datapath.TCP}, datapath.VIPConfig{ID: 3}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPAll, Port: 0, Proto: datapath.TCP}, datapath.VIPConfig{ID: 4}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPAmb, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 5}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPAmb, Port: 8000, Proto: datapath.TCP}, datapath.VIPConfig{ID: 6}))
	for i, a := range pBE {
		must(c.UpsertBackend(datapath.BackendID(1+i), datapath.Backend{Addr: a, Port: 8080}))
		must(c.UpsertBackend(datapath.BackendID(4+i), datapath.Backend{Addr: a, Port: 5353}))
		must(c.SetReverse(datapath.Endpoint{Addr: a, Port: 8080, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 1}))
		must(c.SetReverse(datapath.Endpoint{Addr: a, Port: 5353, Proto: datapath.UDP}, datapath.ReverseNAT{VIP: 2}))
	}
	must(c.UpsertBackend(7, datapath.Backend{Addr: pBE6, Port: 8443}))
	must(c.SetReverse(datapath.Endpoint{Addr: pBE6, Port: 8443, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 3}))
	must(c.UpsertBackend(8, datapath.Backend{Addr: pBE[2], Port: 0}))
	must(c.SetReverse(datapath.Endpoint{Addr: pBE[2], Port: 0, Proto: datapath.TCP}, datapath.ReverseNAT{VIP: 4}))
	must(c.UpsertBackend(9, datapath.Backend{Addr: pBE[0], Port: 9090}))
	must(c.UpsertBackend(10, datapath.Backend{Addr: pBE[1], Port: 9090}))
	must(c.SetReverse(datapath.Endpoint{Addr: pBE[0], Port: 9090, Proto: datapath.TCP},
		datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{5, 6}}))
	must(c.SetReverse(datapath.Endpoint{Addr: pBE[1], Port: 9090, Proto: datapath.TCP},
		datapath.ReverseNAT{Ambiguous: true, Candidates: [datapath.MaxReverseCandidates]datapath.VIPID{5, 6}}))
	fill(1, 1, 2, 3)
	fill(2, 4, 5, 6)
	fill(3, 7)
	fill(4, 8)
	fill(5, 9, 10)
	fill(6, 9, 10)
	// Direct server return: VIP 7 pVIPDSR:80/TCP over pBE[0] and pBE[1]:7070, VIP 8
	// pVIPDSR:53/UDP to pBE[2]:7053, VIP 9 [pVIP6DSR]:53/UDP to pBE6:7053.
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPDSR, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 7}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPDSR, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 8}))
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIP6DSR, Port: 53, Proto: datapath.UDP}, datapath.VIPConfig{ID: 9}))
	must(c.UpsertBackend(11, datapath.Backend{Addr: pBE[0], Port: 7070, DSR: true}))
	must(c.UpsertBackend(12, datapath.Backend{Addr: pBE[1], Port: 7070, DSR: true}))
	must(c.UpsertBackend(13, datapath.Backend{Addr: pBE[2], Port: 7053, DSR: true}))
	must(c.UpsertBackend(14, datapath.Backend{Addr: pBE6, Port: 7053, DSR: true}))
	fill(7, 11, 12)
	fill(8, 13)
	fill(9, 14)
	// VIP 10 pVIPRange:80/TCP over the IPv4 backends, for clients in 198.18.128.0/18 only.
	must(c.UpsertVIP(datapath.Frontend{Addr: pVIPRange, Port: 80, Proto: datapath.TCP},
		datapath.VIPConfig{ID: 10, SourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/18")}}))
	fill(10, 1, 2, 3)
	// The site: the backends' networks and the gateway's client-side address.
	must(c.SetSiteSource(netip.MustParsePrefix("198.18.1.0/24"), datapath.SiteCluster))
	must(c.SetSiteSource(netip.MustParsePrefix("2001:db8:1::/64"), datapath.SiteCluster))
	must(c.SetSiteSource(netip.MustParsePrefix("198.18.0.1/32"), datapath.SiteGateway))
}

// check runs frame through both datapaths, arriving on ifindex: both must send it, byte for
// byte the same, or neither (the XDP program passing or dropping it, the engine dropping it).
// It returns whether it was sent.
func (px *parity) check(t *testing.T, name string, frame []byte, ifindex int) bool {
	t.Helper()
	var res progrun.Result
	err := px.ns.Do(func() (err error) {
		res, err = progrun.XDP(px.dp.Program(), frame, ifindex, 0)
		return err
	})
	if err != nil {
		t.Fatalf("%s: test run: %v", name, err)
	}
	px.now += time.Millisecond
	// Room to grow, as a UMEM frame has (the carrier of direct server return).
	got := make([]byte, len(frame), len(frame)+64)
	copy(got, frame)
	v := px.eng.Process(got, ifindex, px.now)
	sent := res.Verdict == xdpTX || res.Verdict == xdpRedirect
	if sent != v.Send {
		t.Errorf("%s: XDP verdict %d, engine send=%v (reasons %v)", name, res.Verdict, v.Send, px.eng.ReasonCounts())
		return false
	}
	if sent && !bytes.Equal(res.Data, v.Frame) {
		t.Errorf("%s: outputs differ\nxdp    %x\nengine %x", name, res.Data, v.Frame)
	}
	if sent && (res.Verdict == xdpTX) != (v.Ifindex == ifindex) {
		t.Errorf("%s: XDP verdict %d, engine egress %d (ingress %d)", name, res.Verdict, v.Ifindex, ifindex)
	}
	return sent
}

// frameSpec is a test frame, built here independently of both datapaths (full checksums).
type frameSpec struct {
	src, dst netip.AddrPort
	proto    uint8
	flags    uint8 // TCP flags
	seq      uint32
	ttl      uint8
	payload  []byte
	noCsum   bool   // a UDP checksum of 0
	df       bool   // IPv4: don't fragment
	opts     []byte // IPv4 options (a multiple of 4 bytes)
}

func (f frameSpec) bytes() []byte {
	v4 := f.src.Addr().Is4()
	var l4 []byte
	if f.proto == protoTCP {
		l4 = make([]byte, tcpMinLen)
		binary.BigEndian.PutUint32(l4[4:], f.seq)
		l4[12] = 5 << 4
		l4[13] = f.flags
		binary.BigEndian.PutUint16(l4[14:], 65535)
	} else {
		l4 = make([]byte, udpLen)
	}
	binary.BigEndian.PutUint16(l4[0:], f.src.Port())
	binary.BigEndian.PutUint16(l4[2:], f.dst.Port())
	l4 = append(l4, f.payload...)
	if f.proto == protoUDP {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	}
	// The pseudo-header.
	var ph []byte
	ph = append(ph, f.src.Addr().AsSlice()...)
	ph = append(ph, f.dst.Addr().AsSlice()...)
	ph = append(ph, 0, f.proto)
	ph = binary.BigEndian.AppendUint16(ph, uint16(len(l4)))
	sum := onesSum(append(ph, l4...))
	if f.proto == protoUDP && sum == 0 {
		sum = 0xffff
	}
	if f.proto == protoUDP && f.noCsum {
		sum = 0
	}
	ck := 16
	if f.proto == protoUDP {
		ck = 6
	}
	binary.BigEndian.PutUint16(l4[ck:], sum)
	ttl := f.ttl
	if ttl == 0 {
		ttl = 64
	}
	var ip []byte
	et := uint16(etherTypeIPv4)
	if v4 {
		ip = append(make([]byte, ipv4MinLen), f.opts...)
		ip[0] = 0x40 | byte(len(ip)/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
		ip[8], ip[9] = ttl, f.proto
		if f.df {
			ip[6] = 0x40
		}
		copy(ip[12:], f.src.Addr().AsSlice())
		copy(ip[16:], f.dst.Addr().AsSlice())
		binary.BigEndian.PutUint16(ip[10:], onesSum(ip))
	} else {
		et = etherTypeIPv6
		ip = make([]byte, ipv6Len)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6], ip[7] = f.proto, ttl
		copy(ip[8:], f.src.Addr().AsSlice())
		copy(ip[24:], f.dst.Addr().AsSlice())
	}
	eth := make([]byte, ethLen)
	dst, _ := net.ParseMAC(macExt)
	copy(eth[0:], dst)
	copy(eth[6:], []byte{2, 0, 0, 0, 0x0c, 2})
	binary.BigEndian.PutUint16(eth[12:], et)
	return append(append(eth, ip...), l4...)
}

// onesSum is the Internet checksum of b (RFC 1071), computed from scratch.
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func randClient(r *rand.Rand) netip.AddrPort {
	b := pClients.Addr().As4()
	n := r.Uint32N(1 << 15)
	b[2] |= byte(n >> 8)
	b[3] = byte(n)
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(1024+r.IntN(60000)))
}

func TestParityWithXDP(t *testing.T) {
	px := newParity(t)
	r := rand.New(rand.NewPCG(1, 2))
	payload := func() []byte {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	sent := 0
	ok := func(name string, f frameSpec, ifindex int) {
		t.Helper()
		if px.check(t, name, f.bytes(), ifindex) {
			sent++
		}
	}
	vipTCP := netip.AddrPortFrom(pVIP, 80)
	for i := range 100 {
		c := randClient(r)
		seq := r.Uint32()
		// A handshake, a data packet and a FIN to VIP 1, and the backend's answers.
		ok(fmt.Sprintf("SYN %d", i), frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpSYN, seq: seq}, px.ext)
		ok(fmt.Sprintf("ACK %d", i), frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpACK, seq: seq + 1}, px.ext)
		ok(fmt.Sprintf("data %d", i), frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpACK | 0x08,
			seq: seq + 1, payload: payload(), ttl: uint8(2 + r.IntN(250))}, px.ext)
		be := px.backendOf(t, c, vipTCP)
		ok(fmt.Sprintf("SYN-ACK %d", i), frameSpec{src: be, dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}, px.int)
		ok(fmt.Sprintf("FIN %d", i), frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpFIN | tcpACK, seq: seq + 9}, px.ext)
		// UDP to VIP 2, with and without checksum.
		ok(fmt.Sprintf("UDP %d", i), frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP,
			payload: payload(), noCsum: i%4 == 0}, px.ext)
		// The all-ports VIP keeps the client's destination port.
		ok(fmt.Sprintf("all-ports %d", i), frameSpec{src: c, dst: netip.AddrPortFrom(pVIPAll, uint16(1+r.IntN(65535))),
			proto: protoTCP, flags: tcpACK}, px.ext)
		// The ambiguous endpoint: a flow through VIP 5 or 6 records its reverse entry; a reply of
		// a flow never seen is re-derived by Maglev (or dropped/passed by both).
		amb := netip.AddrPortFrom(pVIPAmb, []uint16{80, 8000}[i%2])
		ok(fmt.Sprintf("ambiguous SYN %d", i), frameSpec{src: c, dst: amb, proto: protoTCP, flags: tcpSYN, seq: seq}, px.ext)
		ambBE := netip.AddrPortFrom(pBE[0], 9090)
		ok(fmt.Sprintf("ambiguous reply %d", i), frameSpec{src: ambBE, dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}, px.int)
		ok(fmt.Sprintf("unseen ambiguous reply %d", i), frameSpec{src: ambBE, dst: randClient(r), proto: protoTCP, flags: tcpACK}, px.int)
		// IPv6.
		c6 := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:80::%x", 1+r.IntN(0xfffe))), c.Port())
		vip6 := netip.AddrPortFrom(pVIP6, 443)
		ok(fmt.Sprintf("IPv6 SYN %d", i), frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpSYN, seq: seq}, px.ext)
		ok(fmt.Sprintf("IPv6 ACK %d", i), frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpACK, seq: seq + 1,
			payload: payload()}, px.ext)
		ok(fmt.Sprintf("IPv6 reply %d", i), frameSpec{src: netip.AddrPortFrom(pBE6, 8443), dst: c6, proto: protoTCP,
			flags: tcpACK, payload: payload()}, px.int)
	}
	// Direct server return: the packets that open a flow carry the frontend, established ones
	// do not; a datagram the carrier would not fit on is answered "too big" (DF, IPv6) or goes
	// without it.
	dsr := netip.AddrPortFrom(pVIPDSR, 80)
	for i := range 50 {
		c := randClient(r)
		seq := r.Uint32()
		ok(fmt.Sprintf("DSR SYN %d", i), frameSpec{src: c, dst: dsr, proto: protoTCP, flags: tcpSYN, seq: seq}, px.ext)
		ok(fmt.Sprintf("DSR ACK %d", i), frameSpec{src: c, dst: dsr, proto: protoTCP, flags: tcpACK, seq: seq + 1}, px.ext)
		ok(fmt.Sprintf("DSR data %d", i), frameSpec{src: c, dst: dsr, proto: protoTCP, flags: tcpACK, seq: seq + 1,
			payload: payload()}, px.ext)
		u := netip.AddrPortFrom(pVIPDSR, 53)
		ok(fmt.Sprintf("DSR UDP %d", i), frameSpec{src: c, dst: u, proto: protoUDP, payload: payload()}, px.ext)
		big := make([]byte, 1500-ipv4MinLen-udpLen-r.IntN(8))
		ok(fmt.Sprintf("DSR big DF UDP %d", i), frameSpec{src: randClient(r), dst: u, proto: protoUDP, payload: big, df: true}, px.ext)
		ok(fmt.Sprintf("DSR big UDP %d", i), frameSpec{src: randClient(r), dst: u, proto: protoUDP, payload: big}, px.ext)
		c6 := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:80::%x", 1+r.IntN(0xfffe))), c.Port())
		u6 := netip.AddrPortFrom(pVIP6DSR, 53)
		ok(fmt.Sprintf("DSR IPv6 UDP %d", i), frameSpec{src: c6, dst: u6, proto: protoUDP, payload: payload()}, px.ext)
		ok(fmt.Sprintf("DSR big IPv6 UDP %d", i), frameSpec{src: c6, dst: u6, proto: protoUDP,
			payload: make([]byte, 1500-ipv6Len-udpLen-r.IntN(24))}, px.ext)
	}

	// A client's packet to a VIP with a carrier of its own is dropped (only gateways write
	// them), to a DSR backend or not, established or not; a carrier behind another option
	// (which a node refuses) is forwarded as any option.
	for i := range 20 {
		c := randClient(r)
		forged := []byte{datapath.CarrierOpt4Type, datapath.CarrierOpt4Len, 0, 22, 198, 18, 100, 4}
		ok(fmt.Sprintf("forged carrier SYN %d", i), frameSpec{src: c, dst: dsr, proto: protoTCP, flags: tcpSYN, opts: forged}, px.ext)
		ok(fmt.Sprintf("forged carrier UDP %d", i), frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP,
			payload: payload(), opts: forged}, px.ext)
		ok(fmt.Sprintf("late carrier SYN %d", i), frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoTCP, flags: tcpSYN,
			opts: append([]byte{1, 1, 1, 1}, forged...)}, px.ext)
	}

	// Neither sends: packets that may not do what they ask from where they arrive (side.h).
	for i := range 20 {
		c := randClient(r)
		be := netip.AddrPortFrom(pBE[i%3], 8080)
		ok(fmt.Sprintf("reply from the client side %d", i), frameSpec{src: be, dst: c, proto: protoTCP, flags: tcpACK}, px.ext)
		ok(fmt.Sprintf("site source from the client side %d", i), frameSpec{src: netip.AddrPortFrom(pBE[i%3], uint16(30000+i)),
			dst: vipTCP, proto: protoTCP, flags: tcpSYN}, px.ext)
		ok(fmt.Sprintf("VIP source %d", i), frameSpec{src: netip.AddrPortFrom(pVIPAll, uint16(30000+i)), dst: vipTCP, proto: protoTCP, flags: tcpSYN}, px.ext)
		ok(fmt.Sprintf("client on the cluster side %d", i), frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpSYN}, px.int)
		ok(fmt.Sprintf("in-cluster client %d", i), frameSpec{src: netip.AddrPortFrom(netip.MustParseAddr("198.18.1.77"), uint16(30000+i)),
			dst: vipTCP, proto: protoTCP, flags: tcpSYN}, px.int)
		ok(fmt.Sprintf("unserved UDP port %d", i), frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoUDP, payload: payload()}, px.ext)
	}
	// Neither sends: an expiring TTL, a VIP port nothing serves.
	c := randClient(r)
	ok("TTL 1", frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpSYN, ttl: 1}, px.ext)
	ok("no such port", frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 81), proto: protoTCP, flags: tcpSYN}, px.ext)
	// A TCP header whose data offset lies.
	f := frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpACK}.bytes()
	f[ethLen+ipv4MinLen+12] = 3 << 4
	if px.check(t, "data offset 3", f, px.ext) {
		t.Errorf("a TCP header with data offset 3 was sent")
	}
	rs := px.eng.ReasonCounts()
	for _, r := range []forward.Reason{forward.ReasonNATForward, forward.ReasonNATReverse, forward.ReasonNATReverseMaglev,
		forward.ReasonFwdRedirect, forward.ReasonHandshakeHit, forward.ReasonDropReverseNoCT, forward.ReasonDropTTL,
		forward.ReasonDSRCarried, forward.ReasonDSRNoRoom, forward.ReasonDSRTooBig, forward.ReasonDropCarrierForged,
		forward.ReasonDropSiteSource, forward.ReasonDropWrongSide, forward.ReasonDropReplyWrongSide, forward.ReasonDropVIPUnserved} {
		if rs[r] == 0 {
			t.Errorf("no %s among the engine's verdicts %v: a path the comparison did not cover", r, rs)
		}
	}
	t.Logf("engine verdicts: %v", rs)
	if sent < 100*12 {
		t.Errorf("%d frames sent by both, want at least %d: the comparison is mostly of drops", sent, 100*12)
	}
}

// backendOf returns the backend endpoint the engine's conntrack gives client c's flow to vip.
func (px *parity) backendOf(t *testing.T, c, vip netip.AddrPort) netip.AddrPort {
	t.Helper()
	for _, f := range px.eng.Flows(px.now) {
		if f.Src == c && f.Dst == vip && !f.Reverse {
			bs, _ := px.eng.Backends()
			b := bs[f.Backend]
			return netip.AddrPortFrom(b.Addr, b.Port)
		}
	}
	// A datagram flow that has sent one datagram: its handshake-table entry.
	for _, h := range px.eng.Handshakes(px.now) {
		if h.Client == c && h.VIPAddr == vip && h.Proto == datapath.UDP {
			bs, _ := px.eng.Backends()
			b := bs[h.Backend]
			return netip.AddrPortFrom(b.Addr, b.Port)
		}
	}
	t.Fatalf("no conntrack or first-datagram entry for %s -> %s", c, vip)
	return netip.AddrPort{}
}

// mapSteerer writes steer keys into a steer map (the Datapath's steerer, without a Datapath).
type mapSteerer struct{ m *ebpf.Map }

func (s mapSteerer) set(k steerSteerKey, on bool) error {
	if on {
		return s.m.Put(&k, uint8(1))
	}
	return s.m.Delete(&k)
}

// echoRequest is an ICMP (or ICMPv6) echo request from src to dst, checksums computed here.
func echoRequest(src, dst netip.Addr) []byte {
	v4 := src.Is4()
	ic := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'p', 'i', 'n', 'g'}
	proto := uint8(1)
	if !v4 {
		ic[0], proto = 128, 58
		var ph []byte
		ph = append(ph, src.AsSlice()...)
		ph = append(ph, dst.AsSlice()...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(ic)))
		ph = append(ph, 0, 0, 0, proto)
		binary.BigEndian.PutUint16(ic[2:], onesSum(append(ph, ic...)))
	} else {
		binary.BigEndian.PutUint16(ic[2:], onesSum(ic))
	}
	f := frameSpec{src: netip.AddrPortFrom(src, 0), dst: netip.AddrPortFrom(dst, 0), proto: protoTCP}.bytes()
	// Keep the Ethernet and IP headers of a TCP frame; replace the protocol and the payload.
	l3 := f[ethLen:]
	var hdr int
	if v4 {
		hdr = ipv4MinLen
		l3[9] = proto
		binary.BigEndian.PutUint16(l3[2:], uint16(hdr+len(ic)))
		l3[10], l3[11] = 0, 0
		binary.BigEndian.PutUint16(l3[10:], onesSum(l3[:hdr]))
	} else {
		hdr = ipv6Len
		l3[6] = proto
		binary.BigEndian.PutUint16(l3[4:], uint16(len(ic)))
	}
	return append(f[:ethLen+hdr], ic...)
}

// TestSteerProgram runs steer.c under BPF_PROG_TEST_RUN with the steer keys an engine writes:
// frames to a frontend and a backend's replies are steered (here: no socket, so counted as
// such and passed), and so are echo requests and ICMP errors of ours; the rest is left alone.
func TestSteerProgram(t *testing.T) {
	px := newParity(t)
	var objs steerObjects
	if err := loadSteerObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	eng, err := NewEngine(datapath.Settings{Seed: 7}, fakeHops{})
	if err != nil {
		t.Fatal(err)
	}
	eng.steer = mapSteerer{objs.Steer}
	configureParity(t, eng)

	counts := func() Steered {
		out, err := readSteered(objs.Steered)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run := func(frame []byte, ifindex int) progrun.Result {
		t.Helper()
		var res progrun.Result
		err := px.ns.Do(func() (err error) {
			res, err = progrun.XDP(objs.XlbSteer, frame, ifindex, 0)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const xdpPass, xdpDrop = 2, 1
	c := netip.MustParseAddrPort("198.18.128.7:40000")
	for _, tc := range []struct {
		name    string
		frame   []byte
		ifindex int
		steered bool // counted as ours (no socket in a test run)
	}{
		{"TCP to a frontend", frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoTCP, flags: tcpSYN}.bytes(), px.ext, true},
		{"UDP to a frontend", frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP}.bytes(), px.ext, true},
		{"all-ports frontend", frameSpec{src: c, dst: netip.AddrPortFrom(pVIPAll, 4321), proto: protoTCP, flags: tcpACK}.bytes(), px.ext, true},
		{"IPv6 frontend", frameSpec{src: netip.MustParseAddrPort("[2001:db8:80::7]:40000"), dst: netip.AddrPortFrom(pVIP6, 443), proto: protoTCP, flags: tcpSYN}.bytes(), px.ext, true},
		// A VIP address on a port no frontend has: the engine drops it (drop_vip_unserved).
		{"a port no frontend has", frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 81), proto: protoTCP, flags: tcpSYN}.bytes(), px.ext, true},
		{"UDP to a TCP frontend's port", frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoUDP}.bytes(), px.ext, true},
		{"a backend's reply", frameSpec{src: netip.AddrPortFrom(pBE[0], 8080), dst: c, proto: protoTCP, flags: tcpACK}.bytes(), px.int, true},
		{"a backend's reply to this host", frameSpec{src: netip.AddrPortFrom(pBE[0], 8080), dst: netip.MustParseAddrPort("198.18.1.1:5555"), proto: protoTCP, flags: tcpACK}.bytes(), px.int, false},
		{"another port of a backend", frameSpec{src: netip.AddrPortFrom(pBE[0], 22), dst: c, proto: protoTCP, flags: tcpACK}.bytes(), px.int, false},
	} {
		before := counts()
		res := run(tc.frame, tc.ifindex)
		after := counts()
		if res.Verdict != xdpPass || after.ToSocket != before.ToSocket {
			t.Errorf("%s: verdict %d, %d to a socket: want XDP_PASS (no socket in a test run)", tc.name, res.Verdict, after.ToSocket-before.ToSocket)
		}
		if got := after.NoSocket - before.NoSocket; got != map[bool]uint64{true: 1, false: 0}[tc.steered] {
			t.Errorf("%s: counted %d as steered without socket, want steered=%v", tc.name, got, tc.steered)
		}
		if got := after.NotOurs - before.NotOurs; got != map[bool]uint64{true: 0, false: 1}[tc.steered] {
			t.Errorf("%s: counted %d as not ours, want steered=%v", tc.name, got, tc.steered)
		}
	}
	before := counts()
	run(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 80), proto: protoTCP, flags: tcpSYN, ttl: 1}.bytes(), px.ext)
	if got := counts().Passed - before.Passed; got != 1 {
		t.Errorf("an expiring TTL: %d counted passed, want 1", got)
	}

	// IPv4 fragments: the engine keeps no fragment state. To a VIP address they are dropped
	// (passed, they would loop through the router or reach the gateway's sockets); a backend's
	// are left to the kernel.
	frag := func(f frameSpec, fragOff uint16) []byte {
		b := f.bytes()
		binary.BigEndian.PutUint16(b[14+6:], fragOff)
		return b
	}
	for _, tc := range []struct {
		name    string
		frame   []byte
		ifindex int
		verdict uint32
		dropped uint64
	}{
		{"a first fragment to a VIP", frag(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP}, 0x2000), px.ext, xdpDrop, 1},
		{"a later fragment to a VIP", frag(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP}, 0x0003), px.ext, xdpDrop, 1},
		{"a fragment to a VIP's unserved port", frag(frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 81), proto: protoUDP}, 0x2000), px.ext, xdpDrop, 1},
		{"a backend's fragment", frag(frameSpec{src: netip.AddrPortFrom(pBE[0], 8080), dst: c, proto: protoTCP, flags: tcpACK}, 0x2000), px.int, xdpPass, 0},
	} {
		before := counts()
		if res := run(tc.frame, tc.ifindex); res.Verdict != tc.verdict {
			t.Errorf("%s: verdict %d, want %d", tc.name, res.Verdict, tc.verdict)
		}
		after := counts()
		if got := after.Fragments - before.Fragments; got != tc.dropped {
			t.Errorf("%s: %d counted as dropped fragments, want %d", tc.name, got, tc.dropped)
		}
		if got := after.Passed - before.Passed; got != 1-tc.dropped {
			t.Errorf("%s: %d counted passed, want %d", tc.name, got, 1-tc.dropped)
		}
	}

	// ICMP: echo requests to a VIP address and errors to one or quoting a backend endpoint go
	// to the engine (icmp.go), the rest to the kernel.
	c6 := netip.MustParseAddrPort("[2001:db8:80::7]:40000")
	router, router6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::2")
	quote := func(f frameSpec) []byte { return f.bytes()[ethLen:] }
	for _, tc := range []struct {
		name    string
		frame   []byte
		ifindex int
		steered bool
	}{
		{"ping a VIP", echoRequest(c.Addr(), pVIP), px.ext, true},
		{"ping an IPv6 VIP", echoRequest(c6.Addr(), pVIP6), px.ext, true},
		{"ping another address", echoRequest(c.Addr(), netip.MustParseAddr("198.18.200.1")), px.ext, false},
		{"an error to a VIP address", icmpErrorFrame(router, pVIP, 3, 4, 1400,
			quote(frameSpec{src: netip.AddrPortFrom(pVIP, 80), dst: c, proto: protoTCP, flags: tcpACK})), px.ext, true},
		{"an IPv6 error to a VIP address", icmpErrorFrame(router6, pVIP6, 2, 0, 1400,
			quote(frameSpec{src: netip.AddrPortFrom(pVIP6, 443), dst: c6, proto: protoTCP, flags: tcpACK})), px.ext, true},
		{"an error quoting a backend endpoint", icmpErrorFrame(netip.MustParseAddr("198.18.1.9"), c.Addr(), 3, 3, 0,
			quote(frameSpec{src: c, dst: netip.AddrPortFrom(pBE[0], 8080), proto: protoTCP, flags: tcpACK})), px.int, true},
		{"an IPv6 error quoting a backend endpoint", icmpErrorFrame(netip.MustParseAddr("2001:db8:1::9"), c6.Addr(), 1, 4, 0,
			quote(frameSpec{src: c6, dst: netip.AddrPortFrom(pBE6, 8443), proto: protoTCP, flags: tcpACK})), px.int, true},
		{"an error quoting another port of a backend", icmpErrorFrame(netip.MustParseAddr("198.18.1.9"), c.Addr(), 3, 3, 0,
			quote(frameSpec{src: c, dst: netip.AddrPortFrom(pBE[0], 22), proto: protoTCP, flags: tcpACK})), px.int, false},
		{"an error quoting nothing", icmpErrorFrame(router, c.Addr(), 3, 3, 0, nil), px.ext, false},
		{"an echo reply to a VIP", func() []byte {
			f := echoRequest(c.Addr(), pVIP)
			f[ethLen+ipv4MinLen] = 0 // the type; the checksum no longer matters here
			return f
		}(), px.ext, false},
	} {
		before := counts()
		res := run(tc.frame, tc.ifindex)
		after := counts()
		if res.Verdict != xdpPass {
			t.Errorf("%s: verdict %d, want XDP_PASS (no socket in a test run)", tc.name, res.Verdict)
		}
		want := map[bool]uint64{true: 1, false: 0}[tc.steered]
		if after.NoSocket-before.NoSocket != want || after.ICMP-before.ICMP != want || after.NotOurs-before.NotOurs != 1-want {
			t.Errorf("%s: counted %d steered without socket, %d ICMP, %d not ours: want steered=%v", tc.name,
				after.NoSocket-before.NoSocket, after.ICMP-before.ICMP, after.NotOurs-before.NotOurs, tc.steered)
		}
	}
	// The address's last frontend gone, its echo requests go to the kernel.
	for _, f := range []datapath.Frontend{{Addr: pVIP, Port: 80, Proto: datapath.TCP}, {Addr: pVIP, Port: 53, Proto: datapath.UDP}} {
		if err := eng.DeleteVIP(f); err != nil {
			t.Fatal(err)
		}
	}
	if res := run(echoRequest(c.Addr(), pVIP), px.ext); res.Verdict != xdpPass {
		t.Errorf("ping a VIP with no frontend left: verdict %d, want XDP_PASS", res.Verdict)
	}
}

// quotedFlow reads an ICMP error frame (untagged, IPv4 without options or IPv6 without extension
// headers): its destination, the advertised path MTU (0 unless a "too big"), and the flow its
// quote names, turned into the client -> frontend direction it would be keyed by (the quote is
// of a packet toward the client). ok is false when the frame is not such an error.
func quotedFlow(frame []byte) (dst netip.Addr, mtu uint32, client, front netip.AddrPort, ok bool) {
	if len(frame) < ethLen+ipv4MinLen {
		return
	}
	var ic, q []byte
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		ip := frame[ethLen:]
		if ip[9] != 1 || len(ip) < ipv4MinLen+8+ipv4MinLen+4 {
			return
		}
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		ic = ip[ipv4MinLen:]
		if ic[0] != 3 && ic[0] != 11 {
			return
		}
		if ic[0] == 3 && ic[1] == 4 {
			mtu = uint32(binary.BigEndian.Uint16(ic[6:]))
		}
		q = ic[8:]
		src4, dst4 := netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))
		l4 := q[int(q[0]&0xf)*4:]
		if len(l4) < 4 {
			return
		}
		front = netip.AddrPortFrom(src4, binary.BigEndian.Uint16(l4[0:]))
		client = netip.AddrPortFrom(dst4, binary.BigEndian.Uint16(l4[2:]))
	case etherTypeIPv6:
		ip := frame[ethLen:]
		if len(ip) < ipv6Len+8+ipv6Len+4 || ip[6] != 58 {
			return
		}
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		ic = ip[ipv6Len:]
		if ic[0] < 1 || ic[0] > 3 {
			return
		}
		if ic[0] == 2 {
			mtu = binary.BigEndian.Uint32(ic[4:])
		}
		q = ic[8:]
		l4 := q[ipv6Len:]
		front = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[8:24])), binary.BigEndian.Uint16(l4[0:]))
		client = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[24:40])), binary.BigEndian.Uint16(l4[2:]))
	default:
		return
	}
	return dst, mtu, client, front, true
}

// icmpErrorFrame is an ICMP (ICMPv6) error of type typ/code advertising mtu, from src to dst,
// quoting quote; checksums computed here.
func icmpErrorFrame(src, dst netip.Addr, typ, code uint8, mtu uint32, quote []byte) []byte {
	ic := append([]byte{typ, code, 0, 0, 0, 0, 0, 0}, quote...)
	binary.BigEndian.PutUint32(ic[4:], mtu)
	f := echoRequest(src, dst) // Ethernet and IP headers, then replaced
	v4 := src.Is4()
	hdr := ipv4MinLen
	if !v4 {
		hdr = ipv6Len
		var ph []byte
		ph = append(ph, src.AsSlice()...)
		ph = append(ph, dst.AsSlice()...)
		ph = binary.BigEndian.AppendUint32(ph, uint32(len(ic)))
		ph = append(ph, 0, 0, 0, 58)
		binary.BigEndian.PutUint16(ic[2:], onesSum(append(ph, ic...)))
	} else {
		binary.BigEndian.PutUint16(ic[2:], onesSum(ic))
	}
	f = append(f[:ethLen+hdr], ic...)
	l3 := f[ethLen:]
	if v4 {
		binary.BigEndian.PutUint16(l3[2:], uint16(hdr+len(ic)))
		l3[10], l3[11] = 0, 0
		binary.BigEndian.PutUint16(l3[10:], onesSum(l3[:hdr]))
	} else {
		binary.BigEndian.PutUint16(l3[4:], uint16(len(ic)))
	}
	return f
}

// TestHostileICMPReachesOnlyKnownFlows: random ICMP errors from the client side, about flows
// that went through the gateway and flows that never did, with path MTUs of any size and quotes
// cut anywhere, run through the XDP program. Whatever it sends to the cluster side must be about
// a flow that exists (the engine, fed the same traffic, has its conntrack entry) and advertise
// no path MTU below the floors; the AF_XDP engine, fed the same, sends the same bytes or nothing.
func TestHostileICMPReachesOnlyKnownFlows(t *testing.T) {
	px := newParity(t)
	r := rand.New(rand.NewPCG(3, 4))
	vipTCP := netip.AddrPortFrom(pVIP, 80)
	vip6 := netip.AddrPortFrom(pVIP6, 443)
	var known []netip.AddrPort
	for range 40 {
		c := randClient(r)
		px.check(t, "open", frameSpec{src: c, dst: vipTCP, proto: protoTCP, flags: tcpACK, seq: r.Uint32()}.bytes(), px.ext)
		known = append(known, c)
		c6 := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:80::%x", 1+r.IntN(0xfffe))), c.Port())
		px.check(t, "open v6", frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpACK, seq: r.Uint32()}.bytes(), px.ext)
		known = append(known, c6)
	}
	exists := map[[2]netip.AddrPort]bool{}
	for _, f := range px.eng.Flows(px.now) {
		if !f.Reverse {
			exists[[2]netip.AddrPort{f.Src, f.Dst}] = true
		}
	}
	relayed, dropped := 0, 0
	for i := range 2000 {
		c := known[r.IntN(len(known))]
		if r.IntN(2) == 0 { // a flow that never went through
			if c.Addr().Is4() {
				c = randClient(r)
			} else {
				c = netip.AddrPortFrom(c.Addr(), uint16(1024+r.IntN(60000)))
			}
		}
		front := vipTCP
		router := netip.MustParseAddr("198.18.0.2")
		typ, code := uint8(3), uint8(4)
		if c.Addr().Is6() {
			front, router, typ, code = vip6, netip.MustParseAddr("2001:db8::2"), 2, 0
		}
		if r.IntN(8) == 0 {
			front = netip.AddrPortFrom(front.Addr(), uint16(r.IntN(65536))) // any port of the VIP
		}
		quoted := frameSpec{src: front, dst: c, proto: protoTCP, flags: tcpACK, payload: make([]byte, 64)}.bytes()[ethLen:]
		quoted = quoted[:r.IntN(len(quoted)+1)]
		mtu := uint32(r.IntN(1600))
		in := icmpErrorFrame(router, front.Addr(), typ, code, mtu, quoted)
		var res progrun.Result
		if err := px.ns.Do(func() (err error) {
			res, err = progrun.XDP(px.dp.Program(), in, px.ext, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		v := px.eng.Process(append([]byte(nil), in...), px.ext, px.now)
		sent := res.Verdict == xdpTX || res.Verdict == xdpRedirect
		if v.Send != sent {
			t.Errorf("error %d: XDP verdict %d, the AF_XDP engine sent=%v", i, res.Verdict, v.Send)
		} else if sent && (!bytes.Equal(v.Frame, res.Data) || v.Ifindex != px.int) {
			t.Errorf("error %d: outputs differ\nxdp    %x\nengine %x (out of %d)", i, res.Data, v.Frame, v.Ifindex)
		}
		if !sent {
			dropped++
			continue
		}
		relayed++
		_, gotMTU, cl, _, ok := quotedFlow(res.Data)
		if !ok {
			t.Errorf("error %d: sent something that is no ICMP error: %x", i, res.Data)
			continue
		}
		// The quote now names the backend; the flow is keyed client -> frontend.
		if !exists[[2]netip.AddrPort{cl, front}] {
			t.Errorf("error %d: relayed an error about %s -> %s, a flow that does not exist", i, cl, front)
		}
		if gotMTU != 0 && (c.Addr().Is4() && gotMTU < 552 || c.Addr().Is6() && gotMTU < 1280) {
			t.Errorf("error %d: relayed a path MTU of %d", i, gotMTU)
		}
	}
	if relayed == 0 || dropped == 0 {
		t.Errorf("%d relayed, %d dropped: the cases did not cover both", relayed, dropped)
	}
	t.Logf("%d errors relayed, %d not", relayed, dropped)
}

// FuzzParity: the XDP program and the AF_XDP engine agree on every frame the steer program
// hands the engine: both send the same bytes out of the same side, or neither sends. Each input
// is two frames (the first can make the state the second meets), each from the side its bit of
// sides says, run on flow state emptied first, so that a failing input replays alone. A frame the
// steer program keeps from the engine (passed, dropped or answered there) is TestSteerProgram's.
// `go test` runs the seeds; `go test -fuzz FuzzParity ./xdp/afxdp/` explores.
func FuzzParity(f *testing.F) {
	c := netip.MustParseAddrPort("198.18.128.7:40000")
	c6 := netip.MustParseAddrPort("[2001:db8:80::7]:40000")
	vip := netip.AddrPortFrom(pVIP, 80)
	syn := frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpSYN, seq: 7}.bytes()
	ack := frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpACK, seq: 8, payload: []byte("GET /")}.bytes()
	for _, s := range []struct {
		a, b  []byte
		sides uint8 // bit 0: a from the cluster side; bit 1: b
	}{
		{syn, ack, 0},
		{ack, ack, 0},
		{ack, ack, 2},
		{syn, frameSpec{src: netip.AddrPortFrom(pBE[0], 8080), dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}.bytes(), 2},
		{frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 53), proto: protoUDP, payload: []byte("q")}.bytes(),
			frameSpec{src: netip.AddrPortFrom(pBE[1], 5353), dst: c, proto: protoUDP, payload: []byte("a")}.bytes(), 2},
		{frameSpec{src: c, dst: netip.AddrPortFrom(pVIPAll, 4321), proto: protoTCP, flags: tcpACK}.bytes(), ack, 0},
		{frameSpec{src: c, dst: netip.AddrPortFrom(pVIPAmb, 8000), proto: protoTCP, flags: tcpSYN}.bytes(),
			frameSpec{src: netip.AddrPortFrom(pBE[0], 9090), dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}.bytes(), 2},
		{frameSpec{src: c6, dst: netip.AddrPortFrom(pVIP6, 443), proto: protoTCP, flags: tcpSYN}.bytes(),
			frameSpec{src: netip.AddrPortFrom(pBE6, 8443), dst: c6, proto: protoTCP, flags: tcpACK}.bytes(), 2},
		{frameSpec{src: c, dst: netip.AddrPortFrom(pVIPDSR, 80), proto: protoTCP, flags: tcpSYN}.bytes(), ack, 0},
		{frameSpec{src: netip.AddrPortFrom(pBE[1], 8080), dst: vip, proto: protoTCP, flags: tcpSYN}.bytes(), syn, 1},
		{frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpSYN, ttl: 1}.bytes(),
			frameSpec{src: c, dst: netip.AddrPortFrom(pVIP, 81), proto: protoUDP}.bytes(), 0},
		// ICMP: an echo request; errors about a flow from either side; a flow too big.
		{echoRequest(c.Addr(), pVIPRange), echoRequest(c6.Addr(), pVIP6), 0},
		{syn, icmpErrorFrame(netip.MustParseAddr("198.18.0.2"), pVIP, 3, 4, 1400,
			frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}.bytes()[ethLen:]), 0},
		{ack, icmpErrorFrame(pBE[1], c.Addr(), 3, 3, 0,
			frameSpec{src: c, dst: netip.AddrPortFrom(pBE[1], 8080), proto: protoTCP, flags: tcpACK}.bytes()[ethLen:]), 2},
		{ack, frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpACK, seq: 8, payload: make([]byte, 1500), df: true}.bytes(), 0},
	} {
		f.Add(s.a, s.b, s.sides)
	}
	px := newParity(f)
	var objs steerObjects
	if err := loadSteerObjects(&objs, nil); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { objs.Close() })
	filler, err := NewEngine(datapath.Settings{Seed: 7}, fakeHops{})
	if err != nil {
		f.Fatal(err)
	}
	filler.steer = mapSteerer{objs.Steer}
	configureParity(f, filler)
	f.Fuzz(func(t *testing.T, a, b []byte, sides uint8) {
		if _, err := px.dp.FlushFlows(nil); err != nil {
			t.Fatal(err)
		}
		px.eng.FlushFlows(px.now, nil)
		for i, frame := range [][]byte{a, b} {
			if len(frame) < ethLen { // BPF_PROG_TEST_RUN refuses less than an Ethernet header
				continue
			}
			ifindex := px.ext
			if sides&(1<<i) != 0 {
				ifindex = px.int
			}
			before, err := readSteered(objs.Steered)
			if err != nil {
				t.Fatal(err)
			}
			if err := px.ns.Do(func() error {
				_, err := progrun.XDP(objs.XlbSteer, frame, ifindex, 0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			after, err := readSteered(objs.Steered)
			if err != nil {
				t.Fatal(err)
			}
			if after.NoSocket == before.NoSocket { // not handed to the engine
				continue
			}
			px.check(t, fmt.Sprintf("fuzzed frame %d", i), frame, ifindex)
		}
	})
}

// TestParityICMP: ICMP through both datapaths, byte for byte: echo requests to VIP addresses
// (with and without source ranges), ICMP errors about flows the gateway knows from the side each
// may come from (relayed, all four checksums fixed), from the wrong side, about unknown flows,
// with quotes cut short and with path MTUs below the floors (dropped), and packets too big for
// the next hop's MTU (1500 here) answered "too big" to the client (from the VIP, its quote
// restored) or to the backend (from the gateway's own address), or, when they may be
// fragmented, sent by neither.
func TestParityICMP(t *testing.T) {
	px := newParity(t)
	r := rand.New(rand.NewPCG(5, 6))
	sent := map[bool]int{}
	ok := func(name string, frame []byte, ifindex int, want bool) {
		t.Helper()
		got := px.check(t, name, frame, ifindex)
		sent[got]++
		if got != want {
			t.Errorf("%s: sent=%v, want %v (reasons %v)", name, got, want, px.eng.ReasonCounts())
		}
	}
	quote := func(f frameSpec, n int) []byte {
		b := f.bytes()[ethLen:]
		return b[:min(n, len(b))]
	}
	router, router6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::2")
	inside := netip.MustParseAddr("198.18.1.9")

	// Echo.
	ok("ping a VIP", echoRequest(netip.MustParseAddr("198.18.128.9"), pVIP), px.ext, true)
	ok("ping an IPv6 VIP", echoRequest(netip.MustParseAddr("2001:db8:80::9"), pVIP6), px.ext, true)
	ok("ping a ranged VIP from inside its ranges", echoRequest(netip.MustParseAddr("198.18.130.9"), pVIPRange), px.ext, true)
	ok("ping a ranged VIP from outside", echoRequest(netip.MustParseAddr("198.18.200.9"), pVIPRange), px.ext, false)

	big := make([]byte, 1600)
	for i := range 30 {
		c := randClient(r)
		c6 := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("2001:db8:80::%x", 1+r.IntN(0xfffe))), c.Port())
		vip, vip6, vipUDP := netip.AddrPortFrom(pVIP, 80), netip.AddrPortFrom(pVIP6, 443), netip.AddrPortFrom(pVIP, 53)
		seq := r.Uint32()
		ok(fmt.Sprintf("SYN %d", i), frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpSYN, seq: seq}.bytes(), px.ext, true)
		// Before the handshake completes: the handshake entry names the backend.
		ok(fmt.Sprintf("error about a half-open flow %d", i), icmpErrorFrame(router, pVIP, 3, 4, 1400,
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpSYN | tcpACK}, 64)), px.ext, true)
		ok(fmt.Sprintf("ACK %d", i), frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpACK, seq: seq + 1}.bytes(), px.ext, true)
		ok(fmt.Sprintf("IPv6 SYN %d", i), frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpSYN, seq: seq}.bytes(), px.ext, true)
		ok(fmt.Sprintf("IPv6 ACK %d", i), frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpACK, seq: seq + 1}.bytes(), px.ext, true)
		ok(fmt.Sprintf("UDP %d", i), frameSpec{src: c, dst: vipUDP, proto: protoUDP, payload: []byte("q"), noCsum: i%3 == 0}.bytes(), px.ext, true)
		be := px.backendOf(t, c, vip)
		be6 := px.backendOf(t, c6, vip6)
		beUDP := px.backendOf(t, c, vipUDP)
		n := 28 + r.IntN(40) // the quote: the header and 8 bytes of L4 at least, the checksum sometimes
		n6 := 48 + r.IntN(40)

		// From the client side, about VIP -> client: toward the backend.
		ok(fmt.Sprintf("frag needed %d", i), icmpErrorFrame(router, pVIP, 3, 4, uint32(552+r.IntN(1000)),
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpACK, payload: big[:40]}, n)), px.ext, true)
		ok(fmt.Sprintf("time exceeded %d", i), icmpErrorFrame(router, pVIP, 11, 0, 0,
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpACK}, n)), px.ext, true)
		ok(fmt.Sprintf("port unreachable (UDP) %d", i), icmpErrorFrame(router, pVIP, 3, 3, 0,
			quote(frameSpec{src: vipUDP, dst: c, proto: protoUDP, payload: []byte("answer"), noCsum: i%2 == 0}, n)), px.ext, true)
		ok(fmt.Sprintf("IPv6 too big %d", i), icmpErrorFrame(router6, pVIP6, 2, 0, uint32(1280+r.IntN(200)),
			quote(frameSpec{src: vip6, dst: c6, proto: protoTCP, flags: tcpACK, payload: big[:40]}, n6)), px.ext, true)
		ok(fmt.Sprintf("frag needed below the floor %d", i), icmpErrorFrame(router, pVIP, 3, 4, uint32(r.IntN(552)),
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpACK}, n)), px.ext, false)
		ok(fmt.Sprintf("IPv6 too big below the floor %d", i), icmpErrorFrame(router6, pVIP6, 2, 0, uint32(r.IntN(1280)),
			quote(frameSpec{src: vip6, dst: c6, proto: protoTCP, flags: tcpACK}, n6)), px.ext, false)
		ok(fmt.Sprintf("about an unknown flow %d", i), icmpErrorFrame(router, pVIP, 3, 4, 1400,
			quote(frameSpec{src: vip, dst: randClient(r), proto: protoTCP, flags: tcpACK}, n)), px.ext, false)
		ok(fmt.Sprintf("quote too short %d", i), icmpErrorFrame(router, pVIP, 3, 4, 1400,
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpACK}, r.IntN(28))), px.ext, false)
		ok(fmt.Sprintf("from the cluster side %d", i), icmpErrorFrame(inside, pVIP, 3, 4, 1400,
			quote(frameSpec{src: vip, dst: c, proto: protoTCP, flags: tcpACK}, n)), px.int, false)

		// From the cluster side, about client -> backend: toward the client, from the VIP when
		// the backend itself sent it.
		ok(fmt.Sprintf("backend's port unreachable %d", i), icmpErrorFrame(beUDP.Addr(), c.Addr(), 3, 3, 0,
			quote(frameSpec{src: c, dst: beUDP, proto: protoUDP, payload: []byte("q"), noCsum: i%3 == 0}, n)), px.int, true)
		ok(fmt.Sprintf("router's frag needed %d", i), icmpErrorFrame(inside, c.Addr(), 3, 4, uint32(552+r.IntN(900)),
			quote(frameSpec{src: c, dst: be, proto: protoTCP, flags: tcpACK, payload: big[:40]}, n)), px.int, true)
		ok(fmt.Sprintf("IPv6 backend's unreachable %d", i), icmpErrorFrame(be6.Addr(), c6.Addr(), 1, 4, 0,
			quote(frameSpec{src: c6, dst: be6, proto: protoTCP, flags: tcpACK}, n6)), px.int, true)
		ok(fmt.Sprintf("about another backend %d", i), icmpErrorFrame(inside, c.Addr(), 3, 3, 0,
			quote(frameSpec{src: c, dst: netip.AddrPortFrom(pBE[(slicesIndex(pBE, be.Addr())+1)%len(pBE)], 8080),
				proto: protoTCP, flags: tcpACK}, n)), px.int, false)
		ok(fmt.Sprintf("from the client side about a backend %d", i), icmpErrorFrame(router, c.Addr(), 3, 3, 0,
			quote(frameSpec{src: c, dst: be, proto: protoTCP, flags: tcpACK}, n)), px.ext, false)

		// Too big for the 1500-byte links: answered when it may not be fragmented.
		ok(fmt.Sprintf("too big DF TCP %d", i), frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpACK, seq: seq + 1,
			payload: big[:1500-r.IntN(40)], df: true}.bytes(), px.ext, true)
		ok(fmt.Sprintf("too big TCP %d", i), frameSpec{src: c, dst: vip, proto: protoTCP, flags: tcpACK, seq: seq + 1,
			payload: big[:1500]}.bytes(), px.ext, false)
		ok(fmt.Sprintf("too big DF UDP %d", i), frameSpec{src: c, dst: vipUDP, proto: protoUDP, payload: big[:1500],
			df: true, noCsum: i%2 == 0}.bytes(), px.ext, true)
		ok(fmt.Sprintf("too big IPv6 TCP %d", i), frameSpec{src: c6, dst: vip6, proto: protoTCP, flags: tcpACK, seq: seq + 1,
			payload: big[:1500]}.bytes(), px.ext, true)
		ok(fmt.Sprintf("too big reply %d", i), frameSpec{src: be, dst: c, proto: protoTCP, flags: tcpACK,
			payload: big[:1500], df: true}.bytes(), px.int, true)
		ok(fmt.Sprintf("too big IPv6 reply %d", i), frameSpec{src: be6, dst: c6, proto: protoTCP, flags: tcpACK,
			payload: big[:1500]}.bytes(), px.int, true)
		ok(fmt.Sprintf("too big DSR IPv6 UDP %d", i), frameSpec{src: c6, dst: netip.AddrPortFrom(pVIP6DSR, 53), proto: protoUDP,
			payload: big[:1500]}.bytes(), px.ext, true)
	}
	reasons := px.eng.ReasonCounts()
	for _, r := range []forward.Reason{forward.ReasonICMPEchoReply, forward.ReasonDropICMPSrcRange, forward.ReasonICMPToBackend,
		forward.ReasonICMPToClient, forward.ReasonDropICMPUnknown, forward.ReasonDropICMPPTBLow, forward.ReasonICMPTooBigClient,
		forward.ReasonICMPTooBigBackend, forward.ReasonDropMTU, forward.ReasonDropReplyWrongSide, forward.ReasonDropWrongSide} {
		if reasons[r] == 0 {
			t.Errorf("reason %s never counted: the cases missed it (%v)", r, reasons)
		}
	}
	t.Logf("%d sent, %d not; engine reasons %v", sent[true], sent[false], reasons)
}

func slicesIndex(s []netip.Addr, a netip.Addr) int {
	for i, x := range s {
		if x == a {
			return i
		}
	}
	return -1
}
