// SPDX-License-Identifier: Apache-2.0
package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Timer defaults: short enough that a silent gateway failure is detected within HoldTime
// without BFD, long enough for a busy 2-core gateway never to miss a keepalive. With BFD
// (Peer.BFD) a failure is detected in ReceiveInterval × Multiplier instead.
const (
	// DefaultHoldTime is the hold time proposed in OPEN when Peer.HoldTime is zero.
	DefaultHoldTime = 9 * time.Second
	// DefaultKeepaliveTime is the keepalive interval when Peer.KeepaliveTime is zero.
	DefaultKeepaliveTime = 3 * time.Second
	// DefaultConnectRetry is the wait between connection attempts when Peer.ConnectRetry is zero.
	DefaultConnectRetry = 1 * time.Second
	// DefaultPort is the peer's TCP port when Peer.Port is zero.
	DefaultPort = 179
	// DefaultBFDInterval is BFD's transmit and receive interval when BFD's are zero: with
	// DefaultBFDMultiplier a dead neighbour is detected within 900 ms.
	DefaultBFDInterval = 300 * time.Millisecond
	// DefaultBFDMultiplier is BFD's detection multiplier when BFD.Multiplier is zero.
	DefaultBFDMultiplier = 3
	// MinBFDInterval and MaxBFDInterval bound BFD's intervals: below 50 ms a busy 2-core
	// gateway would flap sessions; above 60 s BFD detects nothing the hold timer does not.
	MinBFDInterval = 50 * time.Millisecond
	MaxBFDInterval = 60 * time.Second
)

// Config is the speaker's configuration (speaker.New takes it).
type Config struct {
	// RouterID is the BGP identifier; it must be an IPv4 address, unique among the speakers
	// (usually the gateway's upstream address).
	RouterID netip.Addr
	// ASN is the local autonomous system number; 0 is invalid.
	ASN uint32
	// ListenPort is the TCP port the speaker accepts sessions on. 0 and -1 (the default) mean
	// it does not listen and only dials out; a Passive peer needs a port.
	ListenPort int32
	// Peers are the BGP neighbours (usually the upstream routers).
	Peers []Peer
	// GracefulRestart is the restart time advertised with the graceful restart capability
	// (RFC 4724): how long peers keep this speaker's routes after its sessions drop without a
	// NOTIFICATION. Whole seconds, at most 4095 s; 0 turns graceful restart off.
	GracefulRestart time.Duration
	// WaitForRoutes makes the speaker's Start open no session: the peers are added by the
	// first SetRoutes after Start, once the routes are in the RIB, so that the first UPDATE
	// each peer gets carries them, before the End-of-RIB. Without it a restarted speaker whose
	// routes come later (from a first reconcile that waits for its inputs) sends an empty table
	// and an End-of-RIB, which a graceful restart helper takes as the withdrawal of every route
	// it kept. Until then the speaker's Peers reports every peer "idle" and SetPeers only
	// records the peers; routes set before Start count (Start opens the sessions then). The
	// helpers keep the routes only for their restart time: a speaker that gets no routes within
	// it loses them anyway. Stop(Withdraw) before the first routes opens the sessions with an
	// empty table so that they drop what they kept (see speaker.Speaker.Stop).
	WaitForRoutes bool
}

// Peer is one BGP neighbour.
type Peer struct {
	// Address is the neighbour's address; its family is the session's family (see the
	// package documentation). Required.
	Address netip.Addr
	// ASN is the neighbour's AS number: equal to Config.ASN for iBGP. 0 is invalid.
	ASN uint32
	// Port is the neighbour's TCP port; 0 means 179.
	Port uint16
	// PasswordFile names a file holding the TCP MD5 (RFC 2385) password; trailing newlines
	// are ignored, and the rest is 1 to 80 bytes. Empty means no MD5. The speaker reads the
	// file when the peer is added, and an unreadable or empty file is an error.
	PasswordFile string
	// Password is the TCP MD5 password itself (1 to 80 bytes), for a password that does not
	// come from a file (a Kubernetes Secret); at most one of Password and PasswordFile is set.
	Password string
	// MultihopTTL, when non-zero, allows an eBGP neighbour that many hops away.
	MultihopTTL uint8
	// GTSM turns on the Generalized TTL Security Mechanism (RFC 5082) for a directly
	// connected neighbour: the session's packets are sent with TTL 255 and the socket accepts
	// only TTL 255 (IP_MINTTL / IPV6_MINHOPCOUNT), so nothing off-link can reach it. The
	// neighbour must send with TTL 255 too (BIRD: ttl security; FRR: neighbor ttl-security hops 1).
	GTSM bool
	// ExternalBFD, set by the daemon for bgp.bfdProcess, leaves BFD to another process: the
	// speaker runs none for this peer even with BFD enabled.
	ExternalBFD bool
	// HoldTime is the hold time proposed in OPEN (whole seconds, 0 → 9 s, else at least 3 s).
	HoldTime time.Duration
	// KeepaliveTime is the keepalive interval (whole seconds, 0 → 3 s, less than HoldTime).
	KeepaliveTime time.Duration
	// ConnectRetry is the wait between connection attempts (whole seconds, 0 → 1 s).
	ConnectRetry time.Duration
	// Passive makes the speaker wait for the neighbour to connect (needs Config.ListenPort).
	Passive bool
	// LocalAddress is the source address of the session, and so the next hop announced to
	// this neighbour. Unset: the kernel picks it from the route to Address.
	LocalAddress netip.Addr
	// BFD, when enabled, runs a single-hop BFD session (RFC 5880/5881) with the neighbour
	// beside the BGP session: when BFD goes down the BGP session is reset at once, instead of
	// when its hold timer expires. The neighbour must run BFD too. (A value, not a pointer:
	// Peers compare with ==, and an unchanged peer is never reset by a reload.)
	BFD BFD
}

