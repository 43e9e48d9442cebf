// SPDX-License-Identifier: Apache-2.0
package dsr

import (
	"fmt"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Offsets of the client's address and port in IPv4 frames (withClient varies them).
const (
	carried4Src  = 14 + 12     // a carried packet's source address
	carried4Port = 14 + 20 + 8 // its source port: after the carrier's 8 bytes
	reply4Dst    = 14 + 16     // a reply's destination address
	reply4Port   = 14 + 20 + 2 // its destination port
)

// The sizes of the flood and budget tests.
const (
	floodTuples  = 3 * MinFlows     // distinct tuples of a flood: flows (MinFlows) three times over
	pickupBudget = 4                // the budgets of the budget tests
	budgetTries  = 3 * pickupBudget // packets of new flows the budget tests send
)

// tcpFlows counts the flows in flows (not half-open) and in half_open.
func tcpFlows(t *testing.T, d *Datapath) (full, half int) {
	t.Helper()
	fs, err := d.Flows()
	must(t, err)
	for _, f := range fs {
		if f.HalfOpen {
			half++
		} else {
			full++
		}
	}
	return full, half
}

// TestSYNFloodSparesFlows: a flood of carried SYNs of distinct tuples (three times the flows
// LRU's size, as the gateway carries every SYN) leaves flows alone: an idle established flow's
// replies are still rewritten after it, and so is the SYN-ACK of a flooded tuple (from
// half_open). Before half_open, the SYNs evicted the established flow.
func TestSYNFloodSparesFlows(t *testing.T) {
	// The SYN budget the most: the flood comes from one /24, whose share would stop it (what
	// TestBudgetShares checks); here every SYN reaches half_open.
	d := newDP(t, Options{Flows: MinFlows, SYNBudget: MaxBudget})
	vip, pod := ap(vip4, 80), ap(pod4, 8080)
	allow(t, d, vip, datapath.TCP, pod)

	// An established flow: its SYN and the handshake's ACK, both carried.
	cl := ap(client4, 40000)
	syn := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolTCP, Flags: "S", Carrier: vip}
	ack := syn
	ack.Flags = "A"
	expect(t, d, Ingress, "established SYN", syn.bytes(t), actOK, syn.without().bytes(t))
	expect(t, d, Ingress, "established ACK", ack.bytes(t), actOK, ack.without().bytes(t))
	reply := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: "A", Payload: []byte("data")}
	want := reply
	want.Src = vip

	// The flood: client addresses 198.18.1.0-2 (withClient's byte 3), every port.
	flood := pk{Src: ap(client4, 1), Dst: pod, Proto: layers.IPProtocolTCP, Flags: "S", Carrier: vip}.bytes(t)
	for i := range floodTuples {
		if r := run(t, d, Ingress, withClient(flood, i, carried4Src, carried4Port)); r.Verdict != actOK {
			t.Fatalf("flooded SYN %d: verdict %d", i, r.Verdict)
		}
	}
	if full, half := tcpFlows(t, d); full != 1 || half == 0 {
		t.Errorf("after the flood: %d flows, %d half-open; want 1 (the established one) and some", full, half)
	}
	expect(t, d, Egress, "established flow's reply after the flood", reply.bytes(t), actOK, want.bytes(t))

	// The SYN-ACK of the last flooded tuple (the most recent in half_open).
	synAck := pk{Src: pod, Dst: ap(client4, 1), Proto: layers.IPProtocolTCP, Flags: "SA"}
	synAckWant := synAck
	synAckWant.Src = vip
	// Both frames are patched after their checksums were computed: the program's incremental
	// update of the one gives the other's.
	last := floodTuples - 1
	expect(t, d, Egress, "SYN-ACK of a flooded tuple", withClient(synAck.bytes(t), last, reply4Dst, reply4Port),
		actOK, withClient(synAckWant.bytes(t), last, reply4Dst, reply4Port))
	if c := counters(t, d); c["carrier_accepted"] != floodTuples+2 || c["reply_rewritten"] != 2 {
		t.Errorf("counters %v: want carrier_accepted %d, reply_rewritten 2", c, floodTuples+2)
	}
}

