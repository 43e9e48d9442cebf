// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// ICMP for VIPs, the rules of xdp/gateway/bpf/icmp.h: echo requests to a VIP address are answered unless
// the address's source ranges refuse the client; errors about a VIP flow this gateway knows are
// relayed (toward the flow's backend from the client side, toward the client from the cluster
// side); every other error to a VIP address is dropped.

// The least path MTU an error may advertise to be relayed (PMTU_MIN4, PMTU_MIN6): IPv4's 552
// (RFC 1191's 576-byte datagram less options, Linux's min_pmtu) and IPv6's minimum link MTU
// (RFC 8200). No real path is narrower; relayed, a lower value would make the backend send tiny
// segments.
const (
	PMTUMin4 = 552
	PMTUMin6 = 1280
)

// ICMPError is what the decision reads of an ICMP (ICMPv6) error: destination unreachable
// (fragmentation needed included), packet too big or time exceeded.
type ICMPError struct {
	// Outer is the error's own IP header: V6, Src, Dst, TTL and Role (the other fields are
	// unused).
	Outer Packet
	// Quoted says the error quotes a packet that names a flow: an IPv4 header (not a non-first
	// fragment) or an IPv6 fixed header, then TCP or UDP with at least 8 bytes of its header,
	// all within the error's IP datagram.
	Quoted bool
	// Inner is the quoted packet: V6, Proto, Src, Dst, SrcPort, DstPort.
	Inner Packet
	// PTB says the error is a "fragmentation needed" (IPv4) or a "packet too big" (IPv6), and
	// MTU is the path MTU it advertises.
	PTB bool
	MTU uint32
}

// ptbTooLow reports whether e advertises a path MTU below the floors (ptb_too_low).
func (e *ICMPError) ptbTooLow() bool {
	if !e.PTB {
		return false
	}
	if e.Outer.V6 {
		return e.MTU < PMTUMin6
	}
	return e.MTU < PMTUMin4
}

// Echo decides an echo request from p.Src to p.Dst (icmp_echo): NotOurs when p.Dst is no VIP
// address; dropped (ReasonDropICMPSrcRange) when every frontend on the address has source ranges
// and none admits the client; else Answer (ReasonICMPEchoReply).
func (b *Balancer) Echo(p *Packet) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d Decision
	if b.vipAddrs[addrKey{p.Dst, p.V6}] == 0 {
		return d
	}
	src := p.SrcAddr()
	ranged, allowed := true, false
	for _, v := range b.vips {
		if v.key.addr != p.Dst || v.key.v6 != p.V6 {
			continue
		}
		if len(v.cfg.SourceRanges) == 0 {
			ranged = false
			break
		}
		for _, r := range v.cfg.SourceRanges {
			if r.Contains(src) {
				allowed = true
			}
		}
	}
	if ranged && !allowed {
		return drop(d, ReasonDropICMPSrcRange)
	}
	d.Action, d.Reason = Answer, ReasonICMPEchoReply
	return d
}

// flowBackend returns the backend of flow fk (client -> VIP, of VIP id) as this gateway knows it
// (flow_backend): its conntrack entry (forward, this VIP's, not expired, its backend usable) or
// its handshake-table entry (a TCP handshake or a datagram flow's first datagram: fresh, any
// sequence number). Nothing is refreshed: an error is no
// sign of life.
func (b *Balancer) flowBackend(fk flowKey, id datapath.VIPID, now int64) (datapath.BackendID, backend, bool) {
	if c, ok := b.ct[fk]; ok && !c.reverse && c.vip == id &&
		now-c.lastSeen <= int64(b.settings.Timeout(datapath.Protocol(fk.proto), c.closing)) {
		be, ok := b.usable(c.backend)
		return c.backend, be, ok
	}
	h, ok := b.hs[fk]
	if !ok || h.vip != id || now-h.synSeen > int64(HandshakeTimeout) {
		return 0, backend{}, false
	}
	be, ok := b.usable(h.backend)
	return h.backend, be, ok
}

