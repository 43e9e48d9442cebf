// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// testSeed keys the budgets' shares in the budget tests (Options.budgetSeed): with it, the
// frontends and prefixes they use fall in distinct buckets.
const testSeed = 0x5eed

// inPrefix returns a's address in its i-th client prefix (IPv4 /24, IPv6 /48): the third byte
// (IPv4) or the sixth (IPv6) set to i.
func inPrefix(a netip.Addr, i int) netip.Addr {
	if a.Is4() {
		b := a.As4()
		b[2] = byte(i)
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	b[5] = byte(i)
	return netip.AddrFrom16(b)
}

// TestForgedCarrierKeepsFlow: two frontends share a Pod port (two Service ports on one target
// port). A live flow of one of them is never re-pointed to the other by a carried packet other
// than a SYN (a forged ACK, RST or data, which the gateway carries for a tuple it holds no
// state for): it is passed, counted carrier_conflict, and the Pod's replies still come from the
// flow's VIP. A carried SYN naming the other frontend only adds a candidate: the Pod answers it
// with a challenge ACK (its connection is alive), which leaves from the flow's VIP; only the
// Pod's SYN-ACK (a new connection on the tuple) commits the candidate. Before, the forged ACK
// overwrote the entry and the forged SYN deleted it: the replies left from the wrong VIP.
func TestForgedCarrierKeepsFlow(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{})
			vip, other, pod, cl := ap(fam.vip, 80), ap(fam.vip, 8000), ap(fam.pod, 8080), ap(fam.client, 40000)
			allow(t, d, vip, datapath.TCP, pod)
			allow(t, d, other, datapath.TCP, pod)
			in := func(flags string, via netip.AddrPort) pk {
				return pk{Src: cl, Dst: pod, Proto: layers.IPProtocolTCP, Flags: flags, Carrier: via}
			}
			out := func(flags string) pk {
				return pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: flags, Payload: []byte("data")}
			}
			from := func(p pk, src netip.AddrPort) pk { p.Src = src; return p }
			// The victim's connection through vip.
			for _, f := range []string{"S", "A"} {
				p := in(f, vip)
				expect(t, d, Ingress, "victim "+f, p.bytes(t), actOK, p.without().bytes(t))
			}
			flow := fmt.Sprintf("%s %s TCP %s", pod, cl, vip)
			checkFlows(t, d, "established", flow)

			for _, f := range []string{"A", "R", "FA", "PA"} {
				p := in(f, other)
				expect(t, d, Ingress, "forged "+f, p.bytes(t), actOK, p.without().bytes(t))
				checkFlows(t, d, "after a forged "+f, flow)
				expect(t, d, Egress, "reply after a forged "+f, out("A").bytes(t), actOK, from(out("A"), vip).bytes(t))
			}
			syn := in("S", other)
			expect(t, d, Ingress, "forged SYN", syn.bytes(t), actOK, syn.without().bytes(t))
			if full, half := tcpFlows(t, d); full != 1 || half != 1 {
				t.Errorf("after the forged SYN: %d flows, %d half-open; want the victim's, and a candidate", full, half)
			}
			expect(t, d, Egress, "challenge ACK", out("A").bytes(t), actOK, from(out("A"), vip).bytes(t))
			ack := in("A", other)
			expect(t, d, Ingress, "forged ACK after the forged SYN", ack.bytes(t), actOK, ack.without().bytes(t))
			expect(t, d, Egress, "reply after the forged handshake", out("A").bytes(t), actOK, from(out("A"), vip).bytes(t))
			checkCounters(t, d, "forged", map[string]uint64{"carrier_accepted": 3, "carrier_conflict": 5, "reply_rewritten": 6})

			// The victim's connection ends; a new one on the same tuple through the other
			// frontend: the Pod's SYN-ACK commits it.
			expect(t, d, Ingress, "new SYN", syn.bytes(t), actOK, syn.without().bytes(t))
			expect(t, d, Egress, "SYN-ACK", out("SA").bytes(t), actOK, from(out("SA"), other).bytes(t))
			checkFlows(t, d, "after the SYN-ACK", fmt.Sprintf("%s %s TCP %s", pod, cl, other))
			expect(t, d, Ingress, "new ACK", ack.bytes(t), actOK, ack.without().bytes(t))
			expect(t, d, Egress, "new connection's reply", out("A").bytes(t), actOK, from(out("A"), other).bytes(t))
			if c := counters(t, d); c["flow_repointed"] != 1 {
				t.Errorf("counters %v: want flow_repointed 1", c)
			}
		})
	}
}

