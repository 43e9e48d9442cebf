// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
)

// family is one address family's test addresses.
type family struct {
	name                    string
	client, vip, pod, node  netip.Addr
	icmpTooBig, icmpUnreach uint8 // frag needed / packet too big, and destination unreachable
	tooBigCode, unreachCode uint8
}

var families = []family{
	{"IPv4", client4, vip4, pod4, node4, 3, 3, 4, 3},
	{"IPv6", client6, vip6, pod6, node6, 2, 1, 0, 4},
}

var protos = []layers.IPProtocol{layers.IPProtocolTCP, layers.IPProtocolUDP}

// TestGoldenFlow: for each family and protocol, a carried packet of an allowed pair comes out
// exactly as the packet without the carrier (checksums as gopacket computes them) and records
// its flow; the Pod's reply comes out from the VIP and service port; ICMP errors about the
// flow, from the node and from the Pod, come out from the VIP quoting the client's packet to
// the VIP, whole or cut short.
func TestGoldenFlow(t *testing.T) {
	for _, fam := range families {
		for _, proto := range protos {
			t.Run(fmt.Sprintf("%s/%s", fam.name, proto), func(t *testing.T) {
				d := newDP(t, Options{})
				vip, pod, cl := ap(fam.vip, 80), ap(fam.pod, 8080), ap(fam.client, 40000)
				allow(t, d, vip, protoOf(proto), pod)
				fwd := pk{Src: cl, Dst: pod, Proto: proto, Flags: "S", Payload: []byte("hello"), Carrier: vip, ID: 7}
				expect(t, d, Ingress, "carried packet", fwd.bytes(t), actOK, fwd.without().bytes(t))
				checkFlows(t, d, "after the carried packet", fmt.Sprintf("%s %s %s %s", pod, cl, protoOf(proto), vip))
				checkCounters(t, d, "after the carried packet", map[string]uint64{"carrier_accepted": 1})

				// Not carried: untouched, whatever it is.
				expect(t, d, Ingress, "packet without carrier", fwd.without().bytes(t), actOK, nil)

				reply := pk{Src: pod, Dst: cl, Proto: proto, Flags: "SA", Payload: []byte("world!"), ID: 9}
				want := reply
				want.Src = vip
				expect(t, d, Egress, "reply", reply.bytes(t), actOK, want.bytes(t))

				// The same reply to another client port: no flow, untouched.
				other := reply
				other.Dst = ap(fam.client, 40001)
				expect(t, d, Egress, "reply of an unknown flow", other.bytes(t), actOK, nil)

				// ICMP errors about the flow: the quoted packet is the client's packet to the
				// Pod, whole or cut after 8 bytes of L4 (no TCP checksum in it then).
				quoteTo := func(dst netip.AddrPort) pk {
					return pk{Src: cl, Dst: dst, Proto: proto, Flags: "A", Payload: []byte("0123456789abcdef"), ID: 11}
				}
				q := quoteTo(pod).without()
				qv := quoteTo(vip).without()
				full, fullV := q.ip(t, q.l4(t)), qv.ip(t, qv.l4(t))
				hl := 20
				if fam.name == "IPv6" {
					hl = 40
				}
				for _, c := range []struct {
					name       string
					from       netip.Addr
					typ, code  uint8
					rest       uint32
					quote, exp []byte
				}{
					{"too big from the node, whole quote", fam.node, fam.icmpTooBig, fam.tooBigCode, 1400, full, fullV},
					{"too big from the node, short quote", fam.node, fam.icmpTooBig, fam.tooBigCode, 1400, full[:hl+8], fullV[:hl+8]},
					{"unreachable from the Pod", fam.pod, fam.icmpUnreach, fam.unreachCode, 0, full, fullV},
				} {
					in := icmpError(t, c.from, fam.client, c.typ, c.code, c.rest, c.quote)
					out := icmpError(t, fam.vip, fam.client, c.typ, c.code, c.rest, c.exp)
					expect(t, d, Egress, "ICMP "+c.name, in, actOK, out)
				}
				// An ICMP error to someone else than the flow's client, and one about another
				// flow: untouched.
				expect(t, d, Egress, "ICMP to another host", icmpError(t, fam.node, fam.node, fam.icmpTooBig, fam.tooBigCode, 1400, full), actOK, nil)
				q2 := quoteTo(ap(fam.pod, 8081)).without()
				expect(t, d, Egress, "ICMP about another flow", icmpError(t, fam.node, fam.client, fam.icmpTooBig, fam.tooBigCode, 1400, q2.ip(t, q2.l4(t))), actOK, nil)
				checkCounters(t, d, "at the end", map[string]uint64{"carrier_accepted": 1, "reply_rewritten": 1, "icmp_rewritten": 3})
			})
		}
	}
}

// TestGoldenAllPorts: an all-ports frontend accepts a carrier for any port, as long as the
// endpoint's port is the VIP's (the gateway keeps the port); the reply keeps its port.
func TestGoldenAllPorts(t *testing.T) {
	d := newDP(t, Options{})
	allow(t, d, ap(vip4, 0), protoOf(layers.IPProtocolTCP), ap(pod4, 0))
	cl := ap(client4, 40000)
	ok := pk{Src: cl, Dst: ap(pod4, 443), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 443)}
	expect(t, d, Ingress, "same port", ok.bytes(t), actOK, ok.without().bytes(t))
	moved := pk{Src: cl, Dst: ap(pod4, 8443), Proto: layers.IPProtocolTCP, Flags: "S", Carrier: ap(vip4, 443)}
	expect(t, d, Ingress, "another port", moved.bytes(t), actShot, nil)
	udp := ok
	udp.Proto = layers.IPProtocolUDP
	expect(t, d, Ingress, "another protocol", udp.bytes(t), actShot, nil)
	checkFlows(t, d, "", fmt.Sprintf("%s %s TCP %s", ap(pod4, 443), cl, ap(vip4, 443)))
	reply := pk{Src: ap(pod4, 443), Dst: cl, Proto: layers.IPProtocolTCP, Flags: "SA"}
	want := reply
	want.Src = ap(vip4, 443)
	expect(t, d, Egress, "reply", reply.bytes(t), actOK, want.bytes(t))
	checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 1, "drop_carrier_not_allowed": 2, "reply_rewritten": 1})
}

// TestGoldenUDPChecksums: an IPv4 UDP reply without checksum (0) stays without; an IPv6 one
// (invalid) is dropped rather than sent from the VIP with a checksum nobody can check.
func TestGoldenUDPChecksums(t *testing.T) {
	d := newDP(t, Options{})
	for _, fam := range families {
		vip, pod, cl := ap(fam.vip, 53), ap(fam.pod, 5353), ap(fam.client, 40000)
		allow(t, d, vip, protoOf(layers.IPProtocolUDP), pod)
		fwd := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: vip}
		expect(t, d, Ingress, fam.name+" carried", fwd.bytes(t), actOK, fwd.without().bytes(t))
		reply := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolUDP, Payload: []byte("answer"), UDPZeroCsum: true}
		if fam.name == "IPv4" {
			want := reply
			want.Src = vip
			expect(t, d, Egress, "IPv4 reply without checksum", reply.bytes(t), actOK, want.bytes(t))
		} else {
			expect(t, d, Egress, "IPv6 reply with checksum 0", reply.bytes(t), actShot, nil)
		}
	}
	checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 2, "reply_rewritten": 1, "drop_udp6_zero_csum": 1})
}
