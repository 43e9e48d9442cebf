// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/l2"
	"github.com/xlb-dev/xlb/lb/l2/announce"
)

// L2 mode (config section l2, docs/l2.md): a goroutine sends this gateway's heartbeat to every
// peer each interval and follows theirs; after each heartbeat, each change of what this
// gateway can serve, and each interval, it computes the owners of the VIPs (lb/l2) and hands
// the ones this gateway owns to the responder (lb/l2/announce), which answers ARP and NDP for
// them and announces each take-over.

// conflictHold is how long a VIP answered by a host that is not an xlb gateway of the segment
// stays refused after the last answer seen.
const conflictHold = 30 * time.Second

// l2Mode is the L2 announcer of a gateway.
type l2Mode struct {
	cfg  *config.L2
	log  *slog.Logger
	name string
	resp *announce.Responder
	conn *net.UDPConn
	wake chan struct{}
	// start is when the announcer started: it claims nothing for DeadAfter, to hear the
	// peers' claims first (a restarted gateway must not take every VIP at once).
	start time.Time

	mu sync.Mutex
	// candidates are the VIPs this gateway can serve (set by each reconcile); ready says one
	// reconcile has been applied.
	candidates map[netip.Addr]bool
	ready      bool
	// probed: candidate VIPs → when their duplicate address probe ends (they are eligible
	// after it, unless another host answered).
	probed map[netip.Addr]time.Time
	// members follows the peers (owned by the run goroutine, read under mu for status).
	members l2.Members
	// owned are the VIPs this gateway answers for; owners the last computation's owners;
	// duplicates the VIPs claimed by a peer too; conflicts those refused because a host that
	// is no gateway answers for them.
	owned      map[netip.Addr]bool
	owners     map[netip.Addr]netip.Addr
	duplicates map[netip.Addr]bool
	conflicts  map[netip.Addr]announce.Sighting
	// gatewayMACs are the MACs every peer ever heard has announced: their answers are a
	// hand-over or a split brain, never a conflict (a dead peer's last answers included).
	gatewayMACs map[[6]byte]bool
	seq         uint32

	ownedGauge, dupGauge, peersGauge, conflictGauge prometheus.Gauge
	takeovers, dupEvents                            prometheus.Counter
	rxErrors                                        *prometheus.CounterVec
}

func newL2Mode(c *config.L2, name string, log *slog.Logger, reg prometheus.Registerer) (*l2Mode, error) {
	resp, err := announce.Listen(c.Interface, log)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.Address, c.Port)))
	if err != nil {
		_ = resp.Close()
		return nil, fmt.Errorf("l2: heartbeat socket on %v port %d: %w", c.Address, c.Port, err)
	}
	m := &l2Mode{cfg: c, log: log, name: name, resp: resp, conn: conn, wake: make(chan struct{}, 1), start: time.Now(),
		candidates: map[netip.Addr]bool{}, probed: map[netip.Addr]time.Time{}, members: l2.Members{DeadAfter: c.DeadAfter()},
		owned: map[netip.Addr]bool{}, owners: map[netip.Addr]netip.Addr{}, duplicates: map[netip.Addr]bool{},
		conflicts: map[netip.Addr]announce.Sighting{}, gatewayMACs: map[[6]byte]bool{},
		ownedGauge:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_l2_owned_vips", Help: "VIPs this gateway answers ARP/NDP for."}),
		dupGauge:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_l2_duplicate_vips", Help: "VIPs this gateway owns that a peer gateway claims too (split brain; harmless: the Maglev tables are the same)."}),
		peersGauge:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_l2_peers_alive", Help: "Peer gateways whose heartbeats arrive."}),
		conflictGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xlb_l2_conflict_vips", Help: "VIPs refused because a host that is not a gateway of the segment answers for them."}),
		takeovers:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xlb_l2_takeovers_total", Help: "VIPs this gateway took (and announced)."}),
		dupEvents:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xlb_l2_duplicates_total", Help: "Times a VIP this gateway owns was found claimed by a peer too."}),
		rxErrors:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xlb_l2_heartbeat_errors_total", Help: "Heartbeats refused, by reason."}, []string{"reason"}),
	}
	reg.MustRegister(m.ownedGauge, m.dupGauge, m.peersGauge, m.conflictGauge, m.takeovers, m.dupEvents, m.rxErrors)
	return m, nil
}

