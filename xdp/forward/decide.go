// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Action is what a Decision does with a packet.
type Action uint8

// The actions.
const (
	// NotOurs: no frontend and no backend endpoint matches; the packet is not the balancer's.
	NotOurs Action = iota
	// Drop: dropped, for Decision.Reason.
	Drop
	// ToBackend: a client's packet to a VIP, to be sent to a backend: its destination becomes
	// Decision.Addr and Decision.Port (DNAT).
	ToBackend
	// ToClient: a backend's reply, to be sent to its client: its source becomes Decision.Addr
	// and Decision.Port (reverse NAT).
	ToClient
	// Answer: answered by the datapath itself, back to the sender (an echo reply).
	Answer
)

// CTState says what the decision made of a flow's conntrack entry.
type CTState uint8

// The conntrack states.
const (
	// CTNone: no entry, or not looked up (a TCP SYN never uses conntrack).
	CTNone CTState = iota
	// CTUsed: the entry sent the packet to its backend.
	CTUsed
	// CTExpired: idle past its timeout; the flow is balanced again.
	CTExpired
	// CTOtherVIP: made for a frontend this packet is not for; not used.
	CTOtherVIP
	// CTBackendGone: its backend is deleted or down; the flow is balanced again.
	CTBackendGone
)

// String names the state.
func (s CTState) String() string {
	return [...]string{"none", "used", "expired", "other-vip", "backend-gone"}[s]
}

// Decision is where a packet goes, why, and how that was found.
type Decision struct {
	Action Action
	// Reason is the verdict's reason: ReasonNATForward, ReasonNATReverse or a drop.
	Reason Reason
	// VIP and Frontend are the frontend the packet is for (ToBackend) or from (ToClient).
	VIP      datapath.VIPID
	Frontend datapath.Frontend
	// Backend is the backend chosen (ToBackend).
	Backend datapath.BackendID
	// Addr and Port are the rewrite: the backend's address and port (ToBackend; port 0 keeps
	// the client's destination port) or the VIP's address and service port (ToClient).
	Addr [16]byte
	Port uint16
	// NewFlow: a TCP SYN, or the first datagram of a UDP flow (traffic's new flows): one
	// without a conntrack entry or a first datagram's entry in the handshake table.
	NewFlow bool
	// Carry: the backend is of direct server return and the packet opens its flow here (no
	// conntrack entry): it carries its frontend to the backend's node, Frontend.Addr and
	// CarryPort (the port the client sent to) in the carrier (datapath.Carrier*).
	Carry     bool
	CarryPort uint16

	// Conntrack is what became of the flow's conntrack entry.
	Conntrack CTState
	// Handshake: the backend is the one the handshake's SYN went to.
	Handshake bool
	// FirstDatagram: the backend is the one the flow's first datagram went to (its entry in
	// the handshake table): this datagram is its second, and creates its conntrack entry.
	FirstDatagram bool
	// Maglev: the backend is the Maglev pick: Hash % M is Slot (M 0: no table).
	Maglev         bool
	Hash           uint32
	Slot, M        int
	Reselected     bool // an established flow was balanced again (ReasonCTReselect)
	RateLimited    bool // the flow was not recorded in conntrack (ReasonCTRateLimited)
	MidFlowLimited bool // the TCP flow, its handshake not seen here, was not recorded (ReasonCTMidFlowLimited)
	HSRateLimited  bool // the SYN was not recorded in the handshake table (ReasonHandshakeLimited)
	SYNKept        bool // a SYN on a live flow's tuple went to that flow's backend (ReasonCTSYNKept)
	HandshakeHit   bool // counted as ReasonHandshakeHit
	ReverseByHash  bool // a reply's frontend re-derived by Maglev (ReasonNATReverseMaglev)
	SourceRejected bool // the client is outside the VIP's source ranges
}

func drop(d Decision, r Reason) Decision {
	d.Action, d.Reason = Drop, r
	return d
}

// lookupVIP returns the frontend of a packet: {dst, dport, proto}, then {dst, 0, proto}.
func (b *Balancer) lookupVIP(p *Packet) *vip {
	k := feKey{addr: p.Dst, port: p.DstPort, proto: uint8(p.Proto), v6: p.V6}
	if v := b.vips[k]; v != nil {
		return v
	}
	k.port = 0
	return b.vips[k]
}

// usable returns backend id unless it is unknown or down (backend_get).
func (b *Balancer) usable(id datapath.BackendID) (backend, bool) {
	if id == 0 {
		return backend{}, false
	}
	be, ok := b.backends[id]
	if !ok || be.Down {
		return backend{}, false
	}
	return be, true
}

