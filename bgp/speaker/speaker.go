// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/xlb-dev/xlb/bgp"
)

// StopMode says what Stop does with the announced routes.
type StopMode int

const (
	// Withdraw withdraws every route, then closes the sessions with a Cease NOTIFICATION:
	// traffic leaves this gateway at once.
	Withdraw StopMode = iota
	// KeepRoutes closes the sessions without a NOTIFICATION, as a crash would: peers with
	// graceful restart keep the routes for bgp.Config.GracefulRestart, waiting for a new speaker
	// (peers without it drop them at once).
	KeepRoutes
)

// Speaker is an embedded BGP speaker. Its methods are safe for concurrent use.
type Speaker struct {
	cfg bgp.Config
	log *slog.Logger
	la  *logAdapter
	srv *server.BgpServer

	mu      sync.Mutex
	started bool
	stopped bool
	// peering is set once the peers have been given to GoBGP: at Start, or with
	// bgp.Config.WaitForRoutes at the first SetRoutes (Start, if SetRoutes came first).
	peering bool
	// routesSet is set by the first SetRoutes.
	routesSet bool
	// peeredAt is when the peers were given to GoBGP.
	peeredAt time.Time
	// peers maps a neighbour address → its configuration, as given to GoBGP.
	peers map[netip.Addr]peerEntry
	// want maps a prefix → the route SetRoutes asked for.
	want map[netip.Prefix]bgp.Route
	// have maps a prefix → the route in GoBGP's RIB (announced to the peers).
	have map[netip.Prefix]bgp.Route
	// done ends resetAfterBFD at Stop.
	done chan struct{}
	// damp is each peer's BFD flap record (see readdPeers).
	damp map[netip.Addr]*bfdDamp
	// addedAt maps a peer → when it was last given to GoBGP: a re-add asked for by an event
	// logged before that is about an earlier incarnation, and is dropped.
	addedAt map[netip.Addr]time.Time
	// armed marks the peers whose BFD runs: a peer is added without BFD, which is turned on
	// once its session is established (readdPeers, "arm"). FRR (re)creates its BFD session
	// when the BGP session comes up: a BFD session of ours already up then saw the peer's Down
	// and reset the new BGP session, and one still in Init ignored the new session's packets
	// (another discriminator) until it expired and reset it too — a flap at every start.
	armed map[netip.Addr]bool
}

// bfdDamp is a peer's BFD flap dampening: its recent downs and, while BFD is suspended, until
// when; holdDown is the last suspension's length, ended its end.
type bfdDamp struct {
	downs    []time.Time
	until    time.Time
	holdDown time.Duration
	ended    time.Time
	timer    *time.Timer
}

// suspended reports whether peer addr runs without BFD for now. Called with s.mu held.
func (s *Speaker) suspended(addr netip.Addr) bool {
	d := s.damp[addr]
	return d != nil && !d.until.IsZero()
}

// peerEntry is a configured peer with its password as read when it was added.
type peerEntry struct {
	bgp.Peer
	password string
}

// New checks cfg and reads the peers' password files; the speaker does nothing until Start.
func New(cfg bgp.Config, log *slog.Logger) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bgp config: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "bgp")
	s := &Speaker{
		cfg:     cfg,
		log:     log,
		la:      newLogAdapter(log),
		peers:   make(map[netip.Addr]peerEntry),
		want:    make(map[netip.Prefix]bgp.Route),
		have:    make(map[netip.Prefix]bgp.Route),
		done:    make(chan struct{}),
		damp:    make(map[netip.Addr]*bfdDamp),
		addedAt: make(map[netip.Addr]time.Time),
		armed:   make(map[netip.Addr]bool),
	}
	for _, p := range cfg.Peers {
		pw, err := password(p)
		if err != nil {
			return nil, err
		}
		s.peers[p.Address] = peerEntry{p, pw}
	}
	s.cfg.Peers = nil // s.peers owns them from now on
	return s, nil
}

