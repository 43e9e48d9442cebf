// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/forward"
	"github.com/xlb-dev/xlb/xdp/gateway"
)

// ctUnchecked is Explanation.Conntrack of an entry that is followed unless it expired: the
// timeouts are unknown. The other states are forward.CTState's names.
const ctUnchecked = "unchecked"

// Explanation is `xlb show flow`: how the datapath treats the packets of one flow, step by step.
type Explanation struct {
	Client string `json:"client"`
	To     string `json:"to"`
	Proto  string `json:"proto"`
	// Frontend is the frontend a new flow is balanced by ("" when none: not balanced).
	Frontend string `json:"frontend,omitempty"`
	VIPID    uint32 `json:"vipID,omitempty"`
	// M is the size of the frontend's Maglev table (0: none); Seed, Hash and Slot are the pick's
	// (absent when there is no pick).
	M    int     `json:"m"`
	Seed *uint32 `json:"seed,omitempty"`
	Hash *uint32 `json:"hash,omitempty"`
	Slot *int    `json:"slot,omitempty"`
	// NewFlow is the backend endpoint a new flow (a TCP SYN) goes to; "" when none takes it.
	NewFlow string `json:"newFlow,omitempty"`
	// Conntrack is the state of the flow's entry (none, used, unchecked, expired, other-vip,
	// backend-gone); Established the backend endpoint its other packets go to by it, "" when
	// they are balanced as a new flow.
	Conntrack   string `json:"conntrack"`
	Established string `json:"established,omitempty"`
	// Handshake is the backend endpoint a TCP handshake in flight on the flow's tuple sends its
	// ACK (and a retransmitted SYN) to, by the handshake table, or for a datagram flow that has
	// sent one datagram, where its second goes (where the first went); "" when there is none, or
	// it is not followed.
	Handshake string `json:"handshake,omitempty"`
	// Carried says a new flow's first packets carry the frontend to the backend's node (its
	// backend is of direct server return: docs/dsr.md).
	Carried bool `json:"carried,omitempty"`
	// Steps say what each lookup found.
	Steps []Step `json:"steps"`
	// Verdict sums it up.
	Verdict string `json:"verdict"`
}

// Step is one lookup of `xlb show flow`.
type Step struct {
	Step string `json:"step"`
	Says string `json:"says"`
}

// ExplainFlow says where the packets of q's flow go through the datapath pinned as p, and why.
// It loads what the flow can touch (the frontends on its destination address and its conntrack
// entry's, their Maglev tables, the backends, its conntrack and handshake entries, the seed and
// timeouts of the attached program, q.Seed overriding the seed) into a forward.Balancer, and
// asks it twice, each time afresh: a new connection (a TCP SYN of a new ISN; for UDP a datagram
// without the conntrack entry) and an established packet (a TCP ACK following the handshake's
// SYN; a datagram). The frontend, source ranges, Maglev pick, conntrack and handshake verdicts
// reported are those two Decisions. Not read: the per-CPU caches, which only repeat conntrack
// and the maps within their short lifetimes.
//
// Without q.Seed, an error wrapping ErrSeedUnknown says the attached program's seed could not
// be read; with it, the timeouts may be unknown too, and a conntrack entry is then reported as
// followed, "unchecked", whatever its age.
func ExplainFlow(p *gateway.Pinned, q FlowQuery) (Explanation, error) {
	q, err := q.normalize()
	if err != nil {
		return Explanation{}, err
	}
	s, err := readSnapshot(p, q)
	if err != nil {
		return Explanation{}, err
	}
	first, est, err := s.decide(q, false)
	if err != nil {
		return Explanation{}, err
	}
	// A SYN on a live flow's tuple keeps the flow's backend; the Maglev pick shown is then that
	// of a new connection once the flow closes or idles (asked without the conntrack entry).
	var kept *forward.Decision
	if first.SYNKept {
		k := first
		kept = &k
		if first, _, err = s.decide(q, true); err != nil {
			return Explanation{}, err
		}
	}
	x := explainer{q: q, s: s, e: Explanation{Client: q.Client.String(), To: q.To.String(), Proto: q.Proto.String(),
		Conntrack: forward.CTNone.String(), Steps: []Step{}}}
	x.established(est)
	x.handshake(est)
	x.newFlow(first)
	if kept != nil {
		x.e.NewFlow = x.to(*kept)
		x.step("syn", "a SYN on this live flow's tuple keeps backend %s (a forged one cannot re-point the flow); "+
			"a new connection once the flow closes or idles: %s", x.backend(kept.Backend), x.outcome(first))
	}
	x.verdict(first, est, kept)
	return x.e, nil
}

