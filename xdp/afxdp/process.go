// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"net/netip"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
)

// Verdict is what Process decided for a frame.
type Verdict struct {
	// Send is true when Frame must be sent out of Ifindex; false when the frame is dropped (the
	// reason is counted).
	Send    bool
	Ifindex int
	// Frame is the frame to send: the one given to Process, rewritten in place, and grown (the
	// carrier of direct server return) or cut (an ICMP answer) within its capacity.
	Frame []byte
}

// Process applies the datapath's rules to frame, which arrived on interface ingress, at time
// now (a monotonic clock: the caller's, the same for every call). A frame to be sent has been
// rewritten in place (addresses, ports, TTL, checksums and MACs). The decision is
// forward.Balancer's; around it, Process parses the frame, rewrites it, finds its next hop and
// counts every reason.
func (e *Engine) Process(frame []byte, ingress int, now time.Duration) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clock = now
	var p packet
	switch parse(frame, &p) {
	case parsedMalformed:
		return e.drop(forward.ReasonDropMalformed)
	case parsedNotOurs:
		return e.drop(forward.ReasonDropNotOurs)
	case parsedICMP:
		return e.processICMP(frame, &p, ingress, now)
	}
	fp := forward.Packet{V6: p.v6, Proto: datapath.Protocol(p.proto), TTL: p.ttl, Src: p.src, Dst: p.dst,
		SrcPort: p.sport, DstPort: p.dport, TCPFlags: p.tcpFlags, Seq: p.seq, Len: len(frame),
		UDPNoChecksum: p.v6 && p.proto == protoUDP && frame[p.l4+6] == 0 && frame[p.l4+7] == 0,
		// IPv6 extension headers are never steered here (steer.c passes them).
		Carrier: !p.v6 && p.l4 > ethLen+ipv4MinLen && frame[ethLen+ipv4MinLen] == datapath.CarrierOpt4Type,
		Role:    e.roles[ingress]}
	d := e.bal.Forward(&fp, now)
	if d.Action == forward.NotOurs {
		d = e.bal.Reply(&fp, now)
	}
	if d.Reselected {
		e.reasons[forward.ReasonCTReselect]++
	}
	if d.MidFlowLimited {
		e.reasons[forward.ReasonCTMidFlowLimited]++
	}
	if d.RateLimited {
		e.reasons[forward.ReasonCTRateLimited]++
	}
	if d.HSRateLimited {
		e.reasons[forward.ReasonHandshakeLimited]++
	}
	if d.HandshakeHit {
		e.reasons[forward.ReasonHandshakeHit]++
	}
	if d.SYNKept {
		e.reasons[forward.ReasonCTSYNKept]++
	}
	switch d.Action {
	case forward.Drop:
		return e.drop(d.Reason)
	case forward.ToBackend:
		e.reasons[forward.ReasonNATForward]++
		vip, vport := p.dstAddr(), p.dport
		rewrite(frame, &p, false, d.Addr, d.Port)
		if d.Carry {
			return e.carry(frame, &p, ingress, &d)
		}
		hop, kind := e.hops.Lookup(p.dstAddr())
		if kind == HopSend && hop.MTU > 0 && p.ipLen > hop.MTU && tooBigEligible(frame, &p) {
			// The client is told, from the VIP, quoting what it sent (pmtu.h).
			return e.tooBig(frame, &p, ingress, vip, vip, vport, true, hop.MTU, forward.ReasonICMPTooBigClient)
		}
		return e.sendHop(frame, &p, ingress, hop, kind)
	case forward.ToClient:
		// Route first: a backend's packet to this host is not ours (steer.c passes those).
		hop, kind := e.hops.Lookup(p.dstAddr())
		if kind == HopLocal {
			return e.drop(forward.ReasonDropLocal)
		}
		if kind == HopSend && hop.MTU > 0 && p.ipLen > hop.MTU && tooBigEligible(frame, &p) {
			// The backend is told, from this host's address toward it, quoting its reply as it
			// sent it (pmtu.h): the kernel's answer would go to the VIP.
			from, ok := e.hops.Source(p.srcAddr())
			if !ok {
				from = addrOf(d.Addr, p.v6)
			}
			return e.tooBig(frame, &p, ingress, from, netip.Addr{}, 0, false, hop.MTU, forward.ReasonICMPTooBigBackend)
		}
		e.reasons[forward.ReasonNATReverse]++
		if d.ReverseByHash {
			e.reasons[forward.ReasonNATReverseMaglev]++
		}
		rewrite(frame, &p, true, d.Addr, d.Port)
		return e.sendHop(frame, &p, ingress, hop, kind)
	}
	return e.drop(forward.ReasonDropNotOurs)
}

func (e *Engine) drop(r forward.Reason) Verdict {
	e.reasons[r]++
	return Verdict{}
}

// send resolves the next hop of a rewritten packet and sends it.
func (e *Engine) send(frame []byte, p *packet, ingress int) Verdict {
	hop, kind := e.hops.Lookup(p.dstAddr())
	return e.sendHop(frame, p, ingress, hop, kind)
}

func (e *Engine) sendHop(frame []byte, p *packet, ingress int, hop Hop, kind HopKind) Verdict {
	switch kind {
	case HopLocal:
		return e.drop(forward.ReasonDropLocal)
	case HopNoNeigh:
		return e.hold(frame, p, ingress)
	case HopUnreachable:
		return e.drop(forward.ReasonDropUnreachable)
	}
	if hop.MTU > 0 && p.ipLen > hop.MTU {
		return e.drop(forward.ReasonDropMTU)
	}
	if hop.Ifindex != ingress && !e.ports[hop.Ifindex] {
		return e.drop(forward.ReasonDropNoPort)
	}
	copy(frame[0:6], hop.Dst)
	copy(frame[6:12], hop.Src)
	if hop.Ifindex == ingress {
		e.reasons[forward.ReasonFwdTX]++
	} else {
		e.reasons[forward.ReasonFwdRedirect]++
	}
	return Verdict{Send: true, Ifindex: hop.Ifindex, Frame: frame}
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
		return e.drop(forward.ReasonDropNoNeigh)
	}
	e.reasons[forward.ReasonHeldNoNeigh]++
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
			e.reasons[forward.ReasonDropNoNeigh]++
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
	e.reasons[forward.ReasonDropTxFull] += uint64(n)
	e.mu.Unlock()
}

// Sweep deletes up to budget conntrack and handshake entries idle past their timeouts at time
// now (forward.Balancer.Sweep); the datapath calls it periodically so that dead flows do not wait
// for eviction.
func (e *Engine) Sweep(now time.Duration, budget int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bal.Sweep(now, budget)
}
