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
	// Received, Accepted and Advertised count prefixes, over the session's families.
	Received, Accepted, Advertised uint64
	// UpdatesSent counts the UPDATE messages sent to the neighbour since the peer was added.
	UpdatesSent uint64
	// LastError is the last failure seen on the session (a failed connection attempt, the
	// reason it went down, a NOTIFICATION), or "" if none. It is kept after the session
	// comes back up.
	LastError string
}

// Peers returns the status of every configured peer, sorted by address. Before Start (or
// after Stop) every peer is reported in state "idle".
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
			fillStatus(&st, p)
		}
		out = append(out, st)
	}
	return out
}

func fillStatus(st *PeerStatus, p *api.Peer) {
	state := p.GetState().GetSessionState()
	st.State = strings.ToLower(state.String())
	st.Up = state == api.PeerState_ESTABLISHED
	if up := p.GetTimers().GetState().GetUptime(); st.Up && up != nil && up.GetSeconds() > 0 {
		st.Uptime = time.Since(up.AsTime()).Truncate(time.Second)
	}
	for _, af := range p.GetAfiSafis() {
		st.Received += af.GetState().GetReceived()
		st.Accepted += af.GetState().GetAccepted()
		st.Advertised += af.GetState().GetAdvertised()
	}
	st.UpdatesSent = p.GetState().GetMessages().GetSent().GetUpdate()
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
