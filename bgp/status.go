// SPDX-License-Identifier: Apache-2.0
package bgp

import (
	"fmt"
	"net/netip"
	"time"
)

// PeerStatus is one neighbour's session as the speaker sees it now (speaker.Speaker.Peers).
type PeerStatus struct {
	// Address and ASN are the neighbour's, as configured.
	Address netip.Addr
	ASN     uint32
	// State is the BGP FSM state in lower case: idle, connect, active, opensent,
	// openconfirm, established ("unknown" before the server has it).
	State string
	// Up is State == "established".
	Up bool
	// Uptime is how long the session has been established (whole seconds; 0 when down).
	Uptime time.Duration
	// Since is when the session was established (whole seconds; zero when down): it changes
	// only when the session is reset, so an unchanged Since shows that a session did not flap.
	Since time.Time
	// Received, Accepted and Advertised count prefixes, over the session's families.
	// Advertised counts routes only (GoBGP's count includes an End-of-RIB marker per family
	// when graceful restart is negotiated; it is left out).
	Received, Accepted, Advertised uint64
	// UpdatesSent counts the UPDATE messages sent to the neighbour since the peer was added.
	UpdatesSent uint64
	// BFD is the peer's BFD session state: "" without BFD, else down, init, up, admin_down
	// or suspended (flapping: off for its hold-down, see bgp.BFD.HoldDown). BFDTransitions counts its transitions into and out of up since the peer was
	// added, and BFDSince is when it last changed (zero before any).
	BFD            string
	BFDTransitions uint64
	BFDSince       time.Time
	// LastError is the last failure seen on the session (a failed connection attempt, the
	// reason it went down, a NOTIFICATION), or "" if none. It is kept after the session
	// comes back up.
	LastError string
}

// String is a one-line summary for logs and test failures.
func (st PeerStatus) String() string {
	s := fmt.Sprintf("peer %v as %d %s up %v rx %d acc %d adv %d", st.Address, st.ASN, st.State,
		st.Uptime, st.Received, st.Accepted, st.Advertised)
	if st.BFD != "" {
		s += " bfd " + st.BFD
	}
	if st.LastError != "" {
		s += " last error: " + st.LastError
	}
	return s
}