// sourceAllowed reports whether client a passes VIP v's source ranges.
func sourceAllowed(v *vip, p *Packet) bool {
	if len(v.cfg.SourceRanges) == 0 {
		return true
	}
	a := p.SrcAddr()
	for _, r := range v.cfg.SourceRanges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Relay decides ICMP error e at time now (icmp_relay). Source ranges apply to the flow's client,
// not to the error's sender (any router on the path).
//   - From the client side, an error to a VIP address quoting VIP -> client of a flow this
//     gateway knows: ToBackend. The quoted source becomes the flow's backend endpoint, Addr and
//     Port (the quoted port kept for a backend of port 0), and so does the outer destination.
//   - From the cluster side, an error quoting client -> backend endpoint of a flow this gateway
//     sent there: ToClient. The quoted destination becomes the VIP, Addr and Port, and the outer
//     source too when it was the backend's address.
//
// An error to a VIP address about any other flow, or whose quote names none, is dropped
// (ReasonDropICMPUnknown), as is one about a VIP flow from the wrong side, refused by the
// flow's source ranges, or advertising a path MTU below the floors. NotOurs: an error about
// nothing of ours (the XDP datapath passes it to the kernel), including one to a VIP address
// whose quote is neither from that VIP nor to a backend endpoint whose frontend is known.
func (b *Balancer) Relay(e *ICMPError, now time.Duration) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	var d Decision
	o, in := &e.Outer, &e.Inner
	vipAddr := b.vipAddrs[addrKey{o.Dst, o.V6}] > 0
	if !e.Quoted {
		if vipAddr {
			return drop(d, ReasonDropICMPUnknown) // too short to name a flow
		}
		return d
	}
	t := int64(now)
	// From the client side: the quoted packet is VIP:vport -> client:cport, sent to the VIP.
	if in.Src == o.Dst && b.vipAddrs[addrKey{in.Src, in.V6}] > 0 {
		switch o.Role {
		case datapath.RoleNone:
			return drop(d, ReasonDropNoRole)
		case datapath.RoleCluster:
			return drop(d, ReasonDropWrongSide)
		}
		fwd := Packet{V6: in.V6, Proto: in.Proto, Src: in.Dst, Dst: in.Src, SrcPort: in.DstPort, DstPort: in.SrcPort}
		v := b.lookupVIP(&fwd)
		if v == nil {
			return drop(d, ReasonDropICMPUnknown)
		}
		d.VIP, d.Frontend = v.cfg.ID, v.fe
		if e.ptbTooLow() {
			return drop(d, ReasonDropICMPPTBLow)
		}
		if !sourceAllowed(v, &fwd) {
			d.SourceRejected = true
			return drop(d, ReasonDropICMPSrcRange)
		}
		bid, be, ok := b.flowBackend(fwd.key(), v.cfg.ID, t)
		if !ok {
			return drop(d, ReasonDropICMPUnknown)
		}
		d.Backend = bid
		if o.TTL <= 1 {
			return drop(d, ReasonDropTTL)
		}
		port := be.Port
		if port == 0 {
			port = in.SrcPort
		}
		d.Action, d.Reason, d.Addr, d.Port = ToBackend, ReasonICMPToBackend, be.key, port
		return d
	}
	// From the cluster side: the quoted packet is client:cport -> backend:bport; its reply
	// (backend -> client) names the frontend.
	r, ok := b.reverseOf(in.Dst, in.V6, in.DstPort, uint8(in.Proto))
	if !ok {
		return d
	}
	reply := Packet{V6: in.V6, Proto: in.Proto, Src: in.Dst, Dst: in.Src, SrcPort: in.DstPort, DstPort: in.SrcPort}
	v, vport, _, ok := b.reverseVIP(r, &reply, now)
	if !ok || v == nil {
		return d
	}
	switch o.Role {
	case datapath.RoleNone:
		return drop(d, ReasonDropNoRole)
	case datapath.RoleClient:
		return drop(d, ReasonDropReplyWrongSide) // relayed from the VIP, a reflector
	}
	fwd := Packet{V6: in.V6, Proto: in.Proto, Src: in.Src, Dst: Key(v.fe.Addr), SrcPort: in.SrcPort, DstPort: vport}
	fv := b.lookupVIP(&fwd)
	if fv == nil {
		return drop(d, ReasonDropICMPUnknown)
	}
	d.VIP, d.Frontend = fv.cfg.ID, fv.fe
	if e.ptbTooLow() {
		return drop(d, ReasonDropICMPPTBLow)
	}
	if !sourceAllowed(fv, &fwd) {
		d.SourceRejected = true
		return drop(d, ReasonDropICMPSrcRange)
	}
	// The flow must be known, and sent to the quoted backend endpoint.
	bid, be, ok := b.flowBackend(fwd.key(), fv.cfg.ID, t)
	want := be.Port
	if want == 0 {
		want = vport
	}
	if !ok || be.key != in.Dst || be.v6 != in.V6 || want != in.DstPort {
		return drop(d, ReasonDropICMPUnknown)
	}
	d.Backend = bid
	if o.TTL <= 1 {
		return drop(d, ReasonDropTTL)
	}
	d.Action, d.Reason, d.Addr, d.Port = ToClient, ReasonICMPToClient, Key(v.fe.Addr), vport
	return d
}
