// SPDX-License-Identifier: Apache-2.0
package l2

import (
	"net/netip"
	"time"
)

// Peer is a gateway last heard from at At.
type Peer struct {
	ID netip.Addr
	At time.Time
	Heartbeat
}

// Members follows the peers' heartbeats: a peer is alive while its last heartbeat is younger
// than DeadAfter. Not safe for concurrent use (the daemon's L2 goroutine owns it).
type Members struct {
	// DeadAfter is how long a silent peer stays alive (interval × multiplier).
	DeadAfter time.Duration
	peers     map[netip.Addr]Peer
}

// Heard records heartbeat h from id at now. It reports whether the peer is new or was dead
// (the ownership must be computed again at once).
func (m *Members) Heard(id netip.Addr, h Heartbeat, now time.Time) (changed bool) {
	if m.peers == nil {
		m.peers = map[netip.Addr]Peer{}
	}
	old, ok := m.peers[id]
	m.peers[id] = Peer{ID: id, At: now, Heartbeat: h}
	return !ok || now.Sub(old.At) >= m.DeadAfter || !sameSet(old.Serves, h.Serves) ||
		!sameSet(old.Claims, h.Claims) || old.Ready() != h.Ready()
}

// Expire forgets the peers silent for DeadAfter at now, and returns them.
func (m *Members) Expire(now time.Time) []Peer {
	var out []Peer
	for id, p := range m.peers {
		if now.Sub(p.At) >= m.DeadAfter {
			out = append(out, p)
			delete(m.peers, id)
		}
	}
	return out
}

// Alive returns the peers alive at now (Expire first to drop the dead).
func (m *Members) Alive(now time.Time) []Peer {
	out := make([]Peer, 0, len(m.peers))
	for _, p := range m.peers {
		if now.Sub(p.At) < m.DeadAfter {
			out = append(out, p)
		}
	}
	return out
}

// AsMember is p as Owners takes it: a peer not ready serves nothing (it claims what it says).
func (p Peer) AsMember() Member {
	m := Member{ID: p.ID, Serves: map[netip.Addr]bool{}, Claims: map[netip.Addr]bool{}}
	if p.Ready() {
		for _, a := range p.Serves {
			m.Serves[a] = true
		}
	}
	for _, a := range p.Claims {
		m.Claims[a] = true
	}
	return m
}

func sameSet(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	s := make(map[netip.Addr]bool, len(a))
	for _, x := range a {
		s[x] = true
	}
	for _, x := range b {
		if !s[x] {
			return false
		}
	}
	return true
}
