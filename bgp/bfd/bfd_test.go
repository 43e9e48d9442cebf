// SPDX-License-Identifier: Apache-2.0
package bfd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/bgp"
)

func TestPacketRoundTrip(t *testing.T) {
	p := Packet{Diag: DiagForwardingReset, State: Up, Poll: true, CPI: true, DetectMult: 3, MyDisc: 7, YourDisc: 9,
		DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 50 * time.Millisecond}
	got, err := Parse(p.Marshal())
	if err != nil || got != p {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, p)
	}
	b := p.Marshal()
	if b[1]&flagCPI == 0 {
		t.Fatal("C bit not set on the wire")
	}
	for _, c := range []struct {
		name string
		edit func([]byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:23] }, ErrShort},
		{"version 2", func(b []byte) []byte { b[0] = 2<<5 | b[0]&31; return b }, ErrVersion},
		{"auth bit", func(b []byte) []byte { b[1] |= flagAuth; return b }, ErrAuth},
		{"length 25", func(b []byte) []byte { b[3] = 25; return b }, ErrLength},
		{"multipoint", func(b []byte) []byte { b[1] |= flagMultipoint; return b }, ErrMultipoint},
		{"mult 0", func(b []byte) []byte { b[2] = 0; return b }, ErrDetectMult},
		{"my disc 0", func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 0, 0, 0; return b }, ErrMyDisc},
	} {
		if _, err := Parse(c.edit(p.Marshal())); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSessionStateMachine(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewSession(netip.MustParseAddr("198.18.0.1"), netip.Addr{}, bgp.BFD{Enabled: true}, 5, now)
	s.SetForwarding(true, now)
	peer := Packet{State: Down, DetectMult: 3, MyDisc: 11, DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}
	if ch, err := s.Receive(peer, now); err != nil || !ch {
		t.Fatalf("Down from Down: changed %v err %v", ch, err)
	}
	if st, _, _ := s.State(); st != Init {
		t.Fatalf("state %v, want init", st)
	}
	peer.State, peer.YourDisc = Up, 5
	s.Receive(peer, now)
	if st, _, _ := s.State(); st != Up {
		t.Fatalf("state %v, want up", st)
	}
	// Another session's discriminator, and a zero one claiming Up: dropped.
	bad := peer
	bad.YourDisc = 6
	if _, err := s.Receive(bad, now); !errors.Is(err, ErrYourDisc) {
		t.Fatalf("wrong discriminator: %v", err)
	}
	bad.YourDisc = 0
	if _, err := s.Receive(bad, now); !errors.Is(err, ErrYourDisc) {
		t.Fatalf("zero discriminator claiming up: %v", err)
	}
	// Detection: 3 × 300 ms.
	if s.Expire(now.Add(899 * time.Millisecond)) {
		t.Fatal("expired before the detection time")
	}
	if !s.Expire(now.Add(900 * time.Millisecond)) {
		t.Fatal("not expired at the detection time")
	}
	if st, d, _ := s.State(); st != Down || d != DiagDetectExpired {
		t.Fatalf("after expiry %v %v", st, d)
	}
	// Up again, then the forwarding plane fails: Down, said on the wire, held there.
	peer.State, peer.YourDisc = Init, 5
	s.Receive(peer, now)
	if st, _, _ := s.State(); st != Up {
		t.Fatalf("state %v, want up", st)
	}
	if !s.SetForwarding(false, now) {
		t.Fatal("forwarding lost: no change")
	}
	if p := s.Next(); p.State != Down || p.Diag != DiagForwardingReset || !p.CPI {
		t.Fatalf("packet after forwarding lost: %+v", p)
	}
	peer.State = Down
	s.Receive(peer, now)
	if st, _, _ := s.State(); st != Down {
		t.Fatalf("held session left Down: %v", st)
	}
	s.SetForwarding(true, now)
	s.Receive(peer, now)
	if st, _, _ := s.State(); st != Init {
		t.Fatalf("forwarding back: %v, want init", st)
	}
	// AdminDown from the peer: Down, neighbor signaled.
	peer.State = Up
	s.Receive(peer, now)
	peer.State = AdminDown
	s.Receive(peer, now)
	if st, d, _ := s.State(); st != Down || d != DiagNeighborDown {
		t.Fatalf("after AdminDown %v %v", st, d)
	}
	if ups, downs := s.Transitions(); ups != 3 || downs != 3 {
		t.Fatalf("transitions %d up %d down, want 3 and 3", ups, downs)
	}
}

// freePort returns a UDP port free on loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// pair runs two servers on loopback, a as 127.0.0.1 and b as 127.0.0.2, peered with each
// other (each listens on its own port and sends to the other's).
func pair(t *testing.T, checkA Forwarding) (a, b *Server) {
	t.Helper()
	pa, pb := freePort(t), freePort(t)
	cfg := bgp.BFD{Enabled: true, TransmitInterval: 50 * time.Millisecond, ReceiveInterval: 50 * time.Millisecond, Multiplier: 3}
	a = NewServer(Options{Port: pa, PeerPort: pb, Check: checkA, CheckInterval: 20 * time.Millisecond})
	b = NewServer(Options{Port: pb, PeerPort: pa})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	for _, s := range []*Server{a, b} {
		go func() { _ = s.Run(ctx); done <- struct{}{} }()
	}
	lo1, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	if err := a.SetPeers(ctx, []Peer{{Address: lo2, Local: lo1, BFD: cfg}}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPeers(ctx, []Peer{{Address: lo1, Local: lo2, BFD: cfg}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, "up", 5*time.Second)
	waitState(t, b, "up", 5*time.Second)
	return a, b
}

func waitState(t *testing.T, s *Server, state string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st, ch := s.Status()
		if len(st) == 1 && st[0].State == state {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-time.After(time.Until(start.Add(within))):
			t.Fatalf("session not %s within %v: %+v", state, within, st)
		}
	}
}

// TestServerForwardingDown: the sessions come up with the C bit; when a's health check fails
// b sees Down at once ("forwarding plane reset"), well within the detection time; back up
// when it passes again.
func TestServerForwardingDown(t *testing.T) {
	var broken atomic.Bool
	a, b := pair(t, func() error {
		if broken.Load() {
			return errors.New("XDP program detached")
		}
		return nil
	})
	if st, _ := b.Status(); !st[0].RemoteCPI {
		t.Fatalf("b does not see the C bit: %+v", st[0])
	}
	broken.Store(true)
	took := waitState(t, b, "down", 2*time.Second)
	st, _ := b.Status()
	t.Logf("a's forwarding lost: b down after %v (%s)", took.Round(time.Millisecond), st[0].RemoteDiag)
	if st[0].RemoteDiag != DiagForwardingReset.String() {
		t.Errorf("b's view of a's diagnostic: %q", st[0].RemoteDiag)
	}
	if sa, _ := a.Status(); sa[0].Forwarding || sa[0].NotForwarding == "" {
		t.Errorf("a's status does not say why it cannot forward: %+v", sa[0])
	}
	broken.Store(false)
	waitState(t, b, "up", 5*time.Second)
}

// TestServerSpoofed: packets that could come from off-link are dropped and counted: a
// perfect AdminDown for the session from the peer's own address but with TTL 254 (one hop
// away), the same with TTL 255 from an address that is no peer, and one from the peer with
// another discriminator. The session stays up through them; the same AdminDown with TTL 255
// from the peer (only an on-link peer can send it) takes it down, so the checks are what
// stopped the others.
func TestServerSpoofed(t *testing.T) {
	a, _ := pair(t, nil)
	st, _ := a.Status()
	disc := a.sessions[st[0].Peer].s.Discriminator()
	rp, _ := a.sessions[st[0].Peer].s.Remote()
	adminDown := Packet{State: AdminDown, Diag: DiagAdminDown, DetectMult: 3, MyDisc: rp.MyDisc, YourDisc: disc,
		DesiredMinTx: time.Second, RequiredMinRx: time.Second}
	send := func(from string, ttl int, p Packet) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, ttl) })
			return errors.Join(err, serr)
		}}
		c, err := d.Dial("udp4", net.JoinHostPort("127.0.0.1", itoa(a.opts.Port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(p.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	wrong := adminDown
	wrong.YourDisc = disc + 1
	for _, c := range []struct {
		from   string
		ttl    int
		p      Packet
		reason string
	}{
		{"127.0.0.2", 254, adminDown, DropTTL},
		{"127.0.0.3", 255, adminDown, DropPeer},
		{"127.0.0.2", 255, wrong, DropDisc},
	} {
		before := a.Drops()[c.reason]
		send(c.from, c.ttl, c.p)
		deadline := time.Now().Add(2 * time.Second)
		for a.Drops()[c.reason] == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if a.Drops()[c.reason] == before {
			t.Errorf("AdminDown from %s TTL %d: not dropped as %q (drops %v)", c.from, c.ttl, c.reason, a.Drops())
		}
		time.Sleep(100 * time.Millisecond)
		if st, _ := a.Status(); st[0].State != "up" || st[0].Downs != 0 {
			t.Fatalf("AdminDown from %s TTL %d moved the session: %+v", c.from, c.ttl, st[0])
		}
	}
	// The real thing takes the session down; the live peer then brings it straight back up
	// (Down, Init, Up within milliseconds), so the proof is the Down counted, not a state seen.
	send("127.0.0.2", 255, adminDown)
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, ch := a.Status()
		if st[0].Downs > 0 {
			break
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("AdminDown from the peer did not take the session down within 2s: %+v", st[0])
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestServerPeerGone: the peer's process stops; the session goes down after the detection
// time (3 × 50 ms).
func TestServerPeerGone(t *testing.T) {
	a, b := pair(t, nil)
	b.mu.Lock()
	for _, e := range b.sessions {
		e.stop() // b falls silent (no AdminDown)
	}
	b.mu.Unlock()
	gone := time.Now()
	waitState(t, a, "down", 2*time.Second)
	took := time.Since(gone)
	st, _ := a.Status()
	t.Logf("peer silent: down after %v (%s)", took.Round(time.Millisecond), st[0].Diag)
	if st[0].Diag != DiagDetectExpired.String() {
		t.Errorf("diag %q", st[0].Diag)
	}
}