// decide asks the snapshot about q's flow: the first packet of a new connection (first) and an
// established packet (est), each of a Balancer of its own. fresh leaves the flow's conntrack
// entry out of first's: how a new connection is balanced once the tuple is free.
func (s *snapshot) decide(q FlowQuery, fresh bool) (first, est forward.Decision, err error) {
	fb, err := s.balancer(!fresh && q.Proto != datapath.UDP)
	if err != nil {
		return first, est, err
	}
	eb, err := s.balancer(true)
	if err != nil {
		return first, est, err
	}
	p := forward.PacketOf(q.Client, q.To, q.Proto)
	p.Role = datapath.RoleClient // a client's packet, from the client side
	if q.Proto != datapath.TCP {
		return fb.Forward(&p, snapshotNow), eb.Forward(&p, snapshotNow), nil
	}
	// A new connection's SYN has an ISN of its own, not the handshake entry's (whose
	// retransmission would follow the entry); the ACK is the handshake's, one past its ISN.
	syn, ack := p, p
	syn.TCPFlags, syn.Seq = forward.TCPSYN, s.hs.ISN+1
	ack.TCPFlags, ack.Seq = forward.TCPACK, s.hs.ISN+1
	return fb.Forward(&syn, snapshotNow), eb.Forward(&ack, snapshotNow), nil
}

// explainer builds an Explanation from the Decisions.
type explainer struct {
	q FlowQuery
	s *snapshot
	e Explanation
}

func (x *explainer) step(name, format string, args ...any) {
	x.e.Steps = append(x.e.Steps, Step{name, fmt.Sprintf(format, args...)})
}

// backend is backend id as the steps name it: its endpoint (port 0: the flow's destination
// port is kept), or why it takes no packets.
func (x *explainer) backend(id datapath.BackendID) string {
	b, ok := x.s.backends[id]
	switch {
	case !ok:
		return fmt.Sprintf("%d (deleted)", id)
	case b.Down:
		return fmt.Sprintf("%d %s (down)", id, x.endpoint(b.Addr, b.Port))
	}
	return fmt.Sprintf("%d %s", id, x.endpoint(b.Addr, b.Port))
}

// endpoint is where a packet of the flow sent to addr and port goes (port 0: its destination
// port is kept).
func (x *explainer) endpoint(a netip.Addr, port uint16) string {
	if port == 0 {
		port = x.q.To.Port()
	}
	return endpointString(a, port)
}

// to is the endpoint a ToBackend decision rewrites the packet to ("" for any other).
func (x *explainer) to(d forward.Decision) string {
	if d.Action != forward.ToBackend {
		return ""
	}
	return x.endpoint(forward.AddrOf(d.Addr, x.q.To.Addr().Is6()), d.Port)
}

// outcome says what d does with the packet.
func (x *explainer) outcome(d forward.Decision) string {
	switch d.Action {
	case forward.ToBackend:
		return "to " + x.to(d)
	case forward.Drop:
		return "dropped (" + d.Reason.String() + ")"
	}
	return "not balanced: passed to the host"
}

// sourceRanges lists VIP id's source ranges ("" when it has none).
func (x *explainer) sourceRanges(id datapath.VIPID) string {
	var names []string
	for _, cfg := range x.s.vips {
		if cfg.ID == id {
			for _, r := range cfg.SourceRanges {
				names = append(names, r.String())
			}
		}
	}
	return strings.Join(names, ", ")
}

