package afxdp

import (
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/xdp"
)

// Reason says why the engine gave a frame its verdict; each has a counter. The names are the XDP
// datapath's where the meaning is the same (see xdp.Reason). Where the XDP datapath hands a
// packet to the kernel, the engine cannot (a frame in an AF_XDP socket has left the kernel's
// path): steer.c passes what it can recognise (fragments, expiring TTLs), and the rest is
// dropped and counted under a drop_* reason of its own.
type Reason uint8

// The reasons.
const (
	ReasonNATForward       Reason = iota // forwarded to a backend (DNAT)
	ReasonNATReverse                     // a backend's reply forwarded with the VIP as source
	ReasonNATReverseMaglev               // among those, an ambiguous endpoint's reply re-derived by Maglev
	ReasonFwdTX                          // sent back out of the interface it came in on
	ReasonFwdRedirect                    // sent out of another interface
	ReasonCTRateLimited                  // a flow not recorded: the new-flow rate guard
	ReasonCTReselect                     // an established flow re-balanced (backend gone or down, or idle)
	ReasonHandshakeHit                   // a TCP handshake packet sent where its SYN went
	ReasonHandshakeLimited               // a SYN not recorded: the handshake rate guard
	ReasonDropMalformed                  // truncated or inconsistent headers
	ReasonDropNotOurs                    // steered, but no VIP or backend endpoint (a configuration change raced it)
	ReasonDropSrcRange                   // the client is outside the VIP's source ranges
	ReasonDropNoBackend                  // the VIP's table has no usable backend for the flow
	ReasonDropUDP6ZeroCsum               // an IPv6 UDP datagram without checksum
	ReasonDropTTL                        // TTL or hop limit would expire (steer.c passes these; a race)
	ReasonDropReverseNoCT                // an ambiguous endpoint's reply whose VIP neither conntrack nor Maglev gives
	ReasonDropLocal                      // the destination is this host (steer.c passes these; a race)
	ReasonHeldNoNeigh                    // held while the next hop's MAC is resolved (sent or dropped later)
	ReasonDropNoNeigh                    // held, but the next hop's MAC was not resolved in time (or too many held)
	ReasonDropUnreachable                // no route to the destination
	ReasonDropNoPort                     // the egress interface has no socket of this datapath
	ReasonDropMTU                        // longer than the egress MTU
	ReasonDropTxFull                     // the egress socket's ring or frames were full
	numReasons
)

var reasonNames = [numReasons]string{
	"nat_forward", "nat_reverse", "nat_reverse_maglev", "fwd_tx", "fwd_redirect",
	"ct_rate_limited", "ct_reselect", "handshake_hit", "handshake_rate_limited",
	"drop_malformed", "drop_not_ours", "drop_src_range", "drop_no_backend", "drop_udp6_zero_csum",
	"drop_ttl", "drop_reverse_no_ct", "drop_local", "held_no_neigh", "drop_no_neigh", "drop_unreachable",
	"drop_no_port", "drop_mtu", "drop_tx_full",
}

// String returns the counter's name.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "reason_unknown"
}

// Verdict is what Process decided for a frame.
type Verdict struct {
	// Send is true when the frame, rewritten in place, must be sent out of Ifindex; false when
	// it is dropped (the reason is counted).
	Send    bool
	Ifindex int
}

// Process applies the datapath's rules to frame, which arrived on interface ingress, at time
// now (a monotonic clock: the caller's, the same for every call). A frame to be sent has been
// rewritten in place (addresses, ports, TTL, checksums and MACs).
func (e *Engine) Process(frame []byte, ingress int, now time.Duration) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clock = now
	var p packet
	switch parse(frame, &p) {
	case parsedMalformed:
		return e.drop(ReasonDropMalformed)
	case parsedNotOurs:
		return e.drop(ReasonDropNotOurs)
	}
	if p.v6 && p.proto == protoUDP && frame[p.l4+6] == 0 && frame[p.l4+7] == 0 {
		if _, ok := e.lookupVIP(&p); ok {
			return e.drop(ReasonDropUDP6ZeroCsum)
		}
	}
	t := int64(now)
	if v, ok := e.forward(frame, &p, ingress, t); ok {
		return v
	}
	if v, ok := e.reply(frame, &p, ingress, t); ok {
		return v
	}
	return e.drop(ReasonDropNotOurs)
}

