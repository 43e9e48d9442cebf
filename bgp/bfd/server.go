// SPDX-License-Identifier: Apache-2.0
package bfd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/bgp"
)

// Port is single-hop BFD's control port (RFC 5881 §4); the source port of what we send is
// in SourcePortMin..SourcePortMax.
const (
	Port          = 3784
	SourcePortMin = 49152
	SourcePortMax = 65535
	// requiredTTL is what a single-hop packet must arrive with (RFC 5881 §5).
	requiredTTL = 255
)

// Peer is one configured session: the neighbour, our address towards it (unset: the kernel
// picks it) and the timers.
type Peer struct {
	Address, Local netip.Addr
	BFD            bgp.BFD
}

// Forwarding judges whether the gateway can forward; nil error is yes, else the reason.
type Forwarding func() error

// Options configure a Server.
type Options struct {
	// Port to listen on: 0 is Port (tests use another).
	Port int
	// PeerPort is where packets are sent: 0 is Port.
	PeerPort int
	// Check is the forwarding plane's health check, run every CheckInterval (0: 100 ms);
	// nil: always healthy.
	Check         Forwarding
	CheckInterval time.Duration
	Log           *slog.Logger
}

// Status is a session as reported to the daemon and to operators.
type Status struct {
	Peer          netip.Addr `json:"peer"`
	Local         netip.Addr `json:"local,omitzero"`
	State         string     `json:"state"`
	Up            bool       `json:"up"`
	Diag          string     `json:"diag"`
	Since         time.Time  `json:"since"`
	Remote        string     `json:"remoteState"`
	RemoteDiag    string     `json:"remoteDiag"`
	RemoteCPI     bool       `json:"remoteControlPlaneIndependent"`
	Ups           uint64     `json:"ups"`
	Downs         uint64     `json:"downs"`
	Detection     string     `json:"detectionTime"`
	Forwarding    bool       `json:"forwarding"`
	NotForwarding string     `json:"notForwarding,omitempty"`
}

// Server runs the sessions of Peers on UDP sockets in the calling process's network
// namespace. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[netip.Addr]*entry
	drops    map[string]uint64
	fwdErr   error
	changed  chan struct{} // closed and replaced at every state change
	nextDisc uint32
}

type entry struct {
	s    *Session
	conn *net.UDPConn // the session's sending socket (source port 49152–65535, TTL 255)
	kick chan struct{}
	stop context.CancelFunc
}

// NewServer returns a server with no session.
func NewServer(opts Options) *Server {
	if opts.Port == 0 {
		opts.Port = Port
	}
	if opts.PeerPort == 0 {
		opts.PeerPort = Port
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 100 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Server{opts: opts, log: opts.Log.With("component", "bfd"), sessions: map[netip.Addr]*entry{},
		drops: map[string]uint64{}, changed: make(chan struct{}), nextDisc: rand.Uint32()}
}

// Run listens (IPv4 and IPv6) and runs the health check until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var conns []*net.UDPConn
	for _, fam := range []struct {
		net  string
		addr string
	}{{"udp4", "0.0.0.0"}, {"udp6", "::"}} {
		c, err := listen(ctx, fam.net, net.JoinHostPort(fam.addr, fmt.Sprint(s.opts.Port)))
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return fmt.Errorf("bfd: listen %s port %d: %w", fam.net, s.opts.Port, err)
		}
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); s.receive(c) }()
	}
	s.checkLoop(ctx)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	s.mu.Lock()
	for a, e := range s.sessions {
		e.stop()
		e.conn.Close()
		delete(s.sessions, a)
	}
	s.mu.Unlock()
	return nil
}