// established reports the conntrack entry as the established packet's decision used it.
func (x *explainer) established(est forward.Decision) {
	if !x.s.hasFlow {
		x.step("conntrack", "no entry")
		return
	}
	fl := x.s.flow
	timeout := x.s.settings.Timeout(x.q.Proto, fl.Closing)
	closing := ""
	if fl.Closing {
		closing = ", closing"
	}
	if fl.InSlot {
		closing += ", held in its handshake slot"
	}
	idle := fmt.Sprintf("idle %v", fl.Idle.Round(time.Millisecond))
	x.e.Conntrack = est.Conntrack.String()
	switch est.Conntrack {
	case forward.CTOtherVIP:
		x.step("conntrack", "an entry of VIP id %d, not a frontend of this packet's: not used", fl.VIP)
	case forward.CTBackendGone:
		x.step("conntrack", "backend %s: the flow is balanced again", x.backend(fl.Backend))
	case forward.CTExpired:
		x.step("conntrack", "backend %s, %s of %v%s: expired, the flow is balanced again", x.backend(fl.Backend), idle, timeout, closing)
	case forward.CTUsed:
		if x.s.timeoutsErr != nil {
			x.e.Conntrack = ctUnchecked
			x.step("conntrack", "backend %s, %s%s; expiry not checked (%v)", x.backend(fl.Backend), idle, closing, x.s.timeoutsErr)
		} else {
			x.step("conntrack", "backend %s (VIP %s), %s of %v%s", x.backend(fl.Backend), frontendString(est.Frontend), idle, timeout, closing)
		}
		x.e.Established = x.to(est)
		if est.SourceRejected {
			x.step("source ranges", "%s is in none of %s (VIP id %d): its packets are dropped (%s)", x.q.Client.Addr(),
				x.sourceRanges(est.VIP), est.VIP, est.Reason)
		}
	default:
		x.step("conntrack", "an entry of backend %s, not looked up", x.backend(fl.Backend))
	}
}

// handshake reports the handshake entry as the established packet's decision used it.
func (x *explainer) handshake(est forward.Decision) {
	if x.s.hsErr != nil {
		x.step("handshake", "not read: %v", x.s.hsErr)
		return
	}
	if !x.s.hasHS {
		return
	}
	h := x.s.hs
	step, followed := "handshake", est.Handshake
	entry := fmt.Sprintf("backend %s (VIP id %d), SYN seen %s, ISN %d", x.backend(h.Backend), h.VIP,
		ageText(h.Age), h.ISN)
	follows, lasts := "the handshake's ACK and a retransmitted SYN follow it", fmt.Sprint(forward.HandshakeTimeout)
	if x.q.Proto != datapath.TCP {
		step, followed = "first datagram", est.FirstDatagram
		entry = fmt.Sprintf("backend %s (VIP id %d), first datagram seen %s", x.backend(h.Backend), h.VIP,
			ageText(h.Age))
		follows = "the flow's second datagram follows it and enters conntrack"
		lasts = fmt.Sprintf("the datagram timeout, at most %v,", forward.HandshakeTimeout)
	}
	switch {
	case followed:
		x.e.Handshake = x.to(est)
		x.step(step, "%s: %s", entry, follows)
	case est.Conntrack == forward.CTUsed:
		x.step(step, "%s: not needed, conntrack holds the flow", entry)
	case est.Maglev:
		x.step(step, "%s: not followed (an entry serves its own VIP for %s while its backend is up): balanced again",
			entry, lasts)
	default:
		x.step(step, "%s: not reached", entry)
	}
}

