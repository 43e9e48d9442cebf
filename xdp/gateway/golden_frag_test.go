// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// Fragments (frag.h): the fragments table remembers only first fragments the
// datapath accepted, for FRAG_TIMEOUT_NS, at most FRAG_BUDGET per second.

// fragTimeout and fragBudget mirror FRAG_TIMEOUT_NS and FRAG_BUDGET (consts.h): the tests below
// fail if they disagree.
const (
	fragTimeout = 2 * time.Second
	fragBudget  = 16384
)

// fragEntries counts the entries of map frags.
func fragEntries(t *testing.T, g *gw) int {
	t.Helper()
	var (
		k xlbFragKey
		v xlbFragPorts
		n int
	)
	it := g.dp.objs.Frags.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	return n
}

// freezeClock stops the loader's clock and sets the datapath's to at (in the future of the kernel
// clock, so the datapath does not fall back to it); setClock moves it.
func freezeClock(t *testing.T, g *gw) (setClock func(ns uint64)) {
	t.Helper()
	d := g.dp
	d.stopClock()
	<-d.clockDone
	d.stopClock = nil
	return func(ns uint64) {
		must(t, d.objs.Clock.Put(uint32(0), &xlbClockValue{Ns: ns, Gen: d.gen}))
	}
}

// fragUDP is a 200-byte UDP datagram from client4:7000 (or client6) to vip:53, IP ID id, and what
// its backend (VIP 2 or 5) receives.
func fragUDP(v6 bool, id uint16) (in, out pk, split func(pk, testing.TB, int) ([]byte, []byte)) {
	payload := make([]byte, 200)
	for i := range payload {
		payload[i] = byte(i)
	}
	in = pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 7000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: payload, IPID: id}
	out = in
	out.SrcMAC, out.DstMAC, out.Dst, out.TTL = macInt, macBE2, ap(be2v4, 5353), 63
	split = pk.fragments4
	if v6 {
		in.Src, in.Dst = ap(client6, 7000), ap(vip6, 53)
		out.Src, out.Dst = in.Src, ap(be2v6, 5353)
		split = pk.fragments6
	}
	return in, out, split
}

// TestGoldenFragmentsOnlyAccepted: a first fragment the datapath drops (a client outside the
// VIP's source ranges, a VIP address on an unserved port, a client on the cluster side) leaves no
// entry, so its later fragments are dropped too; an accepted one leaves exactly one. Before,
// every first fragment to a VIP or from a backend address was written, before any check.
func TestGoldenFragmentsOnlyAccepted(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	siteSources(t, g)
	payload := make([]byte, 200)
	drop := func(r Reason) want { return want{xdpDrop, nil, map[Reason]uint64{r: 1}} }
	cases := []struct {
		name   string
		in     pk
		ifidx  int
		reason Reason
	}{
		{"outside the source ranges", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(netip.MustParseAddr("198.18.0.100"), 43000), Dst: ap(vip4, 443), Proto: layers.IPProtocolTCP, Flags: "S", Payload: payload, IPID: 11}, g.ext, ReasonDropSrcRange},
		{"unserved port", pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(client4, 7000), Dst: ap(vip4, 54), Proto: layers.IPProtocolUDP, Payload: payload, IPID: 12}, g.ext, ReasonDropVIPUnserved},
		{"client on the cluster side", pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(client4, 7000), Dst: ap(vip4, 53), Proto: layers.IPProtocolUDP, Payload: payload, IPID: 13}, g.int, ReasonDropWrongSide},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := c.in.fragments4(t, 96)
			g.expect(t, a, c.ifidx, drop(c.reason))
			if n := fragEntries(t, g); n != 0 {
				t.Fatalf("a dropped first fragment left %d frags entries", n)
			}
			g.expect(t, b, c.ifidx, drop(ReasonDropFragUnknown))
		})
	}
	t.Run("accepted", func(t *testing.T) {
		in, out, split := fragUDP(false, 14)
		a, b := split(in, t, 96)
		wa, wb := split(out, t, 96)
		g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
		if n := fragEntries(t, g); n != 1 {
			t.Fatalf("an accepted first fragment left %d frags entries, want 1", n)
		}
		g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
	})
	t.Run("a backend's reply, reverse-NATed", func(t *testing.T) {
		in := pk{SrcMAC: macBE2, DstMAC: macInt, Src: ap(be2v4, 5353), Dst: ap(client4, 7000), Proto: layers.IPProtocolUDP, Payload: payload, IPID: 15}
		out := in
		out.SrcMAC, out.DstMAC, out.Src, out.TTL = macExt, macClient, ap(vip4, 53), 63
		a, b := in.fragments4(t, 96)
		wa, wb := out.fragments4(t, 96)
		r := map[Reason]uint64{ReasonNATReverse: 1, ReasonFwdRedirect: 1}
		g.expect(t, a, g.int, want{xdpRedirect, wa, r})
		g.expect(t, b, g.int, want{xdpRedirect, wb, r})
	})
}