// listen opens a receiving socket that reports each packet's TTL / hop limit.
func listen(ctx context.Context, network, addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(network, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if network == "udp4" {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// receive reads packets until c is closed.
func (s *Server) receive(c *net.UDPConn) {
	buf := make([]byte, 128)
	oob := make([]byte, 128)
	for {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.handle(buf[:n], ttlOf(oob[:oobn]), from.Addr().Unmap(), time.Now())
	}
}

// ttlOf returns the TTL or hop limit of a received packet's control messages, -1 if absent.
func ttlOf(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL) ||
			(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT) {
			if len(m.Data) >= 4 {
				return int(int32(binary.NativeEndian.Uint32(m.Data)))
			}
			if len(m.Data) >= 1 {
				return int(m.Data[0])
			}
		}
	}
	return -1
}

// Drop reasons (Drops).
const (
	DropTTL       = "ttl not 255"
	DropPeer      = "not a configured peer"
	DropMalformed = "malformed"
	DropDisc      = "wrong discriminator"
)

// handle takes one received packet: its TTL, its source, then the session.
func (s *Server) handle(b []byte, ttl int, from netip.Addr, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ttl != requiredTTL {
		s.drop(DropTTL, from)
		return
	}
	e := s.sessions[from]
	if e == nil {
		s.drop(DropPeer, from)
		return
	}
	p, err := Parse(b)
	if err != nil {
		s.drop(DropMalformed, from)
		return
	}
	changed, err := e.s.Receive(p, now)
	if err != nil {
		s.drop(DropDisc, from)
		return
	}
	if changed {
		s.noteChange(e.s)
		kick(e)
	} else if p.Poll {
		kick(e)
	}
}

func kick(e *entry) {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// drop counts a dropped packet. Called with s.mu held.
func (s *Server) drop(reason string, from netip.Addr) {
	s.drops[reason]++
	if n := s.drops[reason]; n&(n-1) == 0 { // logged at 1, 2, 4, 8, … drops
		s.log.Warn("bfd packet dropped", "reason", reason, "from", from, "drops", n)
	}
}

// noteChange logs a state change and wakes the watchers. Called with s.mu held.
func (s *Server) noteChange(ss *Session) {
	st, d, _ := ss.State()
	rp, _ := ss.Remote()
	attrs := []any{"peer", ss.Peer, "state", st.String(), "diag", d.String(), "remoteState", rp.State.String()}
	if st == Up {
		s.log.Info("bfd session up", attrs...)
	} else {
		s.log.Warn("bfd session state changed", attrs...)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Drops returns the dropped packets by reason.
func (s *Server) Drops() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.drops))
	for k, v := range s.drops {
		out[k] = v
	}
	return out
}

// SetPeers makes peers the complete set of sessions: new ones start in Down, missing ones
// stop (AdminDown sent first), changed ones restart.
func (s *Server) SetPeers(ctx context.Context, peers []Peer) error {
	want := map[netip.Addr]Peer{}
	for _, p := range peers {
		if err := p.BFD.Validate(); err != nil {
			return fmt.Errorf("bfd peer %v: %w", p.Address, err)
		}
		want[p.Address.Unmap()] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, e := range s.sessions {
		if p, ok := want[a]; ok && p.Local == e.s.Local && p.BFD.WithDefaults() == e.s.cfg {
			delete(want, a)
			continue
		}
		e.s.set(AdminDown, DiagAdminDown, time.Now())
		_, _ = e.conn.Write(e.s.Next().Marshal())
		e.stop()
		e.conn.Close()
		delete(s.sessions, a)
		s.log.Info("bfd session removed", "peer", a)
	}
	var errs []error
	for _, a := range slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for a := range want {
			if !yield(a) {
				return
			}
		}
	}, netip.Addr.Compare) {
		p := want[a]
		conn, err := dialPeer(ctx, p.Local, netip.AddrPortFrom(a, uint16(s.opts.PeerPort)))
		if err != nil {
			errs = append(errs, fmt.Errorf("bfd peer %v: %w", a, err))
			continue
		}
		s.nextDisc++
		if s.nextDisc == 0 {
			s.nextDisc++
		}
		ss := NewSession(a, p.Local, p.BFD, s.nextDisc, time.Now())
		ss.SetForwarding(s.fwdErr == nil, time.Now())
		sctx, stop := context.WithCancel(context.Background())
		e := &entry{s: ss, conn: conn, kick: make(chan struct{}, 1), stop: stop}
		s.sessions[a] = e
		go s.transmit(sctx, e)
		s.log.Info("bfd session added", "peer", a, "local", p.Local, "discriminator", ss.Discriminator())
	}
	return errors.Join(errs...)
}