// setCandidates records the VIPs this gateway can serve (a reconcile's), without its own
// addresses (a VIP configured on an interface is refused: the kernel answers for it, and the
// gateway's own sockets would too).
func (m *l2Mode) setCandidates(vips map[netip.Addr]bool, own []netip.Addr) {
	local := map[netip.Addr]bool{}
	for _, a := range own {
		local[a] = true
	}
	m.mu.Lock()
	changed := !m.ready
	m.ready = true
	next := map[netip.Addr]bool{}
	for v := range vips {
		if local[v] {
			if !m.candidates[v] {
				m.log.Error("l2: VIP refused: it is configured on an interface of this gateway", "vip", v)
			}
			continue
		}
		next[v] = true
		if !m.candidates[v] {
			changed = true
		}
	}
	changed = changed || len(next) != len(m.candidates)
	m.candidates = next
	m.mu.Unlock()
	if changed {
		m.trigger()
	}
}

func (m *l2Mode) trigger() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// run sends and receives heartbeats and keeps the ownership until ctx ends; then it stops
// answering (the next owner's announcements replace this gateway's MAC at the clients).
func (m *l2Mode) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		_ = m.conn.Close()
		wg.Wait()
		_ = m.resp.Close()
	}()
	heard := make(chan heardHB, 64)
	wg.Add(1)
	go func() { defer wg.Done(); m.receive(ctx, heard) }()
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	// The start hold ends: the first computation may claim.
	hold := time.NewTimer(m.cfg.DeadAfter())
	defer hold.Stop()
	for {
		send := false
		select {
		case <-ctx.Done():
			return
		case h := <-heard:
			m.mu.Lock()
			changed := m.members.Heard(h.from, h.hb, time.Now())
			m.mu.Unlock()
			if !changed {
				continue
			}
		case <-m.wake:
		case <-hold.C:
		case <-tick.C:
			send = true
		}
		if m.compute(time.Now()) {
			send = true
		}
		if send {
			m.sendHeartbeat()
		}
	}
}

type heardHB struct {
	from netip.Addr
	hb   l2.Heartbeat
}

// receive reads heartbeats: only from a configured peer's address, and parsed as hostile input.
func (m *l2Mode) receive(ctx context.Context, out chan<- heardHB) {
	peers := map[netip.Addr]bool{}
	for _, p := range m.cfg.Peers {
		peers[p] = true
	}
	buf := make([]byte, 64<<10)
	for {
		n, from, err := m.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			m.log.Warn("l2: read a heartbeat", "error", err)
			time.Sleep(m.cfg.HeartbeatInterval)
			continue
		}
		src := from.Addr().Unmap()
		if !peers[src] {
			m.rxErrors.WithLabelValues("unknown_peer").Inc()
			continue
		}
		hb, err := l2.ParseHeartbeat(buf[:n])
		if err != nil {
			m.rxErrors.WithLabelValues("malformed").Inc()
			m.log.Debug("l2: malformed heartbeat", "from", src, "error", err)
			continue
		}
		select {
		case out <- heardHB{src, hb}:
		case <-ctx.Done():
			return
		}
	}
}

// eligible returns the candidates this gateway may own at now: probed for duplicates (a probe
// is started for a new one), and not answered by a host that is no gateway of the segment.
// m.mu held.
func (m *l2Mode) eligible(now time.Time, peerMACs map[[6]byte]bool) map[netip.Addr]bool {
	seen := m.resp.Seen()
	out := map[netip.Addr]bool{}
	for v := range m.probed {
		if !m.candidates[v] {
			delete(m.probed, v)
		}
	}
	for v := range m.candidates {
		end, ok := m.probed[v]
		if !ok {
			m.probed[v] = now.Add(announce.ProbeWait)
			m.resp.Probe(v)
			continue
		}
		if s, ok := seen[v]; ok && !peerMACs[s.MAC] && now.Sub(s.At) < conflictHold {
			if _, known := m.conflicts[v]; !known {
				m.log.Error("l2: VIP refused: another host answers for it", "vip", v, "mac", net.HardwareAddr(s.MAC[:]).String())
			}
			m.conflicts[v] = s
			continue
		}
		if _, known := m.conflicts[v]; known {
			m.log.Info("l2: VIP no longer answered by another host", "vip", v)
			delete(m.conflicts, v)
		}
		if now.After(end) {
			out[v] = true
		}
	}
	for v := range m.conflicts {
		if !m.candidates[v] {
			delete(m.conflicts, v)
		}
	}
	return out
}