// Start starts the BGP server in the calling process's network namespace, puts the routes
// already set in its RIB and then (unless bgp.Config.WaitForRoutes) adds the peers: a session that
// comes up gets the routes before its End-of-RIB. ctx bounds the start only.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("bgp: speaker already started")
	}
	s.srv = server.NewBgpServer(server.LoggerOption(s.la.logger()))
	go s.srv.Serve()
	port := s.cfg.ListenPort
	if port == 0 {
		port = -1
	}
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        s.cfg.ASN,
		RouterId:   s.cfg.RouterID.String(),
		ListenPort: port,
	}})
	if err != nil {
		return fmt.Errorf("bgp: start as %d router-id %v: %w", s.cfg.ASN, s.cfg.RouterID, err)
	}
	s.started = true
	go s.readdPeers()
	errs := []error{s.syncRoutes(ctx)}
	if !s.cfg.WaitForRoutes || s.routesSet {
		errs = append(errs, s.startPeering(ctx))
	}
	s.log.Info("bgp speaker started", "asn", s.cfg.ASN, "routerID", s.cfg.RouterID,
		"peers", len(s.peers), "routes", len(s.have), "sessionsWaitForRoutes", !s.peering)
	return errors.Join(errs...)
}

// startPeering gives the configured peers to GoBGP, which then opens their sessions. Called
// with s.mu held, after Start, once the RIB holds the routes (as far as GoBGP took them: a route
// it refuses would be refused at every later call too, so that does not hold the sessions back).
// A peer GoBGP refuses is left out, as SetPeers leaves out one it cannot add, until a SetPeers
// lists it again.
func (s *Speaker) startPeering(ctx context.Context) error {
	s.peering, s.peeredAt = true, time.Now()
	var errs []error
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		s.armed[addr] = false
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(s.peers[addr])}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: add peer %v (left out until it is set again): %w", addr, err))
			delete(s.peers, addr)
			continue
		}
		s.addedAt[addr] = time.Now()
	}
	return errors.Join(errs...)
}

// Stop closes every session and stops the server; mode says whether the routes are withdrawn
// first or left at the peers for graceful restart. The speaker cannot be started again.
// Withdraw before the sessions were opened (bgp.Config.WaitForRoutes) with graceful restart on opens
// them with no route, for up to 4 s, so that the peers drop the routes a previous speaker left
// them.
func (s *Speaker) Stop(ctx context.Context, mode StopMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.stopped {
		s.stopped = true
		return nil
	}
	s.stopped = true
	close(s.done)
	for _, d := range s.damp {
		if d.timer != nil {
			d.timer.Stop()
		}
	}
	switch mode {
	case KeepRoutes:
		n := abortSessions(s.peerList(), s.cfg.ListenPort)
		s.log.Info("bgp: closed sessions without notification, peers keep the routes",
			"sessions", n, "gracefulRestart", s.cfg.GracefulRestart)
	default:
		if !s.peering && s.cfg.GracefulRestart > 0 && len(s.peers) > 0 {
			s.flushStale(ctx)
			break
		}
		before := s.withdrawWatch(ctx)
		s.want = map[netip.Prefix]bgp.Route{}
		if err := s.syncRoutes(ctx); err != nil {
			s.log.Warn("bgp: withdraw before stop", "err", err)
		}
		s.waitWithdrawn(ctx, before)
		if s.cfg.GracefulRestart > 0 && time.Since(s.peeredAt) < justPeered {
			// Sessions opened moments ago and not up yet: their peers may still hold a
			// previous speaker's routes, which only their End-of-RIB takes away. (A session
			// that is down later is not waited for: its End-of-RIB went out when it was up.)
			s.waitEndOfRIB(ctx, s.unestablished(ctx))
		}
	}
	if err := s.srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		return fmt.Errorf("bgp: stop: %w", err)
	}
	s.srv.Stop()
	s.log.Info("bgp speaker stopped", "withdrawn", mode == Withdraw)
	return nil
}

