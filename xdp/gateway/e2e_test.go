// SPDX-License-Identifier: Apache-2.0
package gateway

// End-to-end tests: the datapath attached to a gateway namespace between a client namespace and
// a backend namespace, with real TCP and UDP servers and clients, through real veth links.
//
//	client (c0) <-veth-> (gc) gateway (gb) <-veth-> (b0) backend
//
// The VIPs are configured on no interface: only the XDP program on the gateway makes them
// reachable. They need root (namespaces, XDP, bpffs).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Interface names inside the lab namespaces (each namespace has its own, so they never collide).
const (
	e2eClientIf    = "c0" // client's end of the client link
	e2eGWClientIf  = "gc" // gateway's end of the client link
	e2eGWBackendIf = "gb" // gateway's end of the backend link
	e2eBackendIf   = "b0" // backend's end of the backend link
)

// Service ports: what clients address at the VIP, and where the backend listens.
const (
	e2eVIPTCPPort     = 80
	e2eBackendTCPPort = 8080
	e2eVIPUDPPort     = 53
	e2eBackendUDPPort = 5353
)

const (
	e2eConntrackSize = 65536
	e2eMaglevM       = 251              // a prime
	e2eIOTimeout     = 5 * time.Second  // bound of every socket exchange
	e2eReadyTimeout  = 20 * time.Second // bound of a loader child's Load + configure + Attach
)

// Environment of a loader child (see TestMain and runE2ELoader).
const (
	e2eEnvLoader  = "XLB_TEST_LOADER"   // "1": run the loader instead of the tests
	e2eEnvPinPath = "XLB_TEST_PIN"      // Options.PinPath
	e2eEnvNetns   = "XLB_TEST_GW_NETNS" // the gateway namespace to attach in
)

// e2eFamily is one address family of the lab: every address, the VIP, and the ids of its two
// services (TCP e2eVIPTCPPort -> e2eBackendTCPPort, UDP e2eVIPUDPPort -> e2eBackendUDPPort).
type e2eFamily struct {
	name                   string
	client, gwClient       netip.Addr // the client link
	gwBackend, backend     netip.Addr // the backend link
	vip                    netip.Addr // on no interface
	bits                   int        // prefix length of both links
	tcpVIP, udpVIP         datapath.VIPID
	tcpBackend, udpBackend datapath.BackendID
}

var e2eFamilies = []e2eFamily{{
	name:   "IPv4",
	client: netip.MustParseAddr("198.18.0.10"), gwClient: netip.MustParseAddr("198.18.0.1"),
	gwBackend: netip.MustParseAddr("198.18.1.1"), backend: netip.MustParseAddr("198.18.1.10"),
	vip: netip.MustParseAddr("198.18.100.1"), bits: 24,
	tcpVIP: 1, udpVIP: 2, tcpBackend: 1, udpBackend: 2,
}, {
	name:   "IPv6",
	client: netip.MustParseAddr("2001:db8::10"), gwClient: netip.MustParseAddr("2001:db8::1"),
	gwBackend: netip.MustParseAddr("2001:db8:1::1"), backend: netip.MustParseAddr("2001:db8:1::10"),
	vip: netip.MustParseAddr("2001:db8:100::1"), bits: 64,
	tcpVIP: 3, udpVIP: 4, tcpBackend: 3, udpBackend: 4,
}}

// ipFlag is the family's `ip` option.
func (f e2eFamily) ipFlag() string {
	if f.vip.Is4() {
		return "-4"
	}
	return "-6"
}