// BFD is a peer's BFD session. The speaker does not negotiate timers: it sends every
// TransmitInterval and declares the session down when nothing arrived for ReceiveInterval ×
// Multiplier, so the neighbour must transmit at least every ReceiveInterval.
type BFD struct {
	// Enabled turns BFD on; the other fields apply only then.
	Enabled bool
	// TransmitInterval is the desired minimum transmit interval (whole milliseconds, 0 →
	// DefaultBFDInterval, else MinBFDInterval to MaxBFDInterval).
	TransmitInterval time.Duration
	// ReceiveInterval is the required minimum receive interval, as TransmitInterval.
	ReceiveInterval time.Duration
	// Multiplier is the detection multiplier (0 → DefaultBFDMultiplier, else 1 to 255).
	Multiplier uint8
	// HoldDown dampens a flapping BFD session (a lossy link): after BFDFlapLimit downs within
	// BFDFlapWindow the speaker runs the session without BFD (on its hold timer) for HoldDown,
	// doubled at each suspension that follows the last within 10 × HoldDown (at most 16 ×),
	// then turns BFD on again without resetting the session. Whole seconds, 0 →
	// DefaultBFDHoldDown, at most MaxBFDHoldDown.
	HoldDown time.Duration
}

// BFD flap dampening (BFD.HoldDown).
const (
	// BFDFlapLimit downs within BFDFlapWindow suspend BFD.
	BFDFlapLimit  = 3
	BFDFlapWindow = time.Minute
	// DefaultBFDHoldDown is BFD.HoldDown when it is zero; MaxBFDHoldDown its largest value.
	DefaultBFDHoldDown = time.Minute
	MaxBFDHoldDown     = time.Hour
)

// WithDefaults returns b with the defaults applied to the fields left zero.
func (b BFD) WithDefaults() BFD {
	if b.TransmitInterval == 0 {
		b.TransmitInterval = DefaultBFDInterval
	}
	if b.ReceiveInterval == 0 {
		b.ReceiveInterval = DefaultBFDInterval
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBFDMultiplier
	}
	if b.HoldDown == 0 {
		b.HoldDown = DefaultBFDHoldDown
	}
	return b
}

// DetectionTime is how long after the last BFD packet from the neighbour the session is
// declared down.
func (b BFD) DetectionTime() time.Duration {
	d := b.WithDefaults()
	return d.ReceiveInterval * time.Duration(d.Multiplier)
}

// Validate checks the BFD settings; the error names the bad field.
func (b BFD) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"bfd.transmitInterval", b.TransmitInterval}, {"bfd.receiveInterval", b.ReceiveInterval}} {
		switch {
		case f.d == 0:
		case f.d < MinBFDInterval || f.d > MaxBFDInterval:
			errs = append(errs, fmt.Errorf("%s %v: must be between %v and %v", f.name, f.d, MinBFDInterval, MaxBFDInterval))
		case f.d%time.Millisecond != 0:
			errs = append(errs, fmt.Errorf("%s %v: must be whole milliseconds", f.name, f.d))
		}
	}
	if err := seconds("bfd.holdDown", b.HoldDown, 0, MaxBFDHoldDown); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Validate checks the configuration and its peers; the error names each bad field.