// flushStale is Stop(Withdraw) before the sessions were opened (bgp.Config.WaitForRoutes, no
// routes yet): the peers may still hold the routes of a previous speaker under graceful
// restart, and only a session can take them away. It opens the sessions with an empty RIB and
// waits for their End-of-RIB (waitEndOfRIB). Called with s.mu held.
func (s *Speaker) flushStale(ctx context.Context) {
	s.want = map[netip.Prefix]bgp.Route{}
	err := errors.Join(s.syncRoutes(ctx), s.startPeering(ctx))
	if err != nil {
		s.log.Warn("bgp: open sessions to withdraw stale routes", "err", err)
	}
	missed := s.waitEndOfRIB(ctx, s.unestablished(ctx))
	s.log.Info("bgp: opened sessions to withdraw the routes peers may keep from before the restart",
		"peers", len(s.peers), "notReached", missed)
}

// unestablished returns the configured peers whose sessions are not established, passive ones
// aside (GoBGP never dials them: no session would come within a wait). Called with s.mu held.
func (s *Speaker) unestablished(ctx context.Context) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for addr, p := range s.peers {
		if !p.Passive {
			out[addr] = true
		}
	}
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil &&
			p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED {
			delete(out, a.Unmap())
		}
	})
	return out
}

// waitEndOfRIB waits, at most flushWait or until ctx ends, until every peer in pending has an
// established session that has sent its first UPDATE (with graceful restart negotiated GoBGP
// sends an End-of-RIB per family at once, even with nothing to announce: a helper then drops
// every stale route), or whose peer did not offer graceful restart (it kept nothing). It
// returns how many it gave up on. Called with s.mu held.
func (s *Speaker) waitEndOfRIB(ctx context.Context, pending map[netip.Addr]bool) int {
	deadline := time.Now().Add(flushWait)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
			if err == nil && p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED &&
				(p.GetState().GetMessages().GetSent().GetUpdate() > 0 || !remoteGR(p)) {
				delete(pending, a.Unmap())
			}
		})
		if len(pending) > 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return len(pending)
}

// justPeered is how long after the sessions were opened Stop(Withdraw) still waits for those
// not yet up (waitEndOfRIB): their first attempt comes 1–2 s after, a retry connectRetry later.
const justPeered = 10 * time.Second

// flushWait bounds waitEndOfRIB: GoBGP makes its first connection attempt 1–2 s after a peer
// is added, and the session needs a few round trips more.
const flushWait = 4 * time.Second

// withdrawWatch returns, for every established peer that has routes of its family to
// withdraw, the UPDATE messages sent to it so far: waitWithdrawn waits for that count to grow.
// Called with s.mu held, before the withdrawal.
func (s *Speaker) withdrawWatch(ctx context.Context) map[netip.Addr]uint64 {
	fams := map[bool]bool{} // is4 → some route of that family is announced
	for pfx := range s.have {
		fams[pfx.Addr().Is4()] = true
	}
	out := map[netip.Addr]uint64{}
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil || p.GetState().GetSessionState() != api.PeerState_SESSION_STATE_ESTABLISHED || !fams[a.Unmap().Is4()] {
			return
		}
		out[a.Unmap()] = p.GetState().GetMessages().GetSent().GetUpdate()
	})
	return out
}

// waitWithdrawn waits (at most 1 s, or until ctx ends) until every peer in before has been
// sent an UPDATE since (GoBGP counts a message once it is written to the socket), or is no
// longer established: the withdrawals are on the wire before the sessions close. GoBGP sends
// the Cease NOTIFICATION straight from the session's goroutine, not after what is queued.
//
// ListPeer's "advertised" count cannot be used for this: it is computed from the RIB, not from
// what was sent, and for a peer with graceful restart it includes one End-of-RIB per family,
// so it never reaches 0 (that made every Stop(Withdraw) wait the whole second).
func (s *Speaker) waitWithdrawn(ctx context.Context, before map[netip.Addr]uint64) {
	deadline := time.Now().Add(time.Second)
	for len(before) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
			if err != nil {
				return
			}
			n, ok := before[a.Unmap()]
			if ok && (p.GetState().GetSessionState() != api.PeerState_SESSION_STATE_ESTABLISHED ||
				p.GetState().GetMessages().GetSent().GetUpdate() > n) {
				delete(before, a.Unmap())
			}
		})
		if len(before) > 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// SetRoutes makes routes the complete set of announced routes: new and changed routes are
