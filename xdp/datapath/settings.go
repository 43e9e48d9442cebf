// SPDX-License-Identifier: Apache-2.0
package datapath

import (
	"fmt"
	"time"
)

// Defaults of Settings.
const (
	DefaultConntrackSize         = 1 << 20
	DefaultHandshakeSize         = 1 << 16
	DefaultTCPEstablishedTimeout = time.Hour
	DefaultTCPClosingTimeout     = 10 * time.Second
	DefaultUDPTimeout            = 60 * time.Second
	DefaultNewFlowRate           = 250000
	// MidFlowShare is the mid-flow budget's share of the new-flow budget: MidFlowRate is
	// NewFlowRate / MidFlowShare.
	MidFlowShare = 8
	// MinReverseConntrackSize is the smallest reverse conntrack table.
	MinReverseConntrackSize = 1024
	DefaultNextHopCacheTTL  = 500 * time.Millisecond
	// MinTimeout is the shortest conntrack timeout: the XDP datapath refreshes an entry's
	// timestamp at most once a second.
	MinTimeout = time.Second
)

// Settings shape a gateway datapath's flow state. The XDP and AF_XDP datapaths take the same
// settings with the same meaning (configuration section datapath). The zero value is a working
// default: a zero field means its Default* value.
type Settings struct {
	// Seed seeds the flow hash. Every gateway of a site must use the same seed, or a flow that
	// ECMP moves to another gateway lands on another backend.
	Seed uint32
	// ConntrackSize is how many flows conntrack holds (an LRU in the XDP datapath).
	ConntrackSize uint32
	// HandshakeSize is how many TCP handshakes in flight (SYN seen, no conntrack entry yet), and
	// datagram flows that have sent one datagram, the handshake table holds. A handshake's ACK
	// (a flow's second datagram) goes to the backend its SYN (first datagram) went to even if the
	// frontend's Maglev table changed in between; one whose entry was evicted falls back to
	// Maglev. The XDP datapath's table is direct-mapped, this many slots rounded up to a
	// power of two (another tuple's SYN on the same slot evicts); a completed handshake's
	// connection stays in its slot until a SYN of another tuple needs it and moves it into
	// conntrack (one that closes before then never enters conntrack); each slot also carries 16
	// bits of the live-flow filter, which spares a SYN the conntrack lookup: about
	// 4.6 × HandshakeSize live TCP flows set a quarter of its bits, and beyond that more and more
	// SYNs (a SYN flood's too) ask conntrack (slower, never wrong).
	HandshakeSize uint32
	// TCPEstablishedTimeout, TCPClosingTimeout (after FIN or RST) and UDPTimeout are conntrack
	// idle timeouts, each at least MinTimeout.
	TCPEstablishedTimeout time.Duration
	TCPClosingTimeout     time.Duration
	UDPTimeout            time.Duration
	// NewFlowRate is the flood budget: how many conntrack entries new flows may insert per
	// second over the whole gateway (all CPUs), and, separately, how many handshake entries
	// SYNs may. A TCP flow enters conntrack from this budget only by completing a handshake
	// this gateway saw; one whose handshake it did not see (an ECMP move, a restart, or a forged
	// ACK) has the mid-flow budget, MidFlowRate. Above a budget flows are still balanced
	// (Maglev is stateless) but not remembered. Negative means no cap.
	NewFlowRate int64
	// NextHopCacheTTL is how long a destination's next hop (egress interface, MACs, MTU) is
	// trusted before it is looked up again: route and neighbour changes take effect within it.
	// Negative disables the cache.
	NextHopCacheTTL time.Duration
}

// WithDefaults returns s with every zero field set to its default. NewFlowRate and
// NextHopCacheTTL stay negative when they are (no cap, no cache).
func (s Settings) WithDefaults() Settings {
	if s.ConntrackSize == 0 {
		s.ConntrackSize = DefaultConntrackSize
	}
	if s.HandshakeSize == 0 {
		s.HandshakeSize = DefaultHandshakeSize
	}
	if s.TCPEstablishedTimeout == 0 {
		s.TCPEstablishedTimeout = DefaultTCPEstablishedTimeout
	}
	if s.TCPClosingTimeout == 0 {
		s.TCPClosingTimeout = DefaultTCPClosingTimeout
	}
	if s.UDPTimeout == 0 {
		s.UDPTimeout = DefaultUDPTimeout
	}
	if s.NewFlowRate == 0 {
		s.NewFlowRate = DefaultNewFlowRate
	}
	if s.NextHopCacheTTL == 0 {
		s.NextHopCacheTTL = DefaultNextHopCacheTTL
	}
	return s
}

// MidFlowRate is the mid-flow budget: how many TCP flows whose handshake this gateway did not
// see may enter conntrack per second (NewFlowRate / MidFlowShare, at least 1; negative: no cap).
// It keeps the pickup of flows that ECMP moved here working while random-tuple ACKs cannot
// churn conntrack at the new-flow rate. s must have its defaults.
func (s Settings) MidFlowRate() int64 {
	if s.NewFlowRate < 0 {
		return -1
	}
	return max(1, s.NewFlowRate/MidFlowShare)
}

// ReverseConntrackSize is the size of the reverse entries' table (the frontend of each flow to
// an ambiguous backend, for its replies): a quarter of ConntrackSize, at least
// MinReverseConntrackSize. A table of its own, so that these entries, which SYNs write, never
// evict forward flows. s must have its defaults.
func (s Settings) ReverseConntrackSize() uint32 {
	return max(MinReverseConntrackSize, s.ConntrackSize/4)
}

// Validate says what is wrong with s, naming the field: a timeout below MinTimeout (zero is
// the default, and fine).
func (s Settings) Validate() error {
	for _, t := range []struct {
		name string
		v    time.Duration
	}{{"TCPEstablishedTimeout", s.TCPEstablishedTimeout}, {"TCPClosingTimeout", s.TCPClosingTimeout},
		{"UDPTimeout", s.UDPTimeout}} {
		if t.v != 0 && t.v < MinTimeout {
			return fmt.Errorf("%s %s is below the %s minimum (conntrack timestamps are refreshed once a second)",
				t.name, t.v, MinTimeout)
		}
	}
	return nil
}

// Timeout returns the conntrack idle timeout of a flow of protocol p (closing: a TCP flow after
// FIN or RST). s must have its defaults.
func (s Settings) Timeout(p Protocol, closing bool) time.Duration {
	switch {
	case p == TCP && closing:
		return s.TCPClosingTimeout
	case p == TCP:
		return s.TCPEstablishedTimeout
	}
	return s.UDPTimeout
}
