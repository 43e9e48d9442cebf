// SPDX-License-Identifier: Apache-2.0
package bfd

import (
	"errors"
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/bgp"
)

// Session is one single-hop BFD session's state machine (RFC 5880 §6.8), driven by explicit
// times: Receive for each accepted packet, Expire when the detection time may have passed,
// SetForwarding for the health check's verdict. It is not safe for concurrent use.
type Session struct {
	Peer, Local netip.Addr
	cfg         bgp.BFD

	state      State
	diag       Diag
	localDisc  uint32
	remoteDisc uint32
	remote     Packet    // the last accepted packet
	lastRx     time.Time // when it came (zero: none since the last Down)
	forwarding bool      // the health check's last verdict
	answerPoll bool      // the next packet carries Final
	since      time.Time // when state was entered
	ups, downs uint64
}

// ErrYourDisc is the drop reason of a packet naming another session (or, with a zero Your
// Discriminator, a peer claiming a state other than Down or AdminDown).
var ErrYourDisc = errors.New("your discriminator is not this session's")

// NewSession returns a session in Down, with local discriminator disc (non-zero, unique on
// the host), that may come up once SetForwarding(true).
func NewSession(peer, local netip.Addr, cfg bgp.BFD, disc uint32, now time.Time) *Session {
	return &Session{Peer: peer, Local: local, cfg: cfg.WithDefaults(), state: Down, localDisc: disc, since: now}
}

// State returns the session's state, its diagnostic and when it entered the state.
func (s *Session) State() (State, Diag, time.Time) { return s.state, s.diag, s.since }

// Transitions counts the session's moves into Up and out of Up.
func (s *Session) Transitions() (ups, downs uint64) { return s.ups, s.downs }

// Remote returns the last packet accepted from the peer and when (zero: none since Down).
func (s *Session) Remote() (Packet, time.Time) { return s.remote, s.lastRx }

// Discriminator is the session's local discriminator.
func (s *Session) Discriminator() uint32 { return s.localDisc }

func (s *Session) set(st State, d Diag, now time.Time) bool {
	if st == s.state {
		return false
	}
	if s.state == Up {
		s.downs++
	}
	if st == Up {
		s.ups++
	}
	s.state, s.diag, s.since = st, d, now
	if st == Down {
		s.remoteDisc = 0 // §6.8.1: bfd.RemoteDiscr reset when the session goes Down
	}
	return true
}

// Receive applies packet p from the peer (already checked by Parse and for TTL and source).
// It reports whether the state changed, or an error saying why p was dropped.
func (s *Session) Receive(p Packet, now time.Time) (bool, error) {
	if p.YourDisc != 0 && p.YourDisc != s.localDisc {
		return false, ErrYourDisc
	}
	if p.YourDisc == 0 && p.State != Down && p.State != AdminDown {
		return false, ErrYourDisc
	}
	s.remoteDisc, s.remote, s.lastRx = p.MyDisc, p, now
	if p.Poll {
		s.answerPoll = true
	}
	if !s.forwarding {
		return false, nil // held Down: the gateway cannot forward
	}
	if p.State == AdminDown {
		return s.set(Down, DiagNeighborDown, now), nil
	}
	switch s.state {
	case Down:
		switch p.State {
		case Down:
			return s.set(Init, DiagNone, now), nil
		case Init:
			return s.set(Up, DiagNone, now), nil
		}
	case Init:
		if p.State == Init || p.State == Up {
			return s.set(Up, DiagNone, now), nil
		}
	case Up:
		if p.State == Down {
			return s.set(Down, DiagNeighborDown, now), nil
		}
	}
	return false, nil
}

// DetectionTime is the negotiated detection time (§6.8.4): the peer's multiplier × the
// larger of our required receive interval and its desired transmit interval.
func (s *Session) DetectionTime() time.Duration {
	mult := s.remote.DetectMult
	if mult == 0 {
		mult = s.cfg.Multiplier
	}
	return time.Duration(mult) * max(s.cfg.ReceiveInterval, s.remote.DesiredMinTx)
}

// Expire moves the session Down when nothing came for the detection time (in Init or Up). It
// reports whether the state changed.
func (s *Session) Expire(now time.Time) bool {
	if (s.state != Init && s.state != Up) || s.lastRx.IsZero() {
		return false
	}
	if now.Sub(s.lastRx) < s.DetectionTime() {
		return false
	}
	s.lastRx = time.Time{}
	return s.set(Down, DiagDetectExpired, now)
}

// SetForwarding records the health check's verdict. A gateway that cannot forward holds its
// sessions Down with "forwarding plane reset", and the next packet tells the peer. It reports
// whether the state changed.
func (s *Session) SetForwarding(ok bool, now time.Time) bool {
	s.forwarding = ok
	if ok {
		if s.diag == DiagForwardingReset {
			s.diag = DiagNone
		}
		return false
	}
	changed := s.set(Down, DiagForwardingReset, now)
	s.diag = DiagForwardingReset
	return changed
}

// TxInterval is the interval between two packets before jitter (§6.8.7): the larger of our
// desired transmit interval and the peer's required receive interval. A peer that asks for
// none (RequiredMinRx 0) gets packets at our slow rate of one a second, as a session that
// is not up.
func (s *Session) TxInterval() time.Duration {
	if s.remote.RequiredMinRx == 0 && !s.lastRx.IsZero() {
		return time.Second
	}
	return max(s.cfg.TransmitInterval, s.remote.RequiredMinRx)
}

// Next returns the packet to send now, with the C bit: this BFD does not share fate with
// the control plane.
func (s *Session) Next() Packet {
	p := Packet{
		Diag: s.diag, State: s.state, CPI: true, DetectMult: s.cfg.Multiplier,
		MyDisc: s.localDisc, YourDisc: s.remoteDisc,
		DesiredMinTx: s.cfg.TransmitInterval, RequiredMinRx: s.cfg.ReceiveInterval,
		Final: s.answerPoll,
	}
	s.answerPoll = false
	return p
}