// announced, routes no longer listed are withdrawn, unchanged ones are left alone. Before
// Start it only records them; with bgp.Config.WaitForRoutes the first call after Start also opens
// the sessions. Each route must be a host route (see bgp.Route.Validate); an invalid list changes
// nothing.
func (s *Speaker) SetRoutes(routes []bgp.Route) error {
	want := make(map[netip.Prefix]bgp.Route, len(routes))
	var errs []error
	for _, r := range routes {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := want[r.Prefix]; dup {
			errs = append(errs, fmt.Errorf("route %v: listed twice", r.Prefix))
			continue
		}
		want[r.Prefix] = r.Clone()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bgp: set routes: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("bgp: set routes: speaker stopped")
	}
	s.want = want
	s.routesSet = true
	if !s.started {
		return nil
	}
	err := s.syncRoutes(context.Background())
	if !s.peering {
		s.log.Info("bgp: first routes set, opening sessions", "peers", len(s.peers), "routes", len(s.have))
		err = errors.Join(err, s.startPeering(context.Background()))
	}
	return err
}

// syncRoutes brings GoBGP's RIB (have) to want. Called with s.mu held, after Start.
func (s *Speaker) syncRoutes(ctx context.Context) error {
	var errs []error
	for _, pfx := range slices.SortedFunc(maps.Keys(s.have), netip.Prefix.Compare) {
		old := s.have[pfx]
		if _, ok := s.want[pfx]; ok {
			continue
		}
		p, err := path(old)
		if err == nil {
			err = s.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{p}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("withdraw %v: %w", pfx, err))
			continue
		}
		delete(s.have, pfx)
		s.log.Info("bgp: withdrew route", "prefix", pfx)
	}
	for _, pfx := range slices.SortedFunc(maps.Keys(s.want), netip.Prefix.Compare) {
		r := s.want[pfx]
		if old, ok := s.have[pfx]; ok && old.Equal(r) {
			continue
		}
		// A changed route replaces the old one: same prefix, same (local) source.
		p, err := path(r)
		if err == nil {
			var rs []apiutil.AddPathResponse
			if rs, err = s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}}); err == nil && len(rs) == 1 {
				err = rs[0].Error
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("announce %v: %w", pfx, err))
			continue
		}
		s.have[pfx] = r
		s.log.Info("bgp: announced route", "prefix", pfx)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	return nil
}

// Routes returns the routes announced now (in GoBGP's RIB), sorted by prefix.
func (s *Speaker) Routes() []bgp.Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bgp.Route, 0, len(s.have))
	for _, pfx := range slices.SortedFunc(maps.Keys(s.have), netip.Prefix.Compare) {
		out = append(out, s.have[pfx].Clone())
	}
	return out
}

// SetPeers makes peers the complete set of neighbours: new ones are added, missing ones
// removed (their sessions closed with a Cease), changed ones (any field, or the content of
// the password file) re-added. Unchanged sessions are not touched. An invalid list or an
// unreadable password file changes nothing. Before the sessions are opened (Start, or the
// first SetRoutes with bgp.Config.WaitForRoutes) it only records the peers.
func (s *Speaker) SetPeers(peers []bgp.Peer) error {
	next := make(map[netip.Addr]peerEntry, len(peers))
	var errs []error
	for _, p := range peers {
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := next[p.Address]; dup {
			errs = append(errs, fmt.Errorf("peer %v: listed twice", p.Address))
			continue
		}
		if p.Passive && s.cfg.ListenPort <= 0 {
			errs = append(errs, fmt.Errorf("peer %v: passive needs listenPort", p.Address))
			continue
		}
		pw, err := password(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next[p.Address] = peerEntry{p, pw}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bgp: set peers: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("bgp: set peers: speaker stopped")
	}
	if !s.peering {
		s.peers = next
		return nil
	}
	ctx := context.Background()
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		if n, ok := next[addr]; ok && n == s.peers[addr] {
			continue
		}
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
			errs = append(errs, fmt.Errorf("remove peer %v: %w", addr, err))
			continue
		}
		delete(s.peers, addr)
		s.la.forget(addr)
		if d := s.damp[addr]; d != nil && d.timer != nil {
			d.timer.Stop()
		}
		delete(s.damp, addr)
		s.log.Info("bgp: removed peer", "peer", addr)
	}
	for _, addr := range slices.SortedFunc(maps.Keys(next), netip.Addr.Compare) {
		if _, ok := s.peers[addr]; ok {
			continue
		}
		s.armed[addr] = false
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(next[addr])}); err != nil {
			errs = append(errs, fmt.Errorf("add peer %v: %w", addr, err))
			continue
		}
		s.addedAt[addr] = time.Now()
		s.peers[addr] = next[addr]
		s.log.Info("bgp: added peer", "peer", addr, "asn", next[addr].ASN)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bgp: set peers: %w", err)
	}
	return nil
}