// newFlow reports the frontend, its source ranges and the Maglev pick of a new connection.
func (x *explainer) newFlow(first forward.Decision) {
	if first.VIP == 0 {
		x.step("frontend", "none for %s/%s", x.q.To, x.q.Proto)
		return
	}
	cfg := x.s.vips[first.Frontend]
	x.e.Frontend, x.e.VIPID, x.e.M = frontendString(first.Frontend), uint32(first.VIP), len(x.s.tables[first.VIP])
	aff := ""
	if cfg.Affinity == datapath.AffinityClientIP {
		aff = ", affinity ClientIP (the client's address alone is hashed)"
	}
	x.step("frontend", "%s id %d, M %d%s", x.e.Frontend, first.VIP, x.e.M, aff)
	rs := x.sourceRanges(first.VIP)
	switch {
	case first.SourceRejected:
		x.step("source ranges", "%s is in none of %s: %s", x.q.Client.Addr(), rs, x.outcome(first))
		return
	case rs != "":
		x.step("source ranges", "%s is allowed (%s)", x.q.Client.Addr(), rs)
	}
	switch {
	case first.Handshake:
		x.step("handshake", "backend %s, where the SYN went", x.backend(first.Backend))
	case !first.Maglev:
	case first.M == 0:
		x.step("maglev", "no table: %s", x.outcome(first))
	default:
		seed, hash, slot := x.s.settings.Seed, first.Hash, first.Slot
		x.e.Seed, x.e.Hash, x.e.Slot = &seed, &hash, &slot
		pick := fmt.Sprintf("seed %d, hash %#08x, slot %d of %d", seed, hash, slot, first.M)
		switch {
		case first.Backend == 0:
			x.step("maglev", "%s: empty, %s", pick, x.outcome(first))
		case first.Action == forward.ToBackend:
			x.step("maglev", "%s: backend %d %s", pick, first.Backend, x.to(first))
		default:
			x.step("maglev", "%s: backend %s: %s", pick, x.backend(first.Backend), x.outcome(first))
		}
	}
	x.e.NewFlow = x.to(first)
	if first.Action == forward.ToBackend && first.Carry {
		x.e.Carried = true
		x.step("dsr", "the backend's node serves direct server return: a new flow's first packets carry %s to it, and its replies leave from there",
			frontendString(datapath.Frontend{Addr: first.Frontend.Addr, Port: first.CarryPort, Proto: first.Frontend.Proto}))
	}
}

// verdict sums up the decisions (kept: a SYN on the live tuple, nil when it is balanced).
func (x *explainer) verdict(first, est forward.Decision, kept *forward.Decision) {
	newFlow, other := x.outcome(first), x.outcome(est)
	switch {
	case kept != nil && est.Conntrack == forward.CTUsed:
		x.e.Verdict = fmt.Sprintf("established packets %s; a SYN on its tuple: %s (kept while the flow lives); a new connection after it: %s",
			other, x.outcome(*kept), newFlow)
	case est.Conntrack == forward.CTUsed && x.q.Proto == datapath.TCP:
		x.e.Verdict = fmt.Sprintf("established packets %s; a new connection (SYN): %s", other, newFlow)
	case est.Conntrack == forward.CTUsed:
		x.e.Verdict = "datagrams " + other
	case est.Handshake:
		x.e.Verdict = fmt.Sprintf("the handshake in flight (its ACK) %s; a new connection (SYN): %s", other, newFlow)
	case est.FirstDatagram:
		x.e.Verdict = fmt.Sprintf("the flow's next datagram %s (where its first went); a new flow: %s", other, newFlow)
	case x.q.Proto != datapath.TCP:
		x.e.Verdict = "a new flow: " + newFlow
	case other == newFlow:
		x.e.Verdict = "a new connection (SYN), or a packet of an unknown one: " + newFlow
	default:
		x.e.Verdict = fmt.Sprintf("a new connection (SYN): %s; a packet of an unknown one: %s", newFlow, other)
	}
}

// WriteText writes the flow, one line per step, and the verdict.
func (e Explanation) WriteText(w io.Writer) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "flow\t%s -> %s/%s\n", e.Client, e.To, e.Proto)
	for _, st := range e.Steps {
		fmt.Fprintf(tw, "%s\t%s\n", st.Step, st.Says)
	}
	fmt.Fprintf(tw, "=>\t%s\n", e.Verdict)
	return tw.Flush()
}

// ageText says how long ago a handshake entry's time was, or that no clock reading of this boot
// explains it (datapath.AgeUnknown).
func ageText(age time.Duration) string {
	if age == datapath.AgeUnknown {
		return "at a time ahead of the clock (too long ago to tell)"
	}
	return fmt.Sprintf("%v ago", age.Round(time.Millisecond))
}
