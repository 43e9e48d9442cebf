package bgp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// PeerStatus is one neighbour's session as GoBGP sees it now.
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
	// LastError is the last failure seen on the session (a failed connection attempt, the
	// reason it went down, a NOTIFICATION), or "" if none. It is kept after the session
	// comes back up.
	LastError string
}

// Peers returns the status of every configured peer, sorted by address. Before Start (or
// after Stop), and with Config.WaitForRoutes until the first routes are set, every peer is
// reported in state "idle".
func (s *Speaker) Peers() []PeerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PeerStatus, 0, len(s.peers))
	byAddr := make(map[netip.Addr]*api.Peer)
	if s.started && !s.stopped {
		_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true},
			func(p *api.Peer) {
				if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
					byAddr[a.Unmap()] = p
				}
			})
	}
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		st := PeerStatus{Address: addr, ASN: s.peers[addr].ASN, State: "idle",
			LastError: s.la.lastError(addr)}
		if p, ok := byAddr[addr]; ok {
			fillStatus(&st, p, s.cfg.GracefulRestart > 0)
		}
		out = append(out, st)
	}
	return out
}

// fillStatus copies GoBGP's view of peer p into st; gr says whether this speaker has graceful
// restart on.
func fillStatus(st *PeerStatus, p *api.Peer, gr bool) {
	state := p.GetState().GetSessionState()
	st.State = strings.ToLower(state.String())
	st.Up = state == api.PeerState_ESTABLISHED
	if up := p.GetTimers().GetState().GetUptime(); st.Up && up != nil && up.GetSeconds() > 0 {
		st.Since = up.AsTime()
		st.Uptime = time.Since(st.Since).Truncate(time.Second)
	}
	// GoBGP adds an End-of-RIB per family to its advertised count when graceful restart is
	// negotiated: on here and in the peer's OPEN.
	eor := uint64(0)
	if gr && remoteGR(p) {
		eor = 1
	}
	for _, af := range p.GetAfiSafis() {
		st.Received += af.GetState().GetReceived()
		st.Accepted += af.GetState().GetAccepted()
		st.Advertised += af.GetState().GetAdvertised() - min(eor, af.GetState().GetAdvertised())
	}
	st.UpdatesSent = p.GetState().GetMessages().GetSent().GetUpdate()
}

// remoteGR reports whether peer p's OPEN offered graceful restart.
func remoteGR(p *api.Peer) bool {
	for _, c := range p.GetState().GetRemoteCap() {
		if c.MessageIs(&api.GracefulRestartCapability{}) {
			return true
		}
	}
	return false
}

// String is a one-line summary for logs and test failures.
func (st PeerStatus) String() string {
	s := fmt.Sprintf("peer %v as %d %s up %v rx %d acc %d adv %d", st.Address, st.ASN, st.State,
		st.Uptime, st.Received, st.Accepted, st.Advertised)
	if st.LastError != "" {
		s += " last error: " + st.LastError
	}
	return s
}

// RouterID returns the BGP identifier the speaker runs with.
func (s *Speaker) RouterID() netip.Addr { return s.cfg.RouterID }

// ASN returns the local AS number the speaker runs with.
func (s *Speaker) ASN() uint32 { return s.cfg.ASN }