func (e *Engine) drop(r Reason) Verdict {
	e.reasons[r]++
	return Verdict{}
}

func (e *Engine) lookupVIP(p *packet) (*vipState, bool) {
	k := feKey{addr: p.dst, port: p.dport, proto: p.proto, v6: p.v6}
	if v := e.vips[k]; v != nil {
		return v, true
	}
	k.port = 0
	v := e.vips[k]
	return v, v != nil
}

// usable returns backend id unless it is unknown or down (backend_get).
func (e *Engine) usable(id xdp.BackendID) (backendState, bool) {
	if id == 0 {
		return backendState{}, false
	}
	b, ok := e.backends[id]
	if !ok || b.Down {
		return backendState{}, false
	}
	return b, true
}

// ctVIP returns VIP id if it still is the frontend p is addressed to (ct_vip).
func (e *Engine) ctVIP(p *packet, id xdp.VIPID) *vipState {
	v := e.vipByID[id]
	if v == nil {
		return nil
	}
	k := frontendKey(v.fe.Addr, v.fe.Port, v.fe.Proto)
	if k.v6 != p.v6 || k.proto != p.proto || (k.port != 0 && k.port != p.dport) || k.addr != p.dst {
		return nil
	}
	return v
}

func (e *Engine) ctTimeout(proto uint8, closing bool) int64 {
	switch {
	case proto == protoTCP && closing:
		return int64(e.opts.TCPClosingTimeout)
	case proto == protoTCP:
		return int64(e.opts.TCPEstablishedTimeout)
	}
	return int64(e.opts.UDPTimeout)
}

// rateAllow is the new-flow rate guard (rate_allow).
func (e *Engine) rateAllow(now int64, handshake bool) bool {
	if e.opts.NewFlowRate < 0 {
		return true
	}
	if now-e.rateStart >= int64(rateWindow) || now < e.rateStart {
		e.rateStart, e.rateCT, e.rateHS = now, 0, 0
	}
	n := &e.rateCT
	if handshake {
		n = &e.rateHS
	}
	if *n >= e.opts.NewFlowRate {
		if handshake {
			e.reasons[ReasonHandshakeLimited]++
		} else {
			e.reasons[ReasonCTRateLimited]++
		}
		return false
	}
	*n++
	return true
}

// hsBackend returns the backend of handshake entry h if a packet of VIP vip may use it
// (hs_backend): fresh, same VIP, backend usable, and the same connection (the SYN's sequence
// number, or within hsSeqWindow past it for a later packet).
func (e *Engine) hsBackend(h hsEntry, ok bool, vip xdp.VIPID, now int64, syn bool, seq uint32) xdp.BackendID {
	if !ok || h.vip != vip || now-h.synSeen > int64(hsTimeout) {
		return 0
	}
	if _, ok := e.usable(h.backend); !ok {
		return 0
	}
	if syn && seq != h.isn || !syn && seq-h.isn >= hsSeqWindow {
		return 0
	}
	return h.backend
}

func pick(v *vipState, seed uint32, p *packet) xdp.BackendID {
	if len(v.table) == 0 {
		return 0
	}
	h := xdp.FlowHash(seed, p.srcAddr(), p.sport, p.dport, p.proto, v.cfg.Affinity == xdp.AffinityClientIP)
	return v.table[h%uint32(len(v.table))]
}