// readdPeers re-adds (DeletePeer, AddPeer) the peers the log handler asks for, until Stop:
//   - a peer whose BFD session went down. GoBGP resets the BGP session itself when BFD goes
//     down, by queueing a Cease NOTIFICATION to the session; but a session that is not
//     established at that moment (its hold timer expired first, or it is reconnecting) keeps it
//     queued, and the next session to come up sends it at once and goes down. Against BIRD,
//     which stops BFD when its session goes down, that loops: BFD expires again while BGP
//     reconnects, and so on (seen in TestBIRDBFD). A re-added peer starts with nothing queued,
//     and its BFD session restarts with it. BFD flaps are dampened here (noteBFDDown).
//   - a peer whose session went down after steadyUptime: GoBGP waits 5 s in idle before it
//     reconnects after any session but the first (its idle hold time is reset to 5 s after one
//     use, except when the peer's NOTIFICATION was an administrative reset), so a router that
//     disabled and re-enabled the session got it back after 0.6 s or ~6 s depending on what came
//     before. A re-added peer reconnects at once, then every connectRetry (TestBIRDRepeer).
func (s *Speaker) readdPeers() {
	for {
		var r readd
		select {
		case <-s.done:
			return
		case r = <-s.la.readd:
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		e, ok := s.peers[r.addr]
		if r.why == "arm" {
			if ok && s.peering && !r.at.Before(s.addedAt[r.addr]) && e.BFD.Enabled && !s.armed[r.addr] {
				s.armed[r.addr] = true
				if !s.suspended(r.addr) {
					s.la.resetBFD(r.addr)
					if _, err := s.srv.UpdatePeer(context.Background(), &api.UpdatePeerRequest{Peer: s.apiPeer(e)}); err != nil {
						s.log.Error("bgp: turn BFD on", "peer", r.addr, "err", err)
					}
				}
			}
			s.mu.Unlock()
			continue
		}
		if ok && s.peering && !r.at.Before(s.addedAt[r.addr]) {
			if r.why == "bfd down" {
				s.noteBFDDown(r.addr, e)
			}
			ctx := context.Background()
			err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: r.addr.String()})
			if err == nil {
				s.armed[r.addr] = false
				s.la.resetBFD(r.addr)
				err = s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(e)})
			}
			if err != nil {
				s.log.Error("bgp: re-add peer (left out until it is set again)", "peer", r.addr, "why", r.why, "err", err)
				delete(s.peers, r.addr)
			} else {
				s.addedAt[r.addr] = time.Now()
				s.log.Info("bgp: peer re-added: a fresh session", "peer", r.addr, "why", r.why)
			}
		}
		s.mu.Unlock()
	}
}