// ctVIP returns VIP id if it still is the frontend p is addressed to (ct_vip).
func (b *Balancer) ctVIP(p *Packet, id datapath.VIPID) *vip {
	v := b.vipByID[id]
	if v == nil {
		return nil
	}
	k := &v.key
	if k.v6 != p.V6 || k.proto != uint8(p.Proto) || (k.port != 0 && k.port != p.DstPort) || k.addr != p.Dst {
		return nil
	}
	return v
}

// budget is one of the flood budgets (enum budget_kind in budget.h).
type budget int

const (
	budgetNewFlow   budget = iota // conntrack: a datagram, or a TCP packet completing a handshake seen here
	budgetMidFlow                 // conntrack: a TCP packet of a flow whose handshake was not seen here
	budgetHandshake               // handshakes, and the reverse entry an ambiguous backend's SYN-ACK needs
	numBudgets
)

// budgetTake takes one unit of budget k (budget_take): false when the window's budget is spent.
// One window for the whole Balancer (the XDP datapath's are global too, over all CPUs).
func (b *Balancer) budgetTake(now int64, k budget) bool {
	limit := b.settings.NewFlowRate
	if k == budgetMidFlow {
		limit = b.settings.MidFlowRate()
	}
	if limit < 0 {
		return true
	}
	if now-b.budgetStart >= int64(rateWindow) || now < b.budgetStart {
		b.budgetStart, b.budgetTaken = now, [numBudgets]int64{}
	}
	if b.budgetTaken[k] >= limit {
		return false
	}
	b.budgetTaken[k]++
	return true
}

// hsBackend returns the backend of handshake entry h if a packet of VIP id may use it
// (hs_backend): fresh, same VIP, backend usable, and the same connection (the SYN's sequence
// number, or within hsSeqWindow past it for a later packet).
func (b *Balancer) hsBackend(h hsEntry, ok bool, id datapath.VIPID, now int64, syn bool, seq uint32) datapath.BackendID {
	if !ok || h.vip != id || now-h.synSeen > int64(HandshakeTimeout) {
		return 0
	}
	if _, ok := b.usable(h.backend); !ok {
		return 0
	}
	if syn && seq != h.isn || !syn && seq-h.isn >= hsSeqWindow {
		return 0
	}
	return h.backend
}

// udpBackend returns the backend of a datagram flow's first-datagram entry h if a datagram of VIP
// id may use it (hs_udp_take): fresh (within the handshake and the datagram timeouts), same VIP,
// backend usable.
func (b *Balancer) udpBackend(h hsEntry, ok bool, id datapath.VIPID, now int64) datapath.BackendID {
	if now-h.synSeen > int64(b.settings.Timeout(datapath.UDP, false)) {
		return 0
	}
	return b.hsBackend(h, ok, id, now, false, h.isn) // no sequence number: the entry's own
}

// pick returns the Maglev pick of a new flow of p to frontend v, with the hash and slot.
func (b *Balancer) pick(v *vip, p *Packet, d *Decision) datapath.BackendID {
	d.Maglev, d.M = true, len(v.table)
	if len(v.table) == 0 {
		return 0
	}
	d.Hash = datapath.FlowHash(b.settings.Seed, p.SrcAddr(), p.SrcPort, p.DstPort, p.Proto,
		v.cfg.Affinity == datapath.AffinityClientIP)
	d.Slot = int(d.Hash % uint32(len(v.table)))
	return v.table[d.Slot]
}

// admit checks what every packet to VIP v must pass: its source ranges and an unexpired TTL.
func admit(v *vip, p *Packet, d *Decision) (Reason, bool) {
	if len(v.cfg.SourceRanges) > 0 {
		src := p.SrcAddr()
		allowed := false
		for _, r := range v.cfg.SourceRanges {
			if r.Contains(src) {
				allowed = true
				break
			}
		}
		if !allowed {
			d.SourceRejected = true
			return ReasonDropSrcRange, false
		}
	}
	if p.TTL <= 1 {
		return ReasonDropTTL, false
	}
	return 0, true
}