// TestHandshakePromotes: for each family, a carried SYN records its flow in half_open (the
// SYN-ACK is rewritten from there), the handshake's carried ACK moves it into flows (without
// budget: a node whose pickup budget is spent still completes handshakes), and a retransmitted
// SYN of an established flow only refreshes it.
func TestHandshakePromotes(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{TCPPickupBudget: 1})
			vip, pod, cl := ap(fam.vip, 80), ap(fam.pod, 8080), ap(fam.client, 40000)
			allow(t, d, vip, datapath.TCP, pod)
			flow := fmt.Sprintf("%s %s TCP %s", pod, cl, vip)

			// Spend the pickup budget: a forged ACK of another tuple.
			forged := pk{Src: ap(fam.client, 50000), Dst: pod, Proto: layers.IPProtocolTCP, Flags: "A", Carrier: vip}
			expect(t, d, Ingress, "forged ACK", forged.bytes(t), actOK, forged.without().bytes(t))

			syn := pk{Src: cl, Dst: pod, Proto: layers.IPProtocolTCP, Flags: "S", Carrier: vip}
			expect(t, d, Ingress, "SYN", syn.bytes(t), actOK, syn.without().bytes(t))
			if full, half := tcpFlows(t, d); full != 1 || half != 1 {
				t.Errorf("after the SYN: %d flows, %d half-open; want the forged one, and the SYN's half-open", full, half)
			}
			synAck := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: "SA"}
			synAckWant := synAck
			synAckWant.Src = vip
			expect(t, d, Egress, "SYN-ACK", synAck.bytes(t), actOK, synAckWant.bytes(t))

			ack := syn
			ack.Flags = "A"
			expect(t, d, Ingress, "ACK", ack.bytes(t), actOK, ack.without().bytes(t))
			if full, half := tcpFlows(t, d); full != 2 || half != 0 {
				t.Errorf("after the ACK: %d flows, %d half-open; want 2 and none", full, half)
			}
			checkFlows(t, d, "after the ACK", flow, fmt.Sprintf("%s %s TCP %s", pod, forged.Src, vip))
			expect(t, d, Ingress, "SYN retransmitted", syn.bytes(t), actOK, syn.without().bytes(t))
			if full, half := tcpFlows(t, d); full != 2 || half != 0 {
				t.Errorf("after a retransmitted SYN: %d flows, %d half-open; want 2 and none", full, half)
			}
			data := pk{Src: pod, Dst: cl, Proto: layers.IPProtocolTCP, Flags: "A", Payload: []byte("data")}
			dataWant := data
			dataWant.Src = vip
			expect(t, d, Egress, "reply", data.bytes(t), actOK, dataWant.bytes(t))
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": 4, "reply_rewritten": 2})
		})
	}
}