// e2eConfigure installs the lab's services in d: per family, a TCP and a UDP VIP, each with
// one backend filling its whole Maglev table, and the reverse NAT of that backend. Idempotent.
func e2eConfigure(d *Datapath) error {
	for _, f := range e2eFamilies {
		for _, s := range []struct {
			fe    datapath.Frontend
			id    datapath.VIPID
			bid   datapath.BackendID
			bport uint16
		}{
			{datapath.Frontend{Addr: f.vip, Port: e2eVIPTCPPort, Proto: datapath.TCP}, f.tcpVIP, f.tcpBackend, e2eBackendTCPPort},
			{datapath.Frontend{Addr: f.vip, Port: e2eVIPUDPPort, Proto: datapath.UDP}, f.udpVIP, f.udpBackend, e2eBackendUDPPort},
		} {
			if err := d.UpsertVIP(s.fe, datapath.VIPConfig{ID: s.id}); err != nil {
				return fmt.Errorf("configure lab: %w", err)
			}
			if err := d.UpsertBackend(s.bid, datapath.Backend{Addr: f.backend, Port: s.bport}); err != nil {
				return fmt.Errorf("configure lab: %w", err)
			}
			table := make([]datapath.BackendID, e2eMaglevM)
			for i := range table {
				table[i] = s.bid
			}
			if err := d.SetMaglevTable(s.id, table); err != nil {
				return fmt.Errorf("configure lab: %w", err)
			}
			ep := datapath.Endpoint{Addr: f.backend, Port: s.bport, Proto: s.fe.Proto}
			if err := d.SetReverse(ep, datapath.ReverseNAT{VIP: s.id}); err != nil {
				return fmt.Errorf("configure lab: %w", err)
			}
		}
	}
	return nil
}

// e2eAttach attaches d to both gateway interfaces, from inside the gateway namespace (Attach
// resolves names, and fills tx_ports, in the calling thread's namespace). Native mode only: the
// tests mean to prove the XDP_REDIRECT path, not a silent generic-mode fallback.
func e2eAttach(d *Datapath, gw *netlab.NS) error {
	return gw.Do(func() error {
		for ifname, role := range map[string]datapath.Role{e2eGWClientIf: datapath.RoleClient, e2eGWBackendIf: datapath.RoleCluster} {
			if err := d.Attach(ifname, datapath.AttachNative, role); err != nil {
				return err
			}
		}
		return nil
	})
}

// e2eLab is the three-namespace topology with the backend's servers running.
type e2eLab struct {
	client, gw, backend *netlab.NS
	pinPath             string // unique per lab, under /sys/fs/bpf
}

// newE2ELab builds the topology, removed when t ends: namespaces, links, addresses, routes (the
// gateway is on the path both ways), forwarding on the gateway, XDP_PASS on the gateway's peers,
// and the backend's servers. It loads no datapath.
func newE2ELab(t *testing.T) *e2eLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the end-to-end tests need root (BPF, netns, bpffs); run them with `make test` as root")
	}
	p := netlab.Prefix()
	l := &e2eLab{
		client:  netlab.New(t, p+"c"),
		gw:      netlab.New(t, p+"g"),
		backend: netlab.New(t, p+"b"),
		pinPath: filepath.Join("/sys/fs/bpf", p),
	}
	// No DAD on the links' link-local addresses either: while the gateway's is tentative, its
	// first neighbour solicitation is never sent and the first packet waits a second.
	for _, ns := range []*netlab.NS{l.client, l.gw, l.backend} {
		ns.Sysctl(t, "net.ipv6.conf.default.accept_dad", "0")
	}
	netlab.Veth(t, l.client, e2eClientIf, "02:00:5e:00:00:10", l.gw, e2eGWClientIf, "02:00:5e:00:00:01")
	netlab.Veth(t, l.gw, e2eGWBackendIf, "02:00:5e:00:01:01", l.backend, e2eBackendIf, "02:00:5e:00:01:10")
	for _, f := range e2eFamilies {
		opt := ""
		if f.vip.Is6() {
			opt = " nodad"
		}
		addr := func(ns *netlab.NS, a netip.Addr, dev string) {
			ns.MustIP(t, fmt.Sprintf("addr add %s dev %s%s", netip.PrefixFrom(a, f.bits), dev, opt))
		}
		addr(l.client, f.client, e2eClientIf)
		addr(l.gw, f.gwClient, e2eGWClientIf)
		addr(l.gw, f.gwBackend, e2eGWBackendIf)
		addr(l.backend, f.backend, e2eBackendIf)
		l.client.MustIP(t, fmt.Sprintf("%s route add default via %s", f.ipFlag(), f.gwClient))
		l.backend.MustIP(t, fmt.Sprintf("%s route add %s via %s", f.ipFlag(),
			netip.PrefixFrom(f.client, f.bits).Masked(), f.gwBackend))
	}
	l.gw.Forwarding(t)
	netlab.PrepareEnds(t, netlab.End{NS: l.client, Ifname: e2eClientIf}, netlab.End{NS: l.backend, Ifname: e2eBackendIf})
	l.startServers(t)
	return l
}