// Forward decides a client's packet to a VIP (lb_forward) at time now (the caller's monotonic
// clock, the same for every call), and records what the flow state must remember: conntrack
// and handshake entries, and the traffic counters of a packet sent to a backend. The Action is
// NotOurs when p is addressed to no frontend (it may be a backend's reply: see Reply).
func (b *Balancer) Forward(p *Packet, now time.Duration) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d Decision
	t := int64(now)
	if p.Carrier && b.vipAddrs[addrKey{p.Dst, p.V6}] > 0 {
		// Only a gateway writes carriers: kept on the DNATed packet, a client's would make the
		// Pod's node rewrite its replies for a frontend of the client's choosing.
		return drop(d, ReasonDropCarrierForged)
	}
	if p.UDPNoChecksum && p.V6 && p.Proto == datapath.UDP && b.lookupVIP(p) != nil {
		return drop(d, ReasonDropUDP6ZeroCsum)
	}
	syn := p.syn()
	closing := p.TCPFlags&(TCPFIN|TCPRST) != 0 && p.Proto == datapath.TCP
	fk := p.key()
	ct, ctFound := b.ct[fk]
	if !syn && ctFound && !ct.reverse {
		if v := b.ctVIP(p, ct.vip); v != nil {
			be, usable := b.usable(ct.backend)
			switch {
			case t-ct.lastSeen > int64(b.settings.Timeout(p.Proto, ct.closing)):
				d.Conntrack = CTExpired
			case !usable:
				d.Conntrack = CTBackendGone
			default:
				d.Conntrack = CTUsed
				ct.closing = ct.closing || closing
				ct.lastSeen = t
				b.ct[fk] = ct
				return b.established(p, v, ct.backend, be, false, d)
			}
			d.Reselected = true
		} else {
			d.Conntrack = CTOtherVIP
		}
	}
	v := b.lookupVIP(p)
	if v == nil {
		if b.vipAddrs[addrKey{p.Dst, p.V6}] > 0 {
			// A VIP address, but no service on this port or protocol: never the gateway's own.
			return drop(d, ReasonDropVIPUnserved)
		}
		return d // NotOurs (an entry whose frontend matched p would have found it)
	}
	d.VIP, d.Frontend = v.cfg.ID, v.fe
	if r, ok := b.sideCheck(p); !ok {
		return drop(d, r)
	}
	if r, ok := admit(v, p, &d); !ok {
		return drop(d, r)
	}
	var bid datapath.BackendID
	hs, hsFound := b.hs[fk]
	if syn {
		// A SYN on a live flow's tuple goes to that flow's backend (its challenge ACK answers
		// a spoofed one); only a closing or idle entry is balanced again.
		if ctFound && !ct.reverse && !ct.closing && ct.vip == v.cfg.ID &&
			t-ct.lastSeen <= int64(b.settings.Timeout(p.Proto, false)) {
			if _, usable := b.usable(ct.backend); usable {
				bid, d.SYNKept, hsFound = ct.backend, true, false
			}
		}
	}
	hsHit := false
	if bid == 0 && p.Proto == datapath.TCP {
		bid = b.hsBackend(hs, hsFound, v.cfg.ID, t, syn, p.Seq)
		if bid != 0 {
			d.Handshake, d.HandshakeHit, hsHit = true, true, true
		}
	}
	if bid == 0 && p.Proto != datapath.TCP {
		// A datagram without a conntrack entry: if the flow's first datagram was recorded in
		// the handshake table, this is its second; it goes there, and conntrack takes the flow
		// over (the entry is taken out now, as hs_udp_take does).
		bid = b.udpBackend(hs, hsFound, v.cfg.ID, t)
		if bid != 0 {
			d.FirstDatagram, hsHit, hsFound = true, true, false
			delete(b.hs, fk)
		}
	}
	if bid == 0 {
		bid = b.pick(v, p, &d)
	}
	be, ok := b.usable(bid)
	if !ok {
		d.Backend = bid
		return drop(d, ReasonDropNoBackend)
	}
	revCT := b.needsReverseCT(be, p)
	newFlow := syn || (p.Proto != datapath.TCP && !hsHit)
	if p.Proto != datapath.TCP && !hsHit {
		// The flow's first datagram here: recorded in the handshake table, not in conntrack
		// (hs_udp_record; the table here has no slots to share, so it always takes it), with
		// the reverse entry an ambiguous backend's reply needs, from the new-flow budget.
		b.hsInsert(fk, hsEntry{synSeen: t, backend: bid, vip: v.cfg.ID})
		if revCT && b.budgetTake(t, budgetNewFlow) {
			b.ctStore(fk, t, bid, be, v.cfg.ID, false, true, revCT)
		}
	} else if !syn && hsHit && p.Proto == datapath.TCP {
		// The TCP packet completing a handshake seen here: the XDP datapath keeps the
		// connection in its handshake slot (no conntrack insert, so no budget) until a SYN of
		// another tuple needs the slot and moves it into conntrack. This table has no slots to
		// share: the connection goes to conntrack at once, which is the same to every packet.
		b.ctStore(fk, t, bid, be, v.cfg.ID, closing, false, revCT)
		delete(b.hs, fk)
	} else if !syn {
		// A datagram flow's second datagram, from the new-flow budget; any other TCP packet
		// (an ECMP move, a forged ACK) from the mid-flow one.
		k := budgetNewFlow
		if p.Proto == datapath.TCP && !hsHit {
			k = budgetMidFlow
		}
		switch {
		case b.budgetTake(t, k):
			b.ctStore(fk, t, bid, be, v.cfg.ID, closing, false, revCT)
			if hsFound {
				delete(b.hs, fk)
			}
		case k == budgetMidFlow:
			d.MidFlowLimited = true
		default:
			d.RateLimited = true
		}
	}
	if syn {
		// The handshake entry, refreshed in place for a retransmission, else written from the
		// handshake budget, with the reverse entry an ambiguous backend's SYN-ACK needs.
		again := hsFound && hs.backend == bid && hs.vip == v.cfg.ID && hs.isn == p.Seq
		switch {
		case again:
			hs.synSeen = t
			b.hs[fk] = hs
			b.ctStore(fk, t, bid, be, v.cfg.ID, false, true, revCT)
		case b.budgetTake(t, budgetHandshake):
			b.hsInsert(fk, hsEntry{synSeen: t, backend: bid, vip: v.cfg.ID, isn: p.Seq})
			b.ctStore(fk, t, bid, be, v.cfg.ID, false, true, revCT)
		default:
			d.HSRateLimited = true
		}
		// A SYN on a tuple conntrack still holds starts a new connection: the entry takes the
		// SYN's backend in place.
		if ctFound && !ct.reverse && (ct.backend != bid || ct.vip != v.cfg.ID || ct.closing) {
			ct.backend, ct.vip, ct.closing, ct.lastSeen = bid, v.cfg.ID, false, t
			b.ct[fk] = ct
		}
	}
	// The packets that open a flow here carry the frontend to a DSR backend's node (carry in
	// forward, bpf/xlb.c): a TCP packet without conntrack entry, a datagram without one; not a
	// datagram flow's second, which the node has seen the first of.
	d.Carry, d.CarryPort = be.DSR && (newFlow || p.Proto == datapath.TCP), p.DstPort
	return b.established(p, v, bid, be, newFlow, d)
}

