// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestFilterBitMatchesDatapath: the address filter's bit as Go computes it (filterBit, which
// UpsertVIP sets) is the one the program tests (hash.h filter_bit): a SYN to each of 96 random
// VIP addresses, IPv4 and IPv6, is forwarded, not passed as traffic for no VIP. A hash that
// disagreed would leave almost every VIP's bit clear (96 bits of 65,536 are set). And with its
// bit cleared, a VIP's SYN is passed as not ours: the program does read that bit.
func TestFilterBitMatchesDatapath(t *testing.T) {
	g := newGW(t, Options{})
	d := g.dp
	must(t, d.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080}))
	must(t, d.UpsertBackend(2, datapath.Backend{Addr: be1v6, Port: 8080}))
	r := rand.New(rand.NewPCG(7, 11))
	type vip struct {
		a      netip.Addr
		client netip.Addr
	}
	var vips []vip
	for i := range 96 {
		var a netip.Addr
		client, be := client4, datapath.BackendID(1)
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte{198, 19, byte(r.IntN(256)), byte(1 + r.IntN(254))})
		} else {
			b := netip.MustParseAddr("2001:db8:f000::").As16()
			for j := 8; j < 16; j++ {
				b[j] = byte(r.IntN(256))
			}
			a, client, be = netip.AddrFrom16(b), client6, 2
		}
		id := datapath.VIPID(i + 1)
		must(t, d.UpsertVIP(datapath.Frontend{Addr: a, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: id}))
		must(t, d.SetMaglevTable(id, table(13, be)))
		vips = append(vips, vip{a, client})
	}
	shared := map[uint32]int{}
	for _, v := range vips {
		shared[filterBit(v.a)]++
	}
	passed, cleared := 0, 0
	for i, v := range vips {
		syn := pk{SrcMAC: macClient, DstMAC: macExt, Src: ap(v.client, uint16(30000+i)), Dst: ap(v.a, 80),
			Proto: layers.IPProtocolTCP, Flags: "S"}
		bit := filterBit(v.a)
		if res := g.run(t, syn.bytes(t), g.ext); res.Verdict != xdpRedirect {
			passed++
			t.Errorf("SYN to VIP %v (filter bit %d): verdict %d, want XDP_REDIRECT", v.a, bit, res.Verdict)
		}
		if shared[bit] > 1 {
			continue
		}
		// With exactly that bit clear the program must take the VIP for no VIP: it reads that
		// bit, and nothing else lets the packet through.
		var word uint64
		must(t, d.objs.AddrBitmap.Lookup(bit/64, &word))
		must(t, d.objs.AddrBitmap.Put(bit/64, word&^(1<<(bit%64))))
		if res := g.run(t, syn.bytes(t), g.ext); res.Verdict != xdpPass {
			t.Errorf("SYN to VIP %v with its filter bit %d clear: verdict %d, want XDP_PASS", v.a, bit, res.Verdict)
		}
		must(t, d.objs.AddrBitmap.Put(bit/64, word))
		cleared++
	}
	if passed == 0 {
		t.Logf("96 VIPs (48 IPv4, 48 IPv6) at random addresses: every SYN forwarded, and passed with "+
			"its filter bit cleared (%d VIPs whose bit no other VIP shares)", cleared)
	}
}