// dialPeer opens a session's sending socket: from local (if set) and a source port in
// 49152–65535 (RFC 5881 §4), with TTL / hop limit 255.
func dialPeer(ctx context.Context, local netip.Addr, to netip.AddrPort) (*net.UDPConn, error) {
	network := "udp4"
	if to.Addr().Is6() {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(network, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if network == "udp4" {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, requiredTTL)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, requiredTTL)
			}
		})
		return errors.Join(err, serr)
	}}
	d := net.Dialer{ControlContext: func(ctx context.Context, network, address string, rc syscall.RawConn) error {
		return lc.Control(network, address, rc)
	}}
	var last error
	start := SourcePortMin + rand.IntN(SourcePortMax-SourcePortMin+1)
	for i := 0; i < 64; i++ {
		port := SourcePortMin + (start-SourcePortMin+i*797)%(SourcePortMax-SourcePortMin+1)
		src := netip.AddrPortFrom(local, uint16(port))
		if !local.IsValid() {
			src = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port))
			if to.Addr().Is4() {
				src = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))
			}
		}
		d.LocalAddr = net.UDPAddrFromAddrPort(src)
		c, err := d.DialContext(ctx, network, to.String())
		if err == nil {
			return c.(*net.UDPConn), nil
		}
		last = err
	}
	return nil, fmt.Errorf("no free source port from %d: %w", SourcePortMin, last)
}

// transmit sends the session's packets, at its interval with 75–100 % jitter (90 % with a
// multiplier of 1, RFC 5880 §6.8.7), at once after a state change, and checks its
// detection time, until ctx ends.
func (s *Server) transmit(ctx context.Context, e *entry) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.kick:
		}
		s.mu.Lock()
		if e.s.Expire(time.Now()) {
			s.noteChange(e.s)
		}
		pkt := e.s.Next()
		iv := e.s.TxInterval()
		check := min(iv, e.s.DetectionTime()/4)
		s.mu.Unlock()
		_, _ = e.conn.Write(pkt.Marshal()) // a send error (no route yet) is a lost packet
		jit := 0.75 + 0.25*rand.Float64()
		if e.s.cfg.Multiplier == 1 {
			jit = 0.75 + 0.15*rand.Float64()
		}
		next := time.Duration(float64(iv) * jit)
		// Wake often enough to notice an expired detection time within a quarter of it.
		t.Reset(min(next, max(check, 10*time.Millisecond)))
	}
}

// checkLoop runs the health check every CheckInterval until ctx ends.
func (s *Server) checkLoop(ctx context.Context) {
	tick := time.NewTicker(s.opts.CheckInterval)
	defer tick.Stop()
	for {
		var err error
		if s.opts.Check != nil {
			err = s.opts.Check()
		}
		s.setForwarding(err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// setForwarding applies the health check's verdict to every session.
func (s *Server) setForwarding(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (err == nil) != (s.fwdErr == nil) {
		if err != nil {
			s.log.Warn("bfd: the gateway cannot forward: sessions held down", "reason", err)
		} else {
			s.log.Info("bfd: the gateway forwards again")
		}
	}
	s.fwdErr = err
	for _, e := range s.sessions {
		if e.s.SetForwarding(err == nil, time.Now()) {
			s.noteChange(e.s)
			kick(e)
		}
	}
}

// Status returns the sessions, sorted by peer, and a channel closed at the next change.
func (s *Server) Status() ([]Status, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.sessions))
	for _, e := range s.sessions {
		st, d, since := e.s.State()
		rp, _ := e.s.Remote()
		ups, downs := e.s.Transitions()
		x := Status{Peer: e.s.Peer, Local: e.s.Local, State: st.String(), Up: st == Up, Diag: d.String(),
			Since: since, Remote: rp.State.String(), RemoteDiag: rp.Diag.String(), RemoteCPI: rp.CPI,
			Ups: ups, Downs: downs, Detection: e.s.DetectionTime().String(), Forwarding: s.fwdErr == nil}
		if s.fwdErr != nil {
			x.NotForwarding = s.fwdErr.Error()
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b Status) int { return a.Peer.Compare(b.Peer) })
	return out, s.changed
}