// startServers runs the backend's servers inside the backend namespace, on all addresses of
// both families: TCP on e2eBackendTCPPort answers each line with "<client address> <line>", UDP
// on e2eBackendUDPPort answers each datagram with "<client address> <payload>".
func (l *e2eLab) startServers(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := l.backend.Do(func() (err error) {
		if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", e2eBackendTCPPort)); err != nil {
			return err
		}
		if pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", e2eBackendUDPPort)); err != nil {
			ln.Close()
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("start servers in %s: %v", l.backend.Name, err)
	}
	var wg sync.WaitGroup
	conns := &e2eConnSet{m: map[net.Conn]bool{}}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !conns.add(c) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conns.remove(c)
				e2eServeLines(c)
			}()
		}
	}()
	go func() {
		defer wg.Done()
		e2eServeDatagrams(pc)
	}()
	t.Cleanup(func() {
		ln.Close()
		pc.Close()
		conns.closeAll()
		wg.Wait()
	})
}

// e2eConnSet tracks a server's open connections so that cleanup can close them.
type e2eConnSet struct {
	mu     sync.Mutex
	m      map[net.Conn]bool
	closed bool
}

func (s *e2eConnSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.m[c] = true
	return true
}

func (s *e2eConnSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
	c.Close()
}

func (s *e2eConnSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.m {
		c.Close()
	}
}

func e2eServeLines(c net.Conn) {
	peer := e2eAddrPort(c.RemoteAddr())
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if _, err := fmt.Fprintf(c, "%s %s\n", peer, sc.Text()); err != nil {
			return
		}
	}
}

func e2eServeDatagrams(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if _, err := pc.WriteTo(fmt.Appendf(nil, "%s %s", e2eAddrPort(from), buf[:n]), from); err != nil {
			return
		}
	}
}

// e2eAddrPort returns a TCP or UDP address as a netip.AddrPort, IPv4-mapped addresses unmapped.
func e2eAddrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// e2eConn is a TCP connection from the client namespace to a service of the backend's line
// server.
type e2eConn struct {
	net.Conn
	r *bufio.Reader
}