func (c Config) Validate() error {
	var errs []error
	if !c.RouterID.Is4() {
		errs = append(errs, fmt.Errorf("routerID %v: must be an IPv4 address", c.RouterID))
	} else if c.RouterID.IsUnspecified() {
		errs = append(errs, fmt.Errorf("routerID %v: must not be 0.0.0.0", c.RouterID))
	}
	if c.ASN == 0 {
		errs = append(errs, errors.New("asn: must not be 0"))
	}
	if c.ListenPort < -1 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listenPort %d: must be -1, 0 or a port number", c.ListenPort))
	}
	if err := seconds("gracefulRestart", c.GracefulRestart, 0, 4095*time.Second); err != nil {
		errs = append(errs, err)
	}
	seen := make(map[netip.Addr]bool)
	for i, p := range c.Peers {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("peers[%d]: %w", i, err))
			continue
		}
		if seen[p.Address] {
			errs = append(errs, fmt.Errorf("peers[%d]: peer %v: duplicate address", i, p.Address))
		}
		seen[p.Address] = true
		if p.Passive && c.ListenPort <= 0 {
			errs = append(errs, fmt.Errorf("peers[%d]: peer %v: passive needs listenPort", i, p.Address))
		}
	}
	return errors.Join(errs...)
}

// Validate checks one peer; the error names the peer and the bad field.
func (p Peer) Validate() error {
	if !p.Address.IsValid() || p.Address.IsUnspecified() || p.Address.IsMulticast() ||
		p.Address.Is4In6() || p.Address.Zone() != "" {
		return fmt.Errorf("peer %v: address: must be a unicast IPv4 or IPv6 address", p.Address)
	}
	var errs []error
	if p.ASN == 0 {
		errs = append(errs, errors.New("asn: must not be 0"))
	}
	if p.LocalAddress.IsValid() && p.LocalAddress.Is4() != p.Address.Is4() {
		errs = append(errs, fmt.Errorf("localAddress %v: not the same family as the address", p.LocalAddress))
	}
	if err := seconds("holdTime", p.HoldTime, 0, 65535*time.Second); err != nil {
		errs = append(errs, err)
	} else if p.HoldTime != 0 && p.HoldTime < 3*time.Second {
		errs = append(errs, fmt.Errorf("holdTime %v: must be 0 (default) or at least 3s", p.HoldTime))
	}
	if err := seconds("keepaliveTime", p.KeepaliveTime, 0, 65535*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := seconds("connectRetry", p.ConnectRetry, 0, 65535*time.Second); err != nil {
		errs = append(errs, err)
	}
	if d := p.WithDefaults(); d.KeepaliveTime >= d.HoldTime {
		errs = append(errs, fmt.Errorf("keepaliveTime %v: must be less than holdTime %v", d.KeepaliveTime, d.HoldTime))
	}
	if p.Password != "" && p.PasswordFile != "" {
		errs = append(errs, errors.New("password and passwordFile: set at most one"))
	}
	if len(p.Password) > 80 {
		errs = append(errs, fmt.Errorf("password: %d bytes, at most 80 (TCP_MD5SIG_MAXKEYLEN)", len(p.Password)))
	}
	if p.BFD.Enabled {
		if err := p.BFD.Validate(); err != nil {
			errs = append(errs, err)
		}
		if p.MultihopTTL > 1 {
			errs = append(errs, fmt.Errorf("bfd: single-hop only, but multihopTTL is %d", p.MultihopTTL))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("peer %v: %w", p.Address, err)
	}
	return nil
}

// WithDefaults returns p with the defaults applied to the fields left zero: Port
// (DefaultPort), HoldTime (DefaultHoldTime), KeepaliveTime (DefaultKeepaliveTime) and
// ConnectRetry (DefaultConnectRetry). These are the values the speaker runs the session with.
func (p Peer) WithDefaults() Peer {
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.HoldTime == 0 {
		p.HoldTime = DefaultHoldTime
	}
	if p.KeepaliveTime == 0 {
		p.KeepaliveTime = DefaultKeepaliveTime
	}
	if p.ConnectRetry == 0 {
		p.ConnectRetry = DefaultConnectRetry
	}
	return p
}

// seconds checks that d is whole seconds within [lo, hi].
func seconds(field string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%s %v: must be between %v and %v", field, d, lo, hi)
	}
	if d%time.Second != 0 {
		return fmt.Errorf("%s %v: must be whole seconds", field, d)
	}
	return nil
}

// String describes the peer for logs and messages, never with its password.
func (p Peer) String() string {
	s := fmt.Sprintf("peer %v AS %d", p.Address, p.ASN)
	if p.Password != "" || p.PasswordFile != "" {
		s += " (MD5)"
	}
	return s
}