// TestTCPPickupBudget: carried TCP packets other than a SYN of flows no table knows (forged
// ACKs, or a node that lost its state) are recorded up to the pickup budget a second; the
// others are delivered, stripped, unrecorded and counted, and their replies leave untouched.
// A recorded one's next carried packet takes no budget.
func TestTCPPickupBudget(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{TCPPickupBudget: pickupBudget, budgetSeed: testSeed})
			vip, pod := ap(fam.vip, 80), ap(fam.pod, 8080)
			allow(t, d, vip, datapath.TCP, pod)
			allow(t, d, ap(fam.vip, 81), datapath.TCP, pod)
			// Two frontends and a client prefix each: no share stops them, the budget does.
			ackOf := func(i int) pk {
				return pk{Src: ap(inPrefix(fam.client, i), uint16(50000+i)), Dst: pod, Proto: layers.IPProtocolTCP, Flags: "A", Carrier: ap(fam.vip, uint16(80+i%2))}
			}
			for i := range budgetTries {
				a := ackOf(i)
				expect(t, d, Ingress, fmt.Sprintf("forged ACK %d", i), a.bytes(t), actOK, a.without().bytes(t))
			}
			if full, half := tcpFlows(t, d); full != pickupBudget || half != 0 {
				t.Errorf("%d flows, %d half-open; want %d and none", full, half, pickupBudget)
			}
			first := ackOf(0)
			expect(t, d, Ingress, "recorded flow's next packet", first.bytes(t), actOK, first.without().bytes(t))
			over := pk{Src: pod, Dst: ackOf(budgetTries - 1).Src, Proto: layers.IPProtocolTCP, Flags: "A"}
			expect(t, d, Egress, "reply of an unrecorded flow", over.bytes(t), actOK, nil)
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": pickupBudget + 1, "tcp_pickup_over_budget": budgetTries - pickupBudget})
		})
	}
}

// TestUDPNewBudget: carried UDP datagrams of new flows are recorded up to the new-flow budget a
// second; the others are delivered, stripped, unrecorded and counted. A recorded flow's next
// datagram takes no budget, and its replies are rewritten.
func TestUDPNewBudget(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			d := newDP(t, Options{UDPNewBudget: pickupBudget, budgetSeed: testSeed})
			vip, pod := ap(fam.vip, 53), ap(fam.pod, 5353)
			allow(t, d, vip, datapath.UDP, pod)
			allow(t, d, ap(fam.vip, 54), datapath.UDP, pod)
			dgram := func(i int) pk {
				return pk{Src: ap(inPrefix(fam.client, i), uint16(50000+i)), Dst: pod, Proto: layers.IPProtocolUDP, Payload: []byte("q"), Carrier: ap(fam.vip, uint16(53+i%2))}
			}
			for i := range budgetTries {
				q := dgram(i)
				expect(t, d, Ingress, fmt.Sprintf("datagram %d", i), q.bytes(t), actOK, q.without().bytes(t))
			}
			fs, err := d.Flows()
			must(t, err)
			if len(fs) != pickupBudget {
				t.Errorf("%d flows, want %d", len(fs), pickupBudget)
			}
			first := dgram(0)
			expect(t, d, Ingress, "recorded flow's next datagram", first.bytes(t), actOK, first.without().bytes(t))
			answer := pk{Src: pod, Dst: first.Src, Proto: layers.IPProtocolUDP, Payload: []byte("a")}
			answerWant := answer
			answerWant.Src = first.Carrier
			expect(t, d, Egress, "reply of a recorded flow", answer.bytes(t), actOK, answerWant.bytes(t))
			over := answer
			over.Dst = dgram(budgetTries - 1).Src
			expect(t, d, Egress, "reply of an unrecorded flow", over.bytes(t), actOK, nil)
			checkCounters(t, d, "", map[string]uint64{"carrier_accepted": pickupBudget + 1, "udp_new_over_budget": budgetTries - pickupBudget, "reply_rewritten": 1})
		})
	}
}

// TestBudgetOptions: the budgets' bounds.
func TestBudgetOptions(t *testing.T) {
	for _, o := range []Options{{TCPPickupBudget: -1}, {UDPNewBudget: MaxBudget + 1}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o, err := Options{}.withDefaults()
	must(t, err)
	if o.TCPPickupBudget != DefaultTCPPickupBudget || o.UDPNewBudget != DefaultUDPNewBudget {
		t.Errorf("defaults %d, %d", o.TCPPickupBudget, o.UDPNewBudget)
	}
	if halfOpenSize(MinFlows) != MinHalfOpen || halfOpenSize(DefaultFlows) != DefaultFlows/16 {
		t.Error("half_open's size is not flows / 16 with a floor")
	}
}
