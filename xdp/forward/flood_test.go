// SPDX-License-Identifier: Apache-2.0
package forward

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestFloodBudgets: a TCP packet of a flow whose handshake was not seen here (a random-tuple
// ACK) enters conntrack only within the mid-flow budget (NewFlowRate / MidFlowShare); one
// completing a handshake seen here within the new-flow budget; beyond either, it is forwarded
// all the same.
func TestFloodBudgets(t *testing.T) {
	b := setup(t, datapath.Settings{NewFlowRate: 16})
	now := time.Second
	for i := range 5 {
		p := tcp(uint16(9000+i), TCPACK, 1)
		d := b.Forward(&p, now)
		if d.Action != ToBackend || d.MidFlowLimited != (i >= 2) || d.RateLimited {
			t.Fatalf("ACK %d of an unseen handshake: %+v, want forwarded, mid-flow limited from the 3rd", i, d)
		}
	}
	if n, _ := b.FlowCount(); n != 2 {
		t.Fatalf("5 ACKs of unseen handshakes left %d flows, want 2", n)
	}
	for i := range 4 {
		syn, ack := tcp(uint16(9100+i), TCPSYN, 100), tcp(uint16(9100+i), TCPACK, 101)
		b.Forward(&syn, now)
		if d := b.Forward(&ack, now); !d.HandshakeHit || d.MidFlowLimited || d.RateLimited {
			t.Fatalf("the ACK of a handshake seen here: %+v, want recorded from the new-flow budget", d)
		}
	}
	if n, _ := b.FlowCount(); n != 6 {
		t.Fatalf("after 4 handshakes seen here: %d flows, want 6", n)
	}
	// The next window gives the mid-flow budget again.
	p := tcp(9005, TCPACK, 1)
	if d := b.Forward(&p, now+time.Second); d.MidFlowLimited {
		t.Fatalf("an ACK in the next window: %+v, want recorded", d)
	}
}

// TestEvictionByRecency: a full conntrack evicts the least recently used entries first (as the
// XDP datapath's LRU does): active flows survive a flood of new ones; a random eviction would
// take one of 8 active flows out of 64 entries with probability 1/8 per insert.
func TestEvictionByRecency(t *testing.T) {
	b := setup(t, datapath.Settings{ConntrackSize: 64, NewFlowRate: -1, UDPTimeout: time.Hour})
	udp := func(sport uint16) Packet {
		p := sidedPacketOf(netip.AddrPortFrom(client4, sport), netip.AddrPortFrom(vip4, 53), datapath.UDP)
		p.Len = 60
		return p
	}
	now := time.Second
	tick := func() time.Duration { now += time.Millisecond; return now }
	// Every flow sends two datagrams: the second makes its conntrack entry.
	for i := range 8 {
		p := udp(uint16(1000 + i))
		b.Forward(&p, tick())
		b.Forward(&p, tick())
	}
	for i := range 2000 {
		p := udp(uint16(20000 + i))
		b.Forward(&p, tick())
		b.Forward(&p, tick())
		if i%10 == 0 { // the active flows send again
			for j := range 8 {
				a := udp(uint16(1000 + j))
				if d := b.Forward(&a, tick()); d.Conntrack != CTUsed {
					t.Fatalf("active flow %d after %d flood flows: %+v, want still in conntrack", j, i, d)
				}
			}
		}
	}
	if n, _ := b.FlowCount(); n != 64 {
		t.Fatalf("conntrack holds %d flows, want 64 (its size)", n)
	}
}

// TestOneShotDatagramsSkipConntrack: a flood of one datagram per tuple (random sources, as a
// spoofed flood is) never enters conntrack, so it cannot evict the established flows there; each
// datagram is still balanced, and counted as a new flow.
func TestOneShotDatagramsSkipConntrack(t *testing.T) {
	b := setup(t, datapath.Settings{ConntrackSize: 64, NewFlowRate: -1, UDPTimeout: time.Hour})
	a := sidedPacketOf(netip.AddrPortFrom(client4, 1000), netip.AddrPortFrom(vip4, 53), datapath.UDP)
	b.Forward(&a, time.Second)
	b.Forward(&a, time.Second)
	for i := range 1000 {
		p := sidedPacketOf(netip.AddrPortFrom(client4, uint16(20000+i)), netip.AddrPortFrom(vip4, 53), datapath.UDP)
		if d := b.Forward(&p, time.Second); d.Action != ToBackend || !d.NewFlow || d.RateLimited {
			t.Fatalf("flood datagram %d: %+v, want balanced as a new flow", i, d)
		}
	}
	if n, _ := b.FlowCount(); n != 1 {
		t.Fatalf("conntrack holds %d flows after a one-shot flood, want 1 (the established flow)", n)
	}
	if d := b.Forward(&a, 2*time.Second); d.Conntrack != CTUsed {
		t.Fatalf("the established flow after the flood: %+v, want by conntrack", d)
	}
}