// noteBFDDown records a BFD down of peer e and suspends its BFD when it flaps: BFDFlapLimit
// downs within BFDFlapWindow. The re-add that follows then runs the session without BFD; a
// timer turns BFD on again after the hold-down (restoreBFD). Called with s.mu held.
func (s *Speaker) noteBFDDown(addr netip.Addr, e peerEntry) {
	now := time.Now()
	d := s.damp[addr]
	if d == nil {
		d = &bfdDamp{}
		s.damp[addr] = d
	}
	keep := d.downs[:0]
	for _, t := range d.downs {
		if now.Sub(t) < bgp.BFDFlapWindow {
			keep = append(keep, t)
		}
	}
	d.downs = append(keep, now)
	if len(d.downs) < bgp.BFDFlapLimit || !d.until.IsZero() {
		return
	}
	base := e.BFD.WithDefaults().HoldDown
	hold := base
	if !d.ended.IsZero() && now.Sub(d.ended) < 10*d.holdDown {
		hold = min(2*d.holdDown, 16*base)
	}
	d.downs, d.holdDown, d.until = nil, hold, now.Add(hold)
	d.timer = time.AfterFunc(hold, func() { s.restoreBFD(addr) })
	s.la.setSuspended(addr, true)
	s.log.Warn("bfd flapping: suspended, the session runs on its hold timer", "peer", addr,
		"downs", bgp.BFDFlapLimit, "within", bgp.BFDFlapWindow, "for", hold)
}

// restoreBFD ends peer addr's BFD suspension: BFD is turned on again (UpdatePeer: the BGP
// session is not reset).
func (s *Speaker) restoreBFD(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.damp[addr]
	if d == nil || d.until.IsZero() || s.stopped {
		return
	}
	d.until, d.ended = time.Time{}, time.Now()
	s.la.setSuspended(addr, false)
	e, ok := s.peers[addr]
	if !ok || !s.peering {
		return
	}
	if _, err := s.srv.UpdatePeer(context.Background(), &api.UpdatePeerRequest{Peer: s.apiPeer(e)}); err != nil {
		s.log.Error("bgp: turn BFD on again", "peer", addr, "err", err)
		return
	}
	s.log.Info("bfd: suspension over, BFD on again", "peer", addr, "after", d.holdDown)
}

// peerList returns the configured peers. Called with s.mu held.
func (s *Speaker) peerList() []bgp.Peer {
	out := make([]bgp.Peer, 0, len(s.peers))
	for _, addr := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		out = append(out, s.peers[addr].Peer)
	}
	return out
}

// apiPeer is the GoBGP configuration of one peer.
func (s *Speaker) apiPeer(e peerEntry) *api.Peer {
	p := e.WithDefaults()
	retry := uint64(p.ConnectRetry / time.Second)
	afi := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: apiFamily(p.Address), Enabled: true}}
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    e.password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:           retry,
			HoldTime:               uint64(p.HoldTime / time.Second),
			KeepaliveInterval:      uint64(p.KeepaliveTime / time.Second),
			IdleHoldTimeAfterReset: retry,
		}},
		Transport: &api.Transport{
			RemotePort:  uint32(p.Port),
			PassiveMode: p.Passive,
		},
		AfiSafis: []*api.AfiSafi{afi},
	}
	if p.LocalAddress.IsValid() {
		ap.Transport.LocalAddress = p.LocalAddress.String()
	}
	if p.MultihopTTL > 0 {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.MultihopTTL)}
	}
	if gr := s.cfg.GracefulRestart; gr > 0 {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(gr / time.Second)}
		afi.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	if p.GTSM {
		// GoBGP sends with TTL 255 and sets IP_MINTTL 255 on the session's socket (dialled,
		// or accepted: before the OPEN is read).
		ap.TtlSecurity = &api.TtlSecurity{Enabled: true, TtlMin: 255}
	}
	if p.BFD.Enabled && !p.ExternalBFD && s.armed[p.Address] && !s.suspended(p.Address) {
		b := p.BFD.WithDefaults()
		ap.Bfd = &api.BfdPeerConfig{
			Enabled:                  true,
			Port:                     bfdPort,
			DesiredMinimumTxInterval: uint32(b.TransmitInterval / time.Microsecond),
			RequiredMinimumReceive:   uint32(b.ReceiveInterval / time.Microsecond),
			DetectionMultiplier:      uint32(b.Multiplier),
		}
	}
	return ap
}

// bfdPort is single-hop BFD's UDP port (RFC 5881).
const bfdPort = 3784

// apiFamily is the GoBGP API's address family of a session to addr.
func apiFamily(addr netip.Addr) *api.Family {
	if addr.Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}