// established checks what every forwarded packet must pass, counts it and sends it to be.
func (b *Balancer) established(p *Packet, v *vip, bid datapath.BackendID, be backend, newFlow bool, d Decision) Decision {
	d.VIP, d.Frontend, d.Backend = v.cfg.ID, v.fe, bid
	if r, ok := b.sideCheck(p); !ok {
		return drop(d, r)
	}
	if r, ok := admit(v, p, &d); !ok {
		return drop(d, r)
	}
	count(b.vipTraffic[v.cfg.ID], p.Len, newFlow)
	count(b.backendTraffic[bid], p.Len, newFlow)
	d.Action, d.Reason, d.Addr, d.Port, d.NewFlow = ToBackend, ReasonNATForward, be.key, be.Port, newFlow
	return d
}

func count(t *datapath.Traffic, n int, newFlow bool) {
	if t == nil {
		return
	}
	t.Packets++
	t.Bytes += uint64(n)
	if newFlow {
		t.NewFlows++
	}
}

// reverseOf returns the reverse NAT entry of a backend endpoint (exact port, then all ports).
func (b *Balancer) reverseOf(addr [16]byte, v6 bool, port uint16, proto uint8) (reverse, bool) {
	k := feKey{addr: addr, port: port, proto: proto, v6: v6}
	if r, ok := b.reverse[k]; ok {
		return r, true
	}
	k.port = 0
	r, ok := b.reverse[k]
	return r, ok
}

// needsReverseCT says whether flows to be must record a reverse conntrack entry: its endpoint
// serves several VIP:ports, so its replies cannot be mapped statelessly.
func (b *Balancer) needsReverseCT(be backend, p *Packet) bool {
	port := be.Port
	if port == 0 {
		port = p.DstPort
	}
	r, ok := b.reverseOf(be.key, be.v6, port, uint8(p.Proto))
	return ok && r.Ambiguous
}

// ctStore records flow fk (unless onlyReverse) and, for an ambiguous endpoint, the reverse
// entry its replies are translated by (ct_store).
func (b *Balancer) ctStore(fk flowKey, now int64, bid datapath.BackendID, be backend, id datapath.VIPID,
	closing, onlyReverse, revCT bool) {
	c := ctEntry{lastSeen: now, backend: bid, vip: id, vipPort: fk.dport, closing: closing}
	if !onlyReverse {
		b.ctInsert(fk, c)
	}
	if revCT {
		port := be.Port
		if port == 0 {
			port = fk.dport
		}
		rk := flowKey{src: be.key, dst: fk.src, sport: port, dport: fk.sport, proto: fk.proto, v6: fk.v6}
		c.backend, c.reverse = 0, true
		b.rctInsert(rk, c)
	}
}