func srcAllowed(v *vipState, a netip.Addr) bool {
	for _, r := range v.cfg.SourceRanges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// admit checks what every packet to VIP v must pass: its source ranges and an unexpired TTL.
func admit(v *vipState, p *packet) (Reason, bool) {
	if len(v.cfg.SourceRanges) > 0 && !srcAllowed(v, p.srcAddr()) {
		return ReasonDropSrcRange, false
	}
	if p.ttl <= 1 {
		return ReasonDropTTL, false
	}
	return 0, true
}

// forward balances a packet to a VIP (lb_forward). ok is false when p is not addressed to one.
func (e *Engine) forward(frame []byte, p *packet, ingress int, now int64) (Verdict, bool) {
	syn := p.proto == protoTCP && p.tcpFlags&(tcpSYN|tcpACK) == tcpSYN
	closing := p.tcpFlags&(tcpFIN|tcpRST) != 0
	fk := p.key()
	ct, ctFound := e.ct[fk]
	if !syn && ctFound && !ct.reverse {
		if v := e.ctVIP(p, ct.vip); v != nil {
			if now-ct.lastSeen <= e.ctTimeout(p.proto, ct.closing) {
				if be, ok := e.usable(ct.backend); ok {
					ct.closing = ct.closing || closing
					ct.lastSeen = now
					e.ct[fk] = ct
					return e.established(frame, p, ingress, v, ct.backend, be, false)
				}
			}
			e.reasons[ReasonCTReselect]++
		}
	}
	v, ok := e.lookupVIP(p)
	if !ok {
		return Verdict{}, false
	}
	if r, ok := admit(v, p); !ok {
		return e.drop(r), true
	}
	var bid xdp.BackendID
	hs, hsFound := e.hs[fk]
	if p.proto == protoTCP {
		bid = e.hsBackend(hs, hsFound, v.cfg.ID, now, syn, p.seq)
	}
	if bid != 0 {
		e.reasons[ReasonHandshakeHit]++
	} else {
		bid = pick(v, e.opts.Seed, p)
	}
	be, ok := e.usable(bid)
	if !ok {
		return e.drop(ReasonDropNoBackend), true
	}
	revCT := e.needsReverseCT(be, p)
	if (!syn || revCT) && e.rateAllow(now, false) {
		e.ctStore(fk, now, bid, be, v.cfg.ID, closing, syn, revCT)
		if hsFound && !syn {
			delete(e.hs, fk)
		}
	}
	if syn {
		if hsFound && hs.backend == bid && hs.vip == v.cfg.ID && hs.isn == p.seq {
			hs.synSeen = now
			e.hs[fk] = hs
		} else if e.rateAllow(now, true) {
			e.hsInsert(fk, hsEntry{synSeen: now, backend: bid, vip: v.cfg.ID, isn: p.seq})
		}
		// A SYN on a tuple conntrack still holds starts a new connection: the entry takes the
		// SYN's backend in place.
		if c, ok := e.ct[fk]; ok && !c.reverse && (c.backend != bid || c.vip != v.cfg.ID || c.closing) {
			c.backend, c.vip, c.closing, c.lastSeen = bid, v.cfg.ID, false, now
			e.ct[fk] = c
		}
	}
	newFlow := syn || (p.proto != protoTCP && !ctFound)
	return e.established(frame, p, ingress, v, bid, be, newFlow)
}

// established checks what every forwarded packet must pass, counts it and sends it to be.
func (e *Engine) established(frame []byte, p *packet, ingress int, v *vipState, bid xdp.BackendID,
	be backendState, newFlow bool) (Verdict, bool) {
	if r, ok := admit(v, p); !ok {
		return e.drop(r), true
	}
	count(e.vipTraffic[v.cfg.ID], len(frame), newFlow)
	count(e.backendTraffic[bid], len(frame), newFlow)
	e.reasons[ReasonNATForward]++
	rewrite(frame, p, false, be.key, be.Port)
	return e.send(frame, p, ingress), true
}

func count(t *xdp.Traffic, n int, newFlow bool) {
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
func (e *Engine) reverseOf(addr [16]byte, v6 bool, port uint16, proto uint8) (reverseState, bool) {
	k := feKey{addr: addr, port: port, proto: proto, v6: v6}
	if r, ok := e.reverse[k]; ok {
		return r, true
	}
	k.port = 0
	r, ok := e.reverse[k]
	return r, ok
}

// needsReverseCT says whether flows to be must record a reverse conntrack entry: its endpoint
// serves several VIP:ports, so its replies cannot be mapped statelessly.
func (e *Engine) needsReverseCT(be backendState, p *packet) bool {
	port := be.Port
	if port == 0 {
		port = p.dport
	}
	r, ok := e.reverseOf(be.key, be.v6, port, p.proto)
	return ok && r.Ambiguous
}

// ctStore records flow fk (unless onlyReverse) and, for an ambiguous endpoint, the reverse
// entry its replies are translated by (ct_store).
func (e *Engine) ctStore(fk flowKey, now int64, bid xdp.BackendID, be backendState, vip xdp.VIPID,
	closing, onlyReverse, revCT bool) {
	c := ctEntry{lastSeen: now, backend: bid, vip: vip, vipPort: fk.dport, closing: closing}
	if !onlyReverse {
		e.ctInsert(fk, c)
	}
	if revCT {
		port := be.Port
		if port == 0 {
			port = fk.dport
		}
		rk := flowKey{src: be.key, dst: fk.src, sport: port, dport: fk.sport, proto: fk.proto, v6: fk.v6}
		c.backend, c.reverse = 0, true
		e.ctInsert(rk, c)
	}
}

// ctInsert writes a conntrack entry (insertBounded).
func (e *Engine) ctInsert(k flowKey, c ctEntry) { insertBounded(e.ct, k, c, e.opts.ConntrackSize) }

// hsInsert writes a handshake entry (insertBounded).
func (e *Engine) hsInsert(k flowKey, h hsEntry) { insertBounded(e.hs, k, h, e.opts.HandshakeSize) }

// insertBounded sets m[k] = v; a new key in a map of size entries or more first evicts an
// arbitrary entry (Go's map iteration starts at a random place).
func insertBounded[V any](m map[flowKey]V, k flowKey, v V, size int) {
	if _, ok := m[k]; !ok && len(m) >= size {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// reply translates a backend's reply to a client (lb_reverse). ok is false when p's source is
// no backend endpoint.
func (e *Engine) reply(frame []byte, p *packet, ingress int, now int64) (Verdict, bool) {
	r, ok := e.reverseOf(p.src, p.v6, p.sport, p.proto)
	if !ok {
		return Verdict{}, false
	}
	var vipID xdp.VIPID
	var vport uint16
	maglev := false
	if r.Ambiguous {
		rk := p.key()
		if c, ok := e.ct[rk]; ok {
			vipID, vport = c.vip, c.vipPort
			// The XDP datapath's LRU keeps a reverse entry while it is used; here its replies
			// keep it from being swept.
			c.lastSeen = now
			e.ct[rk] = c
		} else if id, port, ok := e.reverseMaglev(r, p); ok {
			vipID, vport, maglev = id, port, true
		} else {
			return e.drop(ReasonDropReverseNoCT), true
		}
	} else {
		vipID, vport = r.VIP, r.port
		if vport == 0 {
			vport = p.sport
		}
	}
	v := e.vipByID[vipID]
	if v == nil || v.fe.Addr.Is6() != p.v6 {
		return Verdict{}, false
	}
	if p.ttl <= 1 {
		return e.drop(ReasonDropTTL), true
	}
	// Route first: a backend's packet to this host is not ours (steer.c passes those).
	hop, kind := e.hops.Lookup(p.dstAddr())
	if kind == HopLocal {
		return e.drop(ReasonDropLocal), true
	}
	e.reasons[ReasonNATReverse]++
	if maglev {
		e.reasons[ReasonNATReverseMaglev]++
	}
	rewrite(frame, p, true, keyAddr(v.fe.Addr), vport)
	return e.sendHop(frame, p, ingress, hop, kind), true
}

// reverseMaglev finds the one candidate VIP whose Maglev table sends the reply's forward tuple
// to the replying endpoint (reverse_maglev).
func (e *Engine) reverseMaglev(r reverseState, p *packet) (xdp.VIPID, uint16, bool) {
	var found xdp.VIPID
	var foundPort uint16
	for _, id := range r.Candidates {
		if id == 0 {
			break
		}
		v := e.vipByID[id]
		if v == nil || v.fe.Addr.Is6() != p.v6 || uint8(v.fe.Proto) != p.proto {
			continue
		}
		dport := v.fe.Port
		if dport == 0 {
			dport = p.sport
		}
		// The forward packet: client -> VIP, hashed as forward hashes a new flow.
		fwd := packet{v6: p.v6, proto: p.proto, src: p.dst, sport: p.dport, dport: dport}
		// Any backend with the id, down or not, as reverse_maglev reads the backends map.
		be, ok := e.backends[pick(v, e.opts.Seed, &fwd)]
		if !ok || be.v6 != p.v6 || be.key != p.src {
			continue
		}
		want := be.Port
		if want == 0 {
			want = dport
		}
		if want != p.sport {
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
		foundPort = p.sport
	}
	return found, foundPort, true
}

// send resolves the next hop of a rewritten packet and sends it.
func (e *Engine) send(frame []byte, p *packet, ingress int) Verdict {
	hop, kind := e.hops.Lookup(p.dstAddr())
	return e.sendHop(frame, p, ingress, hop, kind)
}

func (e *Engine) sendHop(frame []byte, p *packet, ingress int, hop Hop, kind HopKind) Verdict {
	switch kind {
	case HopLocal:
		return e.drop(ReasonDropLocal)
	case HopNoNeigh:
		return e.hold(frame, p, ingress)
	case HopUnreachable:
		return e.drop(ReasonDropUnreachable)
	}
	if hop.MTU > 0 && p.ipLen > hop.MTU {
		return e.drop(ReasonDropMTU)
	}
	if hop.Ifindex != ingress && !e.ports[hop.Ifindex] {
		return e.drop(ReasonDropNoPort)
	}
	copy(frame[0:6], hop.Dst)
	copy(frame[6:12], hop.Src)
	if hop.Ifindex == ingress {
		e.reasons[ReasonFwdTX]++
	} else {
		e.reasons[ReasonFwdRedirect]++
	}
	return Verdict{Send: true, Ifindex: hop.Ifindex}
}

// Holding frames for an unresolved neighbour, as the kernel's neighbour queue does: the XDP
// datapath hands such a packet to the kernel, which a frame in an AF_XDP socket can no longer
// reach.
const (
	// maxHeld bounds the frames held at once; more are dropped (drop_no_neigh).
	maxHeld = 256
	// holdFor is how long a frame is held before it is dropped: about the kernel's first
	// ARP/ND retransmission.
	holdFor = time.Second
)

// heldFrame is a rewritten frame waiting for its next hop's MAC.
type heldFrame struct {
	frame   []byte
	dst     netip.Addr
	ipLen   int
	ingress int
	until   time.Duration
}

// hold keeps a copy of a rewritten frame until Release finds its next hop.
func (e *Engine) hold(frame []byte, p *packet, ingress int) Verdict {
	if len(e.held) >= maxHeld {
		return e.drop(ReasonDropNoNeigh)
	}
	e.reasons[ReasonHeldNoNeigh]++
	e.held = append(e.held, heldFrame{frame: append([]byte(nil), frame...), dst: p.dstAddr(),
		ipLen: p.ipLen, ingress: ingress, until: e.clock + holdFor})
	return Verdict{}
}

// Release returns the held frames whose next hop is now known, MACs set, with the interface to
// send each from, and drops those held past holdFor (drop_no_neigh). The datapath calls it
// whenever frames are held.
func (e *Engine) Release(now time.Duration) (frames [][]byte, ifindexes []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keep := e.held[:0]
	for _, h := range e.held {
		hop, kind := e.hops.Lookup(h.dst)
		switch {
		case kind == HopSend:
			p := packet{ipLen: h.ipLen}
			if v := e.sendHop(h.frame, &p, h.ingress, hop, kind); v.Send {
				frames = append(frames, h.frame)
				ifindexes = append(ifindexes, v.Ifindex)
			}
		case kind != HopNoNeigh:
			e.sendHop(h.frame, &packet{}, h.ingress, hop, kind) // counts why
		case now >= h.until:
			e.reasons[ReasonDropNoNeigh]++
		default:
			keep = append(keep, h)
		}
	}
	clear(e.held[len(keep):])
	e.held = keep
	return frames, ifindexes
}

// Held returns how many frames wait for a next hop.
func (e *Engine) Held() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held)
}

// countTxFull counts n frames the egress could not take.
func (e *Engine) countTxFull(n int) {
	e.mu.Lock()
	e.reasons[ReasonDropTxFull] += uint64(n)
	e.mu.Unlock()
}

// Sweep deletes up to budget conntrack and handshake entries idle past their timeouts at time
// now, starting at an arbitrary place in each table; the datapath calls it periodically so that
// dead flows do not wait for eviction.
func (e *Engine) Sweep(now time.Duration, budget int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, n, seen := int64(now), 0, 0
	for k, c := range e.ct {
		if seen++; seen > budget {
			break
		}
		if t-c.lastSeen > e.ctTimeout(k.proto, c.closing) {
			delete(e.ct, k)
			n++
		}
	}
	seen = 0
	for k, h := range e.hs {
		if seen++; seen > budget {
			break
		}
		if t-h.synSeen > int64(hsTimeout) {
			delete(e.hs, k)
			n++
		}
	}
	return n
}