// compute works out the owners and applies this gateway's share; it reports whether what this
// gateway claims changed (its peers should hear it now).
func (m *l2Mode) compute(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.members.Expire(now) {
		m.log.Warn("l2: peer gateway silent: dead", "peer", p.ID, "name", p.Name, "silent", now.Sub(p.At).Round(time.Millisecond))
	}
	alive := m.members.Alive(now)
	m.peersGauge.Set(float64(len(alive)))
	members := make([]l2.Member, 0, len(alive)+1)
	vips := map[netip.Addr]bool{}
	for _, p := range alive {
		m.gatewayMACs[p.MAC] = true
		mm := p.AsMember()
		members = append(members, mm)
		for v := range mm.Serves {
			vips[v] = true
		}
		for v := range mm.Claims {
			vips[v] = true
		}
	}
	self := l2.Member{ID: m.cfg.Address, Serves: m.eligible(now, m.gatewayMACs), Claims: m.owned}
	for v := range self.Serves {
		vips[v] = true
	}
	members = append(members, self)
	holding := now.Sub(m.start) < m.cfg.DeadAfter() && len(m.cfg.Peers) > 0
	list := make([]netip.Addr, 0, len(vips))
	for v := range vips {
		list = append(list, v)
	}
	owners := l2.Owners(list, members, m.cfg.Failback)
	dups := map[netip.Addr]bool{}
	for _, v := range l2.Duplicates(m.cfg.Address, members) {
		dups[v] = true
		if !m.duplicates[v] {
			m.dupEvents.Inc()
			m.log.Warn("l2: a peer gateway claims a VIP this gateway owns (split brain; resolved by rank)", "vip", v,
				"owner_now", owners[v])
		}
		if owners[v] == m.cfg.Address {
			// The other's announcements may have been the clients' last word.
			m.resp.Reannounce(v)
		}
	}
	for v := range m.duplicates {
		if !dups[v] {
			m.log.Info("l2: duplicate owner resolved", "vip", v, "owner", owners[v])
		}
	}
	m.duplicates = dups
	m.dupGauge.Set(float64(len(dups)))
	m.owners = owners
	next := map[netip.Addr]bool{}
	if !holding {
		for v, o := range owners {
			if o == m.cfg.Address {
				next[v] = true
			}
		}
	}
	changed := false
	for v := range next {
		if !m.owned[v] {
			changed = true
			m.takeovers.Inc()
			m.resp.Forget(v)
			m.log.Info("l2: taking VIP", "vip", v, "interface", m.cfg.Interface)
		}
	}
	for v := range m.owned {
		if !next[v] {
			changed = true
			m.log.Info("l2: releasing VIP", "vip", v, "owner", owners[v])
		}
	}
	if changed {
		m.owned = next
		m.resp.Set(next)
	}
	m.ownedGauge.Set(float64(len(next)))
	m.conflictGauge.Set(float64(len(m.conflicts)))
	return changed
}

// sendHeartbeat sends this gateway's heartbeat to every peer.
func (m *l2Mode) sendHeartbeat() {
	m.mu.Lock()
	m.seq++
	hb := l2.Heartbeat{Seq: m.seq, MAC: m.resp.MAC(), Name: m.name}
	if m.ready {
		hb.Flags |= l2.FlagReady
	}
	now := time.Now()
	for v := range m.candidates {
		if end, ok := m.probed[v]; ok && now.After(end) {
			if _, bad := m.conflicts[v]; !bad {
				hb.Serves = append(hb.Serves, v)
			}
		}
	}
	for v := range m.owned {
		hb.Claims = append(hb.Claims, v)
	}
	m.mu.Unlock()
	slices.SortFunc(hb.Serves, netip.Addr.Compare)
	slices.SortFunc(hb.Claims, netip.Addr.Compare)
	if len(hb.Serves)+len(hb.Claims) > l2.MaxAddresses {
		hb.Serves = hb.Serves[:max(0, l2.MaxAddresses-len(hb.Claims))]
	}
	b, err := hb.Marshal()
	if err != nil {
		m.log.Error("l2: heartbeat", "error", err)
		return
	}
	for _, p := range m.cfg.Peers {
		if _, err := m.conn.WriteToUDPAddrPort(b, netip.AddrPortFrom(p, m.cfg.Port)); err != nil {
			m.log.Debug("l2: send a heartbeat", "peer", p, "error", err)
		}
	}
}