// TestGoldenFragmentExpiry: an entry older than FRAG_TIMEOUT_NS no longer gives its ports to a
// fragment with the same IP ID (a later datagram reusing it, whose first fragment was lost or
// dropped): the fragment is dropped as of an unknown datagram and the entry deleted. Before, it
// went to the old datagram's backend, however old the entry.
func TestGoldenFragmentExpiry(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	setClock := freezeClock(t, g)
	t0 := monotonicNow() + uint64(time.Hour)
	for _, v6 := range []bool{false, true} {
		name := "v4"
		if v6 {
			name = "v6"
		}
		t.Run(name, func(t *testing.T) {
			in, out, split := fragUDP(v6, 0x4343)
			a, b := split(in, t, 96)
			wa, wb := split(out, t, 96)
			setClock(t0)
			g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
			// Within the timeout, a fragment of the datagram follows it.
			setClock(t0 + uint64(fragTimeout))
			g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
			// Past it, the same ID is another datagram.
			setClock(t0 + uint64(fragTimeout) + 1)
			g.expect(t, b, g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropFragUnknown: 1, ReasonFragExpired: 1}})
			if n := fragEntries(t, g); n != 0 {
				t.Fatalf("the expired entry was not deleted: %d frags entries", n)
			}
			g.expect(t, b, g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropFragUnknown: 1}})
			// Its own first fragment makes the new datagram known again.
			g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
			g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
			must(t, g.dp.objs.Frags.Delete(firstFragKey(t, g)))
		})
	}
}

// firstFragKey is the key of the only frags entry.
func firstFragKey(t *testing.T, g *gw) *xlbFragKey {
	t.Helper()
	var (
		k xlbFragKey
		v xlbFragPorts
	)
	it := g.dp.objs.Frags.Iterate()
	if !it.Next(&k, &v) {
		t.Fatalf("no frags entry: %v", it.Err())
	}
	return &k
}

// TestGoldenFragmentBudget: at most FRAG_BUDGET first fragments are remembered per second over
// all CPUs; the next is still forwarded, counted as frag_rate_limited, and its later fragments
// are dropped. A new second brings a new budget. Before, a first-fragment flood replaced every
// entry of the table (an LRU) without limit.
func TestGoldenFragmentBudget(t *testing.T) {
	g := newGW(t, Options{})
	services(t, g)
	setClock := freezeClock(t, g)
	t0 := monotonicNow() + uint64(time.Hour)
	setClock(t0)
	for id := 1; id <= fragBudget; id++ {
		in, _, split := fragUDP(false, uint16(id))
		a, _ := split(in, t, 96)
		if res := g.run(t, a, g.ext); res.Verdict != xdpRedirect {
			t.Fatalf("first fragment %d: verdict %s", id, verdictNames[res.Verdict])
		}
	}
	if n := fragEntries(t, g); n != fragBudget {
		t.Fatalf("%d frags entries after %d first fragments, want %d", n, fragBudget, fragBudget)
	}
	in, out, split := fragUDP(false, fragBudget+1)
	a, b := split(in, t, 96)
	wa, wb := split(out, t, 96)
	r := fwd(ReasonFwdRedirect)
	r[ReasonFragRateLimited] = 1
	g.expect(t, a, g.ext, want{xdpRedirect, wa, r})
	g.expect(t, b, g.ext, want{xdpDrop, nil, map[Reason]uint64{ReasonDropFragUnknown: 1}})
	// The next window.
	setClock(t0 + uint64(time.Second))
	g.expect(t, a, g.ext, want{xdpRedirect, wa, fwd(ReasonFwdRedirect)})
	g.expect(t, b, g.ext, want{xdpRedirect, wb, fwd(ReasonFwdRedirect)})
}