// TestForgedDatagramKeepsFlow: a carried datagram naming another frontend than its tuple's
// live UDP flow leaves the flow as it is (carrier_conflict); once the flow expired, a carried
// datagram records the frontend it names.
func TestForgedDatagramKeepsFlow(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{})
			vip, other, pod, cl := ap(fam.vip, 53), ap(fam.vip, 5300), ap(fam.pod, 5353), ap(fam.client, 40000)
			allow(t, d, vip, datapath.UDP, pod)
			allow(t, d, other, datapath.UDP, pod)
			q := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: vip}
			expect(t, d, Ingress, "datagram", q.bytes(t), actOK, q.without().bytes(t))
			f := q
			f.Carrier = other
			expect(t, d, Ingress, "forged datagram", f.bytes(t), actOK, f.without().bytes(t))
			checkFlows(t, d, "", fmt.Sprintf("%s %s UDP %s", pod, cl, vip))
			a := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolUDP, Payload: []byte("a")}
			want := a
			want.Src = vip
			expect(t, d, Egress, "answer", a.bytes(t), actOK, want.bytes(t))
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 1, "carrier_conflict": 1, "reply_rewritten": 1})
		})
	}
}

// TestICMPOnlyFromPodOrNode: an ICMP error about a recorded flow is given the VIP only when it
// comes from the Pod it quotes or from the node; from another Pod of the node (one with
// NET_RAW) it is left alone and counted icmp_foreign. Before, anyone's was rewritten: a
// tenant could send a VIP's clients "unreachable" or a lowered path MTU from the VIP.
func TestICMPOnlyFromPodOrNode(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{})
			vip, pod, cl := ap(fam.vip, 53), ap(fam.pod, 5353), ap(fam.client, 40000)
			allow(t, d, vip, datapath.UDP, pod)
			q := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: vip}
			expect(t, d, Ingress, "datagram", q.bytes(t), actOK, q.without().bytes(t))
			quote := q.without()
			raw := quote.ip(t, quote.l4(t))
			tenant := inPrefix(fam.pod, 7) // another Pod of the node
			for _, from := range []netip.Addr{tenant, fam.vip, fam.client} {
				e := icmpError(t, from, fam.client, fam.icmpUnreach, fam.unreachCode, 0, raw)
				expect(t, d, Egress, "ICMP error from "+from.String(), e, actOK, nil)
			}
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 1, "icmp_foreign": 3})
			// The node's addresses changed: the old one no longer speaks for the VIP.
			must(t, d.SetNodeAddresses([]netip.Addr{tenant}))
			e := icmpError(t, fam.node, fam.client, fam.icmpTooBig, fam.tooBigCode, 1400, raw)
			expect(t, d, Egress, "ICMP error from a former node address", e, actOK, nil)
			e = icmpError(t, tenant, fam.client, fam.icmpTooBig, fam.tooBigCode, 1400, raw)
			if r := run(t, d, Egress, e); r.Verdict != actOK || string(r.Data) == string(e) {
				t.Errorf("ICMP error from the node's new address: verdict %d, rewritten %v", r.Verdict, string(r.Data) != string(e))
			}
		})
	}
}