// L2Status is the /l2 document: this gateway, its peers and each VIP's owner.
type L2Status struct {
	Gateway   string        `json:"gateway"`
	Address   string        `json:"address"`
	Interface string        `json:"interface"`
	Failback  bool          `json:"failback"`
	Peers     []L2PeerState `json:"peers"`
	VIPs      []L2VIPState  `json:"vips"`
}

// L2PeerState is a peer gateway as heard.
type L2PeerState struct {
	Address string `json:"address"`
	Name    string `json:"name,omitempty"`
	MAC     string `json:"mac,omitempty"`
	Alive   bool   `json:"alive"`
	Ready   bool   `json:"ready"`
	Claims  int    `json:"claims"`
}

// L2VIPState is one VIP's owner as this gateway computes it.
type L2VIPState struct {
	VIP       string `json:"vip"`
	Owner     string `json:"owner"`
	OwnerName string `json:"ownerName,omitempty"`
	Mine      bool   `json:"mine"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Conflict  string `json:"conflict,omitempty"`
}

func (m *l2Mode) status() L2Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	st := L2Status{Gateway: m.name, Address: m.cfg.Address.String(), Interface: m.cfg.Interface, Failback: m.cfg.Failback}
	names := map[netip.Addr]string{m.cfg.Address: m.name}
	alive := map[netip.Addr]bool{}
	for _, p := range m.members.Alive(now) {
		alive[p.ID] = true
		names[p.ID] = p.Name
		st.Peers = append(st.Peers, L2PeerState{Address: p.ID.String(), Name: p.Name, MAC: net.HardwareAddr(p.MAC[:]).String(),
			Alive: true, Ready: p.Ready(), Claims: len(p.Claims)})
	}
	for _, p := range m.cfg.Peers {
		if !alive[p] {
			st.Peers = append(st.Peers, L2PeerState{Address: p.String()})
		}
	}
	slices.SortFunc(st.Peers, func(a, b L2PeerState) int {
		return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
	})
	vips := map[netip.Addr]bool{}
	for v := range m.owners {
		vips[v] = true
	}
	for v := range m.conflicts {
		vips[v] = true
	}
	for _, v := range sortedAddrs(vips) {
		s := L2VIPState{VIP: v.String(), Mine: m.owned[v], Duplicate: m.duplicates[v]}
		if o, ok := m.owners[v]; ok {
			s.Owner, s.OwnerName = o.String(), names[o]
		}
		if c, ok := m.conflicts[v]; ok {
			s.Conflict = "answered by " + net.HardwareAddr(c.MAC[:]).String()
		}
		st.VIPs = append(st.VIPs, s)
	}
	return st
}

func sortedAddrs(s map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for a := range s {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// serveL2 serves /l2: the L2 announcer's state as JSON (404 without an l2 section).
func (g *Gateway) serveL2(w http.ResponseWriter, _ *http.Request) {
	if g.l2 == nil {
		http.Error(w, "L2 mode is off (no l2 section)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(g.l2.status())
}

// l2Candidates returns the VIPs of desired that L2 mode announces and this gateway can serve:
// inside l2.prefixes, with at least l2.minHealthyBackends backends taking new flows on one of
// their frontends.
func l2Candidates(desired *lb.Desired, c *config.L2) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for f, p := range desired.Frontends {
		a := f.Addr.Unmap()
		if c.Announces(a) && p.Serving >= c.MinHealthyBackends {
			out[a] = true
		}
	}
	return out
}
