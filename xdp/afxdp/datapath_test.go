// SPDX-License-Identifier: Apache-2.0
package afxdp

// The AF_XDP datapath end to end: a gateway namespace between a client and a backend namespace,
// real TCP and UDP servers and clients, through real veth links.
//
//	client (c0) <-veth-> (gc) gateway (gb) <-veth-> (b0) backends 198.18.1.10, .11
//
// The VIP is configured on no interface: only the datapath makes it reachable.

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

const ioTimeout = 5 * time.Second

var (
	vip      = netip.MustParseAddr("198.18.100.1")
	vip6     = netip.MustParseAddr("2001:db8:100::1")
	client   = netip.MustParseAddr("198.18.0.10")
	client6  = netip.MustParseAddr("2001:db8::10")
	backends = []netip.Addr{netip.MustParseAddr("198.18.1.10"), netip.MustParseAddr("198.18.1.11")}
	be6      = netip.MustParseAddr("2001:db8:1::10")
)

// site is the three namespaces with the datapath attached on the gateway.
type site struct {
	cl, gw, be *netlab.NS
	dp         *Datapath
}

func newSite(t *testing.T) *site { return newSiteQueues(t, 1, 1) }

// newSiteQueues is newSite with veths of the given numbers of queues: the client link's and
// the backend link's.
func newSiteQueues(t *testing.T, clientQueues, backendQueues int) *site {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the AF_XDP datapath tests need root (BPF, netns); run them with `make test` as root")
	}
	p := netlab.Prefix()
	s := &site{cl: netlab.New(t, p+"c"), gw: netlab.New(t, p+"g"), be: netlab.New(t, p+"b")}
	// An IPv6 neighbour solicitation the datapath starts (it holds no packet to take the source
	// address from) goes out from the link-local address: no DAD, so that it exists at once.
	s.gw.Sysctl(t, "net.ipv6.conf.default.accept_dad", "0")
	veth := func(queues int, n *netlab.NS, an, amac string, m *netlab.NS, bn, bmac string) {
		if queues == 1 {
			netlab.Veth(t, n, an, amac, m, bn, bmac)
			return
		}
		q := fmt.Sprintf("numtxqueues %d numrxqueues %d", queues, queues)
		n.MustIP(t, fmt.Sprintf("link add %s address %s %s type veth peer name %s address %s %s netns %s",
			an, amac, q, bn, bmac, q, m.Name))
		n.MustIP(t, "link set "+an+" up")
		m.MustIP(t, "link set "+bn+" up")
	}
	veth(clientQueues, s.cl, "c0", "02:00:00:00:0c:01", s.gw, "gc", "02:00:00:00:01:01")
	veth(backendQueues, s.gw, "gb", "02:00:00:00:01:02", s.be, "b0", "02:00:00:00:0b:01")
	for _, c := range []struct {
		ns   *netlab.NS
		args string
	}{
		{s.cl, "addr add 198.18.0.10/24 dev c0"},
		{s.cl, "addr add 2001:db8::10/64 dev c0 nodad"},
		{s.cl, "route add default via 198.18.0.1"},
		{s.cl, "-6 route add default via 2001:db8::1"},
		{s.gw, "addr add 198.18.0.1/24 dev gc"},
		{s.gw, "addr add 2001:db8::1/64 dev gc nodad"},
		{s.gw, "addr add 198.18.1.1/24 dev gb"},
		{s.gw, "addr add 2001:db8:1::1/64 dev gb nodad"},
		{s.be, "addr add 198.18.1.10/24 dev b0"},
		{s.be, "addr add 198.18.1.11/24 dev b0"},
		{s.be, "addr add 2001:db8:1::10/64 dev b0 nodad"},
		{s.be, "route add default via 198.18.1.1"},
		{s.be, "-6 route add default via 2001:db8:1::1"},
	} {
		c.ns.MustIP(t, c.args)
	}
	s.gw.Forwarding(t)
	netlab.PrepareEnds(t, netlab.End{NS: s.cl, Ifname: "c0"}, netlab.End{NS: s.be, Ifname: "b0"})

	dp, err := Load(Config{Engine: datapath.Settings{Seed: 7}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	err = s.gw.Do(func() error {
		for ifname, role := range sideRoles {
			if err := dp.Attach(ifname, datapath.AttachAuto, role); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.dp = dp
	return s
}

// serveHTTP runs an HTTP server on addr:8080 in the backend namespace answering
// "<local address> <client address>".
func (s *site) serveHTTP(t *testing.T, addr netip.Addr) {
	t.Helper()
	var l net.Listener
	err := s.be.Do(func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(addr, 8080).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: ioTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", addr, r.RemoteAddr)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// serveUDP runs a UDP echo server on addr:5353 in the backend namespace that prefixes its
// answers with the client address it saw.
func (s *site) serveUDP(t *testing.T, addr netip.Addr) {
	t.Helper()
	var c net.PacketConn
	err := s.be.Do(func() (err error) {
		c, err = net.ListenPacket("udp", netip.AddrPortFrom(addr, 5353).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo([]byte(from.String()+" "+string(buf[:n])), from)
		}
	}()
}

// configure gives the VIPs their backends: 198.18.100.1:80/TCP and :53/UDP over both IPv4
// backends, [2001:db8:100::1]:80/TCP to the IPv6 one.
func (s *site) configure(t *testing.T) {
	t.Helper()
	type svc struct {
		fe       datapath.Frontend
		port     uint16
		backends []netip.Addr
	}
	svcs := []svc{
		{datapath.Frontend{Addr: vip, Port: 80, Proto: datapath.TCP}, 8080, backends},
		{datapath.Frontend{Addr: vip, Port: 53, Proto: datapath.UDP}, 5353, backends},
		{datapath.Frontend{Addr: vip6, Port: 80, Proto: datapath.TCP}, 8080, []netip.Addr{be6}},
	}
	bid := datapath.BackendID(0)
	for i, sv := range svcs {
		id := datapath.VIPID(i + 1)
		if err := s.dp.UpsertVIP(sv.fe, datapath.VIPConfig{ID: id}); err != nil {
			t.Fatal(err)
		}
		table := make([]datapath.BackendID, 251)
		for j, a := range sv.backends {
			bid++
			if err := s.dp.UpsertBackend(bid, datapath.Backend{Addr: a, Port: sv.port}); err != nil {
				t.Fatal(err)
			}
			for k := j; k < len(table); k += len(sv.backends) {
				table[k] = bid
			}
			ep := datapath.Endpoint{Addr: a, Port: sv.port, Proto: sv.fe.Proto}
			if err := s.dp.SetReverse(ep, datapath.ReverseNAT{VIP: id}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.dp.SetMaglevTable(id, table); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAFXDPForwarding(t *testing.T) {
	s := newSite(t)
	for _, a := range backends {
		s.serveHTTP(t, a)
		s.serveUDP(t, a)
	}
	s.serveHTTP(t, be6)
	s.configure(t)

	// TCP over IPv4: every request answered, by both backends, each seeing the client's own
	// address.
	seen := map[string]int{}
	for i := range 20 {
		code, body, err := s.cl.HTTPGet(netip.AddrPortFrom(vip, 80).String(), "/", ioTimeout)
		if err != nil || code != http.StatusOK {
			t.Fatalf("request %d through the VIP: %d %q %v", i, code, body, err)
		}
		f := strings.Fields(body)
		if len(f) != 2 || !strings.HasPrefix(f[1], client.String()+":") {
			t.Fatalf("request %d: backend answered %q, want its address and the client's %s", i, body, client)
		}
		seen[f[0]]++
	}
	if len(seen) != 2 {
		t.Errorf("20 connections reached backends %v, want both", seen)
	}

	// TCP over IPv6.
	code, body, err := s.cl.HTTPGet(netip.AddrPortFrom(vip6, 80).String(), "/", ioTimeout)
	if err != nil || code != http.StatusOK || !strings.Contains(body, client6.String()) {
		t.Fatalf("IPv6 request through the VIP: %d %q %v", code, body, err)
	}

	// UDP: the answer comes from the VIP's address and port, and names the client.
	var c net.Conn
	if err := s.cl.Do(func() (err error) {
		c, err = net.Dial("udp", netip.AddrPortFrom(vip, 53).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("UDP answer through the VIP: %v", err)
	}
	if got := string(buf[:n]); !strings.HasPrefix(got, client.String()+":") || !strings.HasSuffix(got, " ping") {
		t.Errorf("UDP answer %q, want the client's address and the payload", got)
	}

	rs := s.dp.ReasonCounts()
	if rs[forward.ReasonNATForward] == 0 || rs[forward.ReasonNATReverse] == 0 || rs[forward.ReasonFwdRedirect] == 0 {
		t.Errorf("counters %v: want forwarded and reverse-translated frames", rs)
	}
	for r, n := range rs {
		if strings.HasPrefix(r.String(), "drop_") {
			t.Errorf("%s = %d, want no drops", r, n)
		}
	}
	st, err := s.dp.Steered()
	if err != nil || st.ToSocket < rs[forward.ReasonNATForward]+rs[forward.ReasonNATReverse] || st.NoSocket != 0 {
		t.Errorf("steered %+v (%v), want at least the %d translated, none without socket", st, err,
			rs[forward.ReasonNATForward]+rs[forward.ReasonNATReverse])
	}
	// A TCP flow counts as new at its SYN: 20 connections.
	if tr, _ := s.dp.VIPTraffic(1); tr.NewFlows < 20 || tr.Packets < 20*4 {
		t.Errorf("VIP 1 traffic %+v, want 20 new flows of at least 4 packets", tr)
	}
	if n, _ := s.dp.FlowCount(); n == 0 {
		t.Errorf("no conntrack entries after 20 connections")
	}

	if s.dp.res.Load().routes.Load() == nil {
		t.Errorf("the resolver has no copy of the routing tables: every new destination asks the kernel")
	}

	// Detached and attached again: the sockets and their queues were released, and traffic
	// flows again.
	err = s.gw.Do(func() error {
		for _, ifname := range []string{"gc", "gb"} {
			if err := s.dp.Detach(ifname); err != nil {
				return err
			}
		}
		if got, _ := s.dp.Interfaces(); len(got) != 0 {
			return fmt.Errorf("still attached to %v after detaching both", got)
		}
		for ifname, role := range sideRoles {
			if err := s.dp.Attach(ifname, datapath.AttachAuto, role); err != nil {
				return fmt.Errorf("attach again: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := s.cl.HTTPGet(netip.AddrPortFrom(vip, 80).String(), "/", ioTimeout); err != nil || code != http.StatusOK {
		t.Fatalf("request after attaching again: %d %q %v", code, body, err)
	}
}

// TestAFXDPMultiQueue: with two receive queues on the client link and one on the backend link,
// the datapath opens a socket per queue and a worker per queue index; flows spread over both
// client-side queues (the client's kernel picks a TX queue per flow, which is the gateway's RX
// queue), worker 1 sends to the backends through the backend link's only socket (shared with
// worker 0), and every request is answered. Then, under traffic, the client link is detached
// and attached again: afterwards every request is answered again.
func TestAFXDPMultiQueue(t *testing.T) {
	s := newSiteQueues(t, 2, 1)
	for _, a := range backends {
		s.serveHTTP(t, a)
	}
	s.configure(t)
	get := func() error {
		code, body, err := s.cl.HTTPGet(netip.AddrPortFrom(vip, 80).String(), "/", ioTimeout)
		if err == nil && (code != http.StatusOK || !strings.Contains(body, client.String()+":")) {
			err = fmt.Errorf("answer %d %q", code, body)
		}
		return err
	}
	for i := range 60 {
		if err := get(); err != nil {
			t.Fatalf("request %d through the VIP: %v", i, err)
		}
	}
	perQueue := s.dp.queueFrames()
	t.Logf("frames received per queue (both interfaces): %v", perQueue)
	if len(perQueue) != 2 || perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("frames per receive queue %v: want both queues' sockets (and workers) used", perQueue)
	}
	s.dp.mu.Lock()
	workers := len(s.dp.workers)
	s.dp.mu.Unlock()
	if workers != 2 {
		t.Errorf("%d workers for two queues, want 2", workers)
	}

	// Detach and attach under load: UDP datagrams to the VIP every 100 µs from one socket
	// (bounded: the 3 rounds below, about half a second), frames in flight in every ring.
	for _, a := range backends {
		s.serveUDP(t, a)
	}
	var uc net.Conn
	if err := s.cl.Do(func() (err error) {
		uc, err = net.Dial("udp", netip.AddrPortFrom(vip, 53).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	stop := make(chan struct{})
	loadDone := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				loadDone <- n
				return
			case <-time.After(100 * time.Microsecond):
			}
			if _, err := uc.Write([]byte("load")); err == nil { // lost while detached: fine
				n++
			}
		}
	}()
	for range 3 {
		err := s.gw.Do(func() error {
			if err := s.dp.Detach("gc"); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
			return s.dp.Attach("gc", datapath.AttachAuto, datapath.RoleClient)
		})
		if err != nil {
			close(stop)
			<-loadDone
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	t.Logf("%d datagrams sent during 3 detach/attach rounds; engine verdicts %v", <-loadDone, s.dp.ReasonCounts())
	for i := range 20 {
		if err := get(); err != nil {
			t.Fatalf("request %d after attaching again: %v", i, err)
		}
	}
}

// sideRoles are the roles of the test gateway's interfaces: gc faces the client, gb the backend.
var sideRoles = map[string]datapath.Role{"gc": datapath.RoleClient, "gb": datapath.RoleCluster}