// TestBudgetShares: one client prefix takes at most an eighth of a budget, one frontend at most
// a half; the rest stays for the others. Before, one frontend (or one client network) could
// spend a node's whole new-flow budget: every other Service's new UDP flows on the node were
// then never recorded.
func TestBudgetShares(t *testing.T) {
	const budget = 32 // prefix share 4, frontend share 16
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{UDPNewBudget: budget, SYNBudget: budget, budgetSeed: testSeed})
			pod := ap(fam.pod, 5353)
			flood, calm := ap(fam.vip, 53), ap(fam.vip, 54)
			allow(t, d, flood, datapath.UDP, pod)
			allow(t, d, calm, datapath.UDP, pod)
			port := uint16(10000)
			send := func(via netip.AddrPort, prefix, n int) {
				for range n {
					port++
					q := pk{Src: ap(inPrefix(fam.client, prefix), port), Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: via}
					expect(t, d, Ingress, "datagram", q.bytes(t), actOK, q.without().bytes(t))
				}
			}
			recorded := func() int {
				fs, err := d.Flows()
				must(t, err)
				return len(fs)
			}
			send(flood, 1, 10) // one prefix: 4 of them
			if n := recorded(); n != budget/PrefixShareDiv {
				t.Errorf("one prefix: %d flows recorded, want %d", n, budget/PrefixShareDiv)
			}
			for p := 2; p <= 8; p++ { // seven more prefixes, to the same frontend: 16 in all
				send(flood, p, 4)
			}
			if n := recorded(); n != budget/FrontendShareDiv {
				t.Errorf("one frontend: %d flows recorded, want %d", n, budget/FrontendShareDiv)
			}
			send(calm, 9, 4) // another frontend from another prefix: not starved
			if n := recorded(); n != budget/FrontendShareDiv+4 {
				t.Errorf("another frontend: %d flows recorded, want %d", n, budget/FrontendShareDiv+4)
			}
			c := counters(t, d)
			if c["budget_prefix_spent"] != 6 || c["budget_frontend_spent"] != 16 || c["udp_new_over_budget"] != 22 {
				t.Errorf("counters %v: want budget_prefix_spent 6, budget_frontend_spent 16, udp_new_over_budget 22", c)
			}

			// SYNs: one prefix's flood adds at most its share of candidates to half_open.
			tcpPod := ap(fam.pod, 8080)
			allow(t, d, ap(fam.vip, 80), datapath.TCP, tcpPod)
			for i := range 10 {
				s := pk{Src: ap(inPrefix(fam.client, 20), uint16(20000+i)), Dst: tcpPod, Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(fam.vip, 80)}
				expect(t, d, Ingress, "SYN", s.bytes(t), actOK, s.without().bytes(t))
			}
			if _, half := tcpFlows(t, d); half != budget/PrefixShareDiv {
				t.Errorf("%d half-open from one prefix, want %d", half, budget/PrefixShareDiv)
			}
			if c := counters(t, d); c["syn_over_budget"] != 6 {
				t.Errorf("counters %v: want syn_over_budget 6", c)
			}
		})
	}
}

// TestBadIPChecksumStaysBad: a packet whose IPv4 header checksum is wrong never leaves with a
// right one: removing the carrier and rewriting a reply's source update the checksum
// incrementally, so the error stays (the receiver drops it, as it would have dropped the
// packet as sent).
func TestBadIPChecksumStaysBad(t *testing.T) {
	d := newDP(t, Options{})
	vip, pod, cl := ap(vip4, 53), ap(pod4, 5353), ap(client4, 40000)
	allow(t, d, vip, datapath.UDP, pod)
	corrupt := func(f []byte) []byte {
		f = append([]byte(nil), f...)
		f[14+11] ^= 0x5a
		return f
	}
	valid := func(f []byte) bool {
		ihl := int(f[14]&0xf) * 4
		h := append([]byte(nil), f[14:14+ihl]...)
		sum := binary.BigEndian.Uint16(h[10:])
		h[10], h[11] = 0, 0
		return ipChecksum(h) == sum
	}
	q := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: vip}
	for _, c := range []struct {
		what string
		dir  Direction
		in   []byte
	}{
		{"carried datagram", Ingress, corrupt(q.bytes(t))},
		{"reply", Egress, corrupt(pk{Src: pod, Dst: cl, Proto: layers.IPProtocolUDP, Payload: []byte("a")}.bytes(t))},
	} {
		r := run(t, d, c.dir, c.in)
		if r.Verdict == actOK && string(r.Data) == string(c.in) {
			t.Errorf("%s: untouched (want it stripped or rewritten)", c.what)
		}
		if r.Verdict == actOK && valid(r.Data) {
			t.Errorf("%s: a bad header checksum left right", c.what)
		}
	}
}