// dialTCP connects from the client namespace to dst.
func (l *e2eLab) dialTCP(dst netip.AddrPort) (*e2eConn, error) {
	var c net.Conn
	err := l.client.Do(func() (err error) {
		d := net.Dialer{Timeout: e2eIOTimeout}
		c, err = d.Dial("tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect to %s from %s: %w", dst, l.client.Name, err)
	}
	return &e2eConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// exchange sends msg and checks the answer: msg itself, and the backend saw the connection
// coming from our own address and port (the client's real address, not a translated one).
func (c *e2eConn) exchange(msg string) error {
	if err := c.SetDeadline(time.Now().Add(e2eIOTimeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return fmt.Errorf("send %q: %w", msg, err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the answer to %q: %w", msg, err)
	}
	peer, echo, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if echo != msg {
		return fmt.Errorf("answer to %q is %q", msg, line)
	}
	if want := e2eAddrPort(c.LocalAddr()); peer != want.String() {
		return fmt.Errorf("the backend saw the client as %s, want %s", peer, want)
	}
	return nil
}

// queryUDP sends msg from a new socket in the client namespace to dst until an answer comes
// (datagrams may be lost while neighbours resolve), all within e2eIOTimeout. It returns the
// answer, its source, and the socket's port.
func (l *e2eLab) queryUDP(dst netip.AddrPort, msg string) (answer string, from netip.AddrPort, port uint16, err error) {
	network := "udp4"
	if dst.Addr().Is6() {
		network = "udp6"
	}
	var c *net.UDPConn
	if err := l.client.Do(func() (err error) {
		c, err = net.ListenUDP(network, nil)
		return err
	}); err != nil {
		return "", from, 0, fmt.Errorf("open a UDP socket in %s: %w", l.client.Name, err)
	}
	defer c.Close()
	port = e2eAddrPort(c.LocalAddr()).Port()
	deadline := time.Now().Add(e2eIOTimeout)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		if _, err := c.WriteToUDPAddrPort([]byte(msg), dst); err != nil {
			return "", from, port, fmt.Errorf("send to %s: %w", dst, err)
		}
		wait := time.Now().Add(500 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return "", from, port, fmt.Errorf("read the answer from %s: %w", dst, err)
		}
		return string(buf[:n]), netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), port, nil
	}
	return "", from, port, fmt.Errorf("no answer from %s within %v", dst, e2eIOTimeout)
}

// e2eCheckFlow checks that conntrack holds the forward entry src -> dst/proto, on backend want.
func e2eCheckFlow(d *Datapath, src, dst netip.AddrPort, proto datapath.Protocol, want datapath.BackendID) error {
	flows, err := d.Flows()
	if err != nil {
		return err
	}
	for _, f := range flows {
		if f.Reverse || f.Src != src || f.Dst != dst || f.Proto != proto {
			continue
		}
		if f.Backend != want {
			return fmt.Errorf("conntrack has %s -> %s/%s on backend %d, want %d", src, dst, proto,
				f.Backend, want)
		}
		return nil
	}
	return fmt.Errorf("conntrack has no entry %s -> %s/%s (among %d)", src, dst, proto, len(flows))
}

// e2eLogReasons logs the non-zero verdict counters, to explain a failure.
func e2eLogReasons(t *testing.T, d *Datapath) {
	t.Helper()
	rs, err := d.ReasonCounts()
	if err != nil {
		t.Logf("read counters: %v", err)
		return
	}
	var b strings.Builder
	for r := range Reason(numReasons) {
		if rs[r] > 0 {
			fmt.Fprintf(&b, " %s=%d", r, rs[r])
		}
	}
	t.Logf("datapath counters:%s", b.String())
}

// removeDatapath removes d (links detached, pins gone) from inside the gateway namespace, where
// the link names mean the gateway's interfaces, and checks that nothing is left behind.
func (l *e2eLab) removeDatapath(t *testing.T, d *Datapath) {
	t.Helper()
	ran := false
	err := l.gw.Do(func() error {
		ran = true
		return d.Remove()
	})
	if !ran { // the namespace is gone, and with it the interfaces: remove the pins anyway
		err = errors.Join(err, d.Remove())
	}
	if err != nil {
		t.Errorf("remove datapath: %v", err)
	}
	if _, err := os.Stat(l.pinPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin path %s still there after Remove (stat: %v); removing it", l.pinPath, err)
		_ = os.RemoveAll(l.pinPath)
	}
}

// removePinned loads, in this process, the datapath pinned under the lab's pin path (as a
// restarted loader would) and removes it.
func (l *e2eLab) removePinned(t *testing.T) {
	t.Helper()
	d, err := Load(Options{PinPath: l.pinPath, Settings: datapath.Settings{ConntrackSize: e2eConntrackSize}})
	if err != nil {
		t.Errorf("load the pinned datapath to remove it: %v; removing %s", err, l.pinPath)
		_ = os.RemoveAll(l.pinPath)
		return
	}
	l.removeDatapath(t, d)
}

// xdpProgID returns the id of the XDP program attached to ifname in ns, 0 if none.
func xdpProgID(ns *netlab.NS, ifname string) (uint32, error) {
	out, err := exec.Command("ip", "-j", "-n", ns.Name, "link", "show", "dev", ifname).Output()
	if err != nil {
		return 0, fmt.Errorf("ip link show %s in %s: %w", ifname, ns.Name, err)
	}
	var links []struct {
		XDP *struct {
			Prog struct {
				ID uint32 `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("parse ip -j link show %s in %s: %v: %s", ifname, ns.Name, err, out)
	}
	if links[0].XDP == nil {
		return 0, nil
	}
	if links[0].XDP.Prog.ID == 0 {
		return 0, fmt.Errorf("%s in %s: XDP without a program id: %s", ifname, ns.Name, out)
	}
	return links[0].XDP.Prog.ID, nil
}

// gatewayProgs returns the ids of the XDP programs on the gateway's two interfaces.
func (l *e2eLab) gatewayProgs(t *testing.T) [2]uint32 {
	t.Helper()
	var ids [2]uint32
	for i, ifname := range []string{e2eGWClientIf, e2eGWBackendIf} {
		id, err := xdpProgID(l.gw, ifname)
		if err != nil {
			t.Error(err)
		}
		ids[i] = id
	}
	return ids
}

// TestE2EForwarding proves the datapath balances real traffic, for IPv4 and IPv6, TCP and UDP:
// a client reaches a VIP that no interface holds only through the XDP program on the gateway;
// the backend sees the client's real address (DNAT, no SNAT); the replies, routed back through
// the gateway, come from the VIP (reverse NAT: the TCP handshake completes, the UDP answer's
// source is VIP:port); conntrack remembers each flow on its backend; and packets take the XDP
// redirect path between the two veths (counters nat_forward, nat_reverse, fwd_redirect).
func TestE2EForwarding(t *testing.T) {
	l := newE2ELab(t)
	d, err := Load(Options{PinPath: l.pinPath, Settings: datapath.Settings{ConntrackSize: e2eConntrackSize}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.removeDatapath(t, d)
		if ids := l.gatewayProgs(t); ids != [2]uint32{} {
			t.Errorf("XDP programs %v still attached to the gateway after Remove", ids)
		}
	})
	if err := e2eConfigure(d); err != nil {
		t.Fatal(err)
	}
	if err := e2eAttach(d, l.gw); err != nil {
		t.Fatal(err)
	}

	for _, f := range e2eFamilies {
		t.Run(f.name, func(t *testing.T) {
			before, err := d.ReasonCounts()
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if t.Failed() {
					e2eLogReasons(t, d)
				}
			}()

			vip := netip.AddrPortFrom(f.vip, e2eVIPTCPPort)
			c, err := l.dialTCP(vip)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := e2eAddrPort(c.RemoteAddr()); got != vip {
				t.Errorf("connection's remote address is %s, want %s", got, vip)
			}
			for i := range 3 {
				if err := c.exchange(fmt.Sprintf("hello %s %d", f.name, i)); err != nil {
					t.Fatalf("TCP to %s: %v", vip, err)
				}
			}
			if err := e2eCheckFlow(d, e2eAddrPort(c.LocalAddr()), vip, datapath.TCP, f.tcpBackend); err != nil {
				t.Error(err)
			}

			uvip := netip.AddrPortFrom(f.vip, e2eVIPUDPPort)
			answer, from, port, err := l.queryUDP(uvip, "query "+f.name)
			if err != nil {
				t.Fatalf("UDP: %v", err)
			}
			if from != uvip {
				t.Errorf("UDP answer came from %s, want %s", from, uvip)
			}
			client := netip.AddrPortFrom(f.client, port)
			if want := fmt.Sprintf("%s query %s", client, f.name); answer != want {
				t.Errorf("UDP answer is %q, want %q", answer, want)
			}
			// One datagram: the flow is in the handshake table, not yet in conntrack.
			if e, ok := handshakes(t, d)[client]; !ok || e.Key.Proto != uint8(datapath.UDP) || datapath.BackendID(e.BackendId) != f.udpBackend {
				t.Errorf("the handshake table's first datagram of %s -> %s/UDP: %+v (found %v), want backend %d", client, uvip, e, ok, f.udpBackend)
			}
			if err := e2eCheckFlow(d, client, uvip, datapath.UDP, f.udpBackend); err == nil {
				t.Error("one datagram made a conntrack entry")
			}

			after, err := d.ReasonCounts()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []Reason{ReasonNATForward, ReasonNATReverse, ReasonFwdRedirect} {
				if after[r] <= before[r] {
					t.Errorf("counter %s did not grow: %d -> %d", r, before[r], after[r])
				}
			}
		})
	}
}

// e2eOutput collects a child's output; ready (if not nil) is closed once a line "READY" came.
type e2eOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
}

func (w *e2eOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.ready != nil && bytes.Contains(w.buf.Bytes(), []byte("READY\n")) {
		close(w.ready)
		w.ready = nil
	}
	return len(p), nil
}

func (w *e2eOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// e2eLoader is a loader child process (runE2ELoader).
type e2eLoader struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the child exits when it closes
	stderr *e2eOutput
	exited chan struct{} // closed once Wait returned
	once   sync.Once
}

// startE2ELoader starts a loader child for the lab and waits until it is ready (configured and
// attached). The child is killed when t ends, if it is still running.
func startE2ELoader(t *testing.T, l *e2eLab) *e2eLoader {
	t.Helper()
	ready := make(chan struct{})
	p := &e2eLoader{stderr: &e2eOutput{}, exited: make(chan struct{})}
	// Not `ip netns exec`: it remounts /sys and so hides the pins. The child enters the gateway
	// namespace itself, and only to attach.
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), e2eEnvLoader+"=1", e2eEnvPinPath+"="+l.pinPath,
		e2eEnvNetns+"="+l.gw.Name)
	p.cmd.Stdout = &e2eOutput{ready: ready}
	p.cmd.Stderr = p.stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatalf("loader stdin: %v", err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start loader: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(t) })
	select {
	case <-ready:
		return p
	case <-p.exited:
		t.Fatalf("loader %d exited before it was ready (%v): %s", p.cmd.Process.Pid,
			p.cmd.ProcessState, p.stderr)
	case <-time.After(e2eReadyTimeout):
		t.Fatalf("loader %d not ready within %v: %s", p.cmd.Process.Pid, e2eReadyTimeout, p.stderr)
	}
	return nil
}

// kill SIGKILLs the loader (no chance to clean up, as in a crash) and waits for it to be gone.
func (p *e2eLoader) kill(t *testing.T) {
	t.Helper()
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(e2eIOTimeout):
			t.Errorf("loader %d still running %v after SIGKILL", p.cmd.Process.Pid, e2eIOTimeout)
		}
		p.stdin.Close()
		if s := p.stderr.String(); s != "" {
			t.Logf("loader %d stderr: %s", p.cmd.Process.Pid, s)
		}
	})
}

// runE2ELoader is the loader child's main: see e2eLoaderMain.
func runE2ELoader() int {
	if err := e2eLoaderMain(); err != nil {
		fmt.Fprintln(os.Stderr, "loader:", err)
		return 1
	}
	return 0
}

// e2eLoaderMain loads the datapath with the pin path of e2eEnvPinPath (adopting pinned maps and
// links), configures the lab's services, attaches in the namespace named by e2eEnvNetns, says
// READY, and then holds on until killed, or until stdin closes (the test process is gone).
// Exiting leaves everything pinned, as a daemon's exit does.
func e2eLoaderMain() error {
	pin, nsName := os.Getenv(e2eEnvPinPath), os.Getenv(e2eEnvNetns)
	if pin == "" || nsName == "" {
		return fmt.Errorf("%s and %s must be set", e2eEnvPinPath, e2eEnvNetns)
	}
	d, err := Load(Options{PinPath: pin, Settings: datapath.Settings{ConntrackSize: e2eConntrackSize}})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := e2eConfigure(d); err != nil {
		return err
	}
	gw := netlab.NS{Name: nsName}
	if err := e2eAttach(d, &gw); err != nil {
		return fmt.Errorf("attach in %s: %w", nsName, err)
	}
	if _, err := fmt.Println("READY"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// TestE2ELoaderRestart proves that forwarding survives the loader process: a TCP connection
// through the VIP keeps working after its loader is SIGKILLed (links and maps are pinned, the
// program stays attached), and after a new loader adopts the pinned maps and replaces the
// program on the pinned links (a new program id, no new link); the flow's conntrack entry lives
// through both restarts. Finally, a Datapath loaded from the pins removes everything: no XDP
// left on the gateway, no pins.
func TestE2ELoaderRestart(t *testing.T) {
	l := newE2ELab(t)
	removed := false
	t.Cleanup(func() { // after the loaders are killed (cleanups run last-registered first)
		if !removed {
			l.removePinned(t)
		}
	})

	f := e2eFamilies[0]
	vip := netip.AddrPortFrom(f.vip, e2eVIPTCPPort)
	first := startE2ELoader(t, l)
	progs1 := l.gatewayProgs(t)
	c, err := l.dialTCP(vip)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	step := func(msg string) {
		t.Helper()
		if err := c.exchange(msg); err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
	}
	// A new connection takes the full path (xlb_full, by tail call), and a ping to the VIP the
	// ICMP program after it: both tail calls must outlive the loader that filled the table.
	newFlows := func(msg string) {
		t.Helper()
		c2, err := l.dialTCP(vip)
		if err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		defer c2.Close()
		if err := c2.exchange(msg); err != nil {
			t.Fatalf("%s: new connection: %v", msg, err)
		}
		if out, err := l.client.Cmd("ping", "-c", "1", "-W", "2", f.vip.String()).CombinedOutput(); err != nil {
			t.Errorf("%s: ping %s: %v\n%s", msg, f.vip, err, out)
		}
	}
	// Each generation's tail-call table is pinned while a link runs its program, and only then.
	progsPins := func(want uint32) {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(l.pinPath, "progs"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{strconv.FormatUint(uint64(want), 10)}) {
			t.Errorf("pinned tail-call tables %v, want only that of program %d", names, want)
		}
	}
	step("with the first loader")
	progsPins(progs1[0])
	first.kill(t)
	if got := l.gatewayProgs(t); got != progs1 {
		t.Errorf("XDP programs on the gateway changed from %v to %v when the loader died", progs1, got)
	}
	step("with no loader")
	newFlows("with no loader")
	second := startE2ELoader(t, l)
	progs2 := l.gatewayProgs(t)
	for i := range progs2 {
		if progs2[i] == 0 || progs2[i] == progs1[i] {
			t.Errorf("the second loader did not replace the XDP programs on the gateway: %v, then %v",
				progs1, progs2)
			break
		}
	}
	progsPins(progs2[0])
	step("with the second loader")
	second.kill(t)
	step("with no loader again")
	newFlows("with no loader again")

	d, err := Load(Options{PinPath: l.pinPath, Settings: datapath.Settings{ConntrackSize: e2eConntrackSize}})
	if err != nil {
		t.Fatalf("load the pinned datapath: %v", err)
	}
	removed = true
	if err := e2eCheckFlow(d, e2eAddrPort(c.LocalAddr()), vip, datapath.TCP, f.tcpBackend); err != nil {
		t.Error(err)
	}
	l.removeDatapath(t, d)
	if ids := l.gatewayProgs(t); ids != [2]uint32{} {
		t.Errorf("XDP programs %v still attached to the gateway after Remove", ids)
	}
}
