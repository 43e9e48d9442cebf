// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"fmt"
	"math"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// snapshotNow is the clock of a snapshot's Balancer: entries are placed their age before it,
// so any value works.
const snapshotNow = 24 * time.Hour

// snapshot is the part of a pinned datapath's state one flow's packets can touch: the frontends
// on its destination address and the one its conntrack entry names, their Maglev tables, the
// backends, the flow's conntrack and handshake entries, and the settings the attached program
// runs with. Each question is asked of a Balancer built from it afresh (Forward writes flow
// state).
type snapshot struct {
	settings datapath.Settings
	// timeoutsErr is why the conntrack timeouts are unknown (nil: read from the attached
	// program); the longest are used, so an entry is never taken for expired.
	timeoutsErr error
	vips        map[datapath.Frontend]datapath.VIPConfig
	tables      map[datapath.VIPID][]datapath.BackendID
	backends    map[datapath.BackendID]datapath.Backend
	// flow is the flow's forward conntrack entry, if hasFlow.
	flow    datapath.Flow
	hasFlow bool
	// hs is the flow's handshake entry, if hasHS; hsErr is why the table could not be read.
	hs    datapath.Handshake
	hasHS bool
	hsErr error
}

// readSnapshot reads what q's flow can touch from p. q is normalized.
func readSnapshot(p *gateway.Pinned, q FlowQuery) (*snapshot, error) {
	s := &snapshot{vips: map[datapath.Frontend]datapath.VIPConfig{}, tables: map[datapath.VIPID][]datapath.BackendID{}}
	var err error
	// The timeouts, and the seed unless given, are the attached program's.
	s.settings, _, err = p.Settings()
	switch {
	case err != nil && q.Seed == nil:
		return nil, fmt.Errorf("%w: %w", ErrSeedUnknown, err)
	case err != nil:
		s.timeoutsErr = err
		s.settings = datapath.Settings{TCPEstablishedTimeout: math.MaxInt64, TCPClosingTimeout: math.MaxInt64,
			UDPTimeout: math.MaxInt64}
	}
	if q.Seed != nil {
		s.settings.Seed = *q.Seed
	}
	if s.flow, s.hasFlow, err = p.Flow(q.Client, q.To, q.Proto); err != nil {
		return nil, err
	}
	s.hs, s.hasHS, s.hsErr = p.Handshake(q.Client, q.To, q.Proto)
	all, err := p.VIPs()
	if err != nil {
		return nil, err
	}
	for f, cfg := range all {
		if f.Addr.Unmap() != q.To.Addr() && (!s.hasFlow || cfg.ID != s.flow.VIP) {
			continue
		}
		s.vips[f] = cfg
		tb, err := p.MaglevTable(cfg.ID)
		if err != nil {
			return nil, err
		}
		if len(tb) > 0 {
			s.tables[cfg.ID] = tb
		}
	}
	if s.backends, err = p.Backends(); err != nil {
		return nil, err
	}
	return s, nil
}

// balancer returns a Balancer holding s at time snapshotNow; without the conntrack entry, and a
// datagram flow's first-datagram entry, when withFlow is false (a UDP flow's first datagram).
func (s *snapshot) balancer(withFlow bool) (*forward.Balancer, error) {
	b, err := forward.New(s.settings)
	if err != nil {
		return nil, fmt.Errorf("the attached program's settings: %w", err)
	}
	for f, cfg := range s.vips {
		if err := b.UpsertVIP(f, cfg); err != nil {
			return nil, fmt.Errorf("pinned frontend: %w", err)
		}
	}
	for id, tb := range s.tables {
		if err := b.SetMaglevTable(id, tb); err != nil {
			return nil, fmt.Errorf("pinned table: %w", err)
		}
	}
	for id, be := range s.backends {
		if err := b.UpsertBackend(id, be); err != nil {
			return nil, fmt.Errorf("pinned backend: %w", err)
		}
	}
	if withFlow && s.hasFlow {
		b.SetFlow(s.flow, snapshotNow)
	}
	if s.hasHS && (withFlow || s.hs.Proto == datapath.TCP) {
		b.SetHandshake(s.hs, snapshotNow)
	}
	return b, nil
}
