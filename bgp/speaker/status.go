// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/xlb-dev/xlb/bgp"
)

// Peers returns the status of every configured peer, sorted by address. Before Start (or
// after Stop), and with bgp.Config.WaitForRoutes until the first routes are set, every peer is
// reported in state "idle".
func (s *Speaker) Peers() []bgp.PeerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bgp.PeerStatus, 0, len(s.peers))
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
		st := bgp.PeerStatus{Address: addr, ASN: s.peers[addr].ASN, State: "idle",
			LastError: s.la.lastError(addr)}
		if p, ok := byAddr[addr]; ok {
			fillStatus(&st, p)
		}
		if s.peers[addr].BFD.Enabled {
			t := s.la.bfdState(addr)
			st.BFD, st.BFDTransitions, st.BFDSince = t.state, t.transitions, t.since
			if st.BFD == "" {
				st.BFD = "down"
			}
			if t.suspended {
				st.BFD = "suspended"
			}
		}
		out = append(out, st)
	}
	return out
}

// fillStatus copies GoBGP's view of peer p into st. (GoBGP v4's advertised count is of routes
// only; v3's counted an End-of-RIB per family when graceful restart was negotiated.)
func fillStatus(st *bgp.PeerStatus, p *api.Peer) {
	state := p.GetState().GetSessionState()
	st.State = strings.ToLower(strings.TrimPrefix(state.String(), "SESSION_STATE_"))
	st.Up = state == api.PeerState_SESSION_STATE_ESTABLISHED
	if up := p.GetTimers().GetState().GetUptime(); st.Up && up != nil && up.GetSeconds() > 0 {
		st.Since = up.AsTime()
		st.Uptime = time.Since(st.Since).Truncate(time.Second)
	}
	for _, af := range p.GetAfiSafis() {
		st.Received += af.GetState().GetReceived()
		st.Accepted += af.GetState().GetAccepted()
		st.Advertised += af.GetState().GetAdvertised()
	}
	st.UpdatesSent = p.GetState().GetMessages().GetSent().GetUpdate()
}

// remoteGR reports whether peer p's OPEN offered graceful restart.
func remoteGR(p *api.Peer) bool {
	for _, c := range p.GetState().GetRemoteCap() {
		if c.GetGracefulRestart() != nil {
			return true
		}
	}
	return false
}

// RouterID returns the BGP identifier the speaker runs with.
func (s *Speaker) RouterID() netip.Addr { return s.cfg.RouterID }

// ASN returns the local AS number the speaker runs with.
func (s *Speaker) ASN() uint32 { return s.cfg.ASN }