// Reply decides a backend's reply to a client (lb_reverse) at time now. The Action is NotOurs
// when p's source is no backend endpoint (or its VIP is gone). A ToClient decision is not yet
// counted anywhere: the caller sends it, unless its next hop is this host.
func (b *Balancer) Reply(p *Packet, now time.Duration) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d Decision
	r, ok := b.reverseOf(p.Src, p.V6, p.SrcPort, uint8(p.Proto))
	if !ok {
		return d
	}
	if r, ok := b.replySideCheck(p); !ok {
		return drop(d, r)
	}
	v, vport, byHash, ok := b.reverseVIP(r, p, now)
	if !ok {
		return drop(d, ReasonDropReverseNoCT)
	}
	if v == nil {
		return Decision{}
	}
	d.ReverseByHash = byHash
	if r.Ambiguous && !byHash {
		d.Conntrack = CTUsed // its reverse conntrack entry
	}
	d.VIP, d.Frontend = v.cfg.ID, v.fe
	if p.TTL <= 1 {
		return drop(d, ReasonDropTTL)
	}
	d.Action, d.Reason, d.Addr, d.Port = ToClient, ReasonNATReverse, Key(v.fe.Addr), vport
	return d
}

// reverseVIP finds the frontend (and its service port) a reply p of backend endpoint r is from
// (reverse_vip): the live reverse conntrack entry of an ambiguous endpoint (refreshed), else
// the Maglev re-derivation (byHash), else the endpoint's one VIP. ok is false for an ambiguous
// endpoint's reply neither gives; v is nil when the VIP is gone or of the other family.
func (b *Balancer) reverseVIP(r reverse, p *Packet, now time.Duration) (v *vip, vport uint16, byHash, ok bool) {
	var id datapath.VIPID
	if r.Ambiguous {
		rk := p.key()
		c, found := b.rct[rk]
		// Only a live reverse entry: one idle past its timeout (its flow gone, the tuple
		// perhaps reused) is not trusted. One in use is refreshed, as its forward entry is.
		if found && int64(now)-c.lastSeen > int64(b.settings.Timeout(p.Proto, c.closing)) {
			found = false
		}
		if found {
			id, vport = c.vip, c.vipPort
			c.lastSeen = int64(now)
			b.rct[rk] = c
		} else if mid, port, ok := b.reverseMaglev(r, p); ok {
			id, vport, byHash = mid, port, true
		} else {
			return nil, 0, false, false
		}
	} else {
		id, vport = r.VIP, r.port
		if vport == 0 {
			vport = p.SrcPort
		}
	}
	v = b.vipByID[id]
	if v == nil || v.fe.Addr.Is6() != p.V6 {
		return nil, 0, byHash, true
	}
	return v, vport, byHash, true
}

// reverseMaglev finds the one candidate VIP whose Maglev table sends the reply's forward tuple
// to the replying endpoint (reverse_maglev).
func (b *Balancer) reverseMaglev(r reverse, p *Packet) (datapath.VIPID, uint16, bool) {
	var found datapath.VIPID
	var foundPort uint16
	for _, id := range r.Candidates {
		if id == 0 {
			break
		}
		v := b.vipByID[id]
		if v == nil || v.fe.Addr.Is6() != p.V6 || v.fe.Proto != p.Proto {
			continue
		}
		dport := v.fe.Port
		if dport == 0 {
			dport = p.SrcPort
		}
		// The forward packet: client -> VIP, hashed as Forward hashes a new flow.
		fwd := Packet{V6: p.V6, Proto: p.Proto, Src: p.Dst, SrcPort: p.DstPort, DstPort: dport}
		// Any backend with the id, down or not, as reverse_maglev reads the backends map.
		var scratch Decision
		be, ok := b.backends[b.pick(v, &fwd, &scratch)]
		if !ok || be.v6 != p.V6 || be.key != p.Src {
			continue
		}
		want := be.Port
		if want == 0 {
			want = dport
		}
		if want != p.SrcPort {
			continue
		}
		if found != 0 {
			return 0, 0, false
		}
		found, foundPort = id, v.fe.Port
	}
	if found == 0 {
		return 0, 0, false
	}
	if foundPort == 0 {
		foundPort = p.SrcPort
	}
	return found, foundPort, true
}
