package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
)

// murmur32 is MurmurHash3 x86_32 of b (len(b) a multiple of 4) built from the same mix and
// finaliser as FlowHash, so the published test vectors check them.
func murmur32(seed uint32, b []byte) uint32 {
	h := seed
	for i := 0; i+4 <= len(b); i += 4 {
		h = murmurMix(h, binary.LittleEndian.Uint32(b[i:]))
	}
	return murmurFinal(h, uint32(len(b)))
}

func TestMurmurVectors(t *testing.T) {
	for _, v := range []struct {
		seed uint32
		in   string
		want uint32
	}{
		{0, "", 0},
		{1, "", 0x514e28b7},
		{0, "test", 0xba6bd213},
		{0x9747b28c, "aaaa", 0x5a97808a},
		{0x9747b28c, "abcd", 0xf0478627},
	} {
		if got := murmur32(v.seed, []byte(v.in)); got != v.want {
			t.Errorf("murmur3(%q, %#x) = %#x, want %#x", v.in, v.seed, got, v.want)
		}
	}
}

// TestFlowHashLayout pins down what FlowHash covers: the address bytes, then the ports as on the
// wire, then the protocol as a little-endian word.
func TestFlowHashLayout(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.10")
	b := append(a.AsSlice(), 0x9c, 0x40, 0x00, 0x50, 6, 0, 0, 0) // sport 40000, dport 80, TCP
	if got, want := FlowHash(7, a, 40000, 80, 6, false), murmur32(7, b); got != want {
		t.Errorf("FlowHash v4 = %#x, want murmur3 of the wire bytes %#x", got, want)
	}
	if got, want := FlowHash(7, a, 40000, 80, 6, true), murmur32(7, a.AsSlice()); got != want {
		t.Errorf("FlowHash ClientIP = %#x, want %#x", got, want)
	}
	v6 := netip.MustParseAddr("2001:db8::10")
	b6 := append(v6.AsSlice(), 0x9c, 0x40, 0x00, 0x50, 17, 0, 0, 0)
	if got, want := FlowHash(7, v6, 40000, 80, 17, false), murmur32(7, b6); got != want {
		t.Errorf("FlowHash v6 = %#x, want %#x", got, want)
	}
	if FlowHash(1, a, 40000, 80, 6, false) == FlowHash(2, a, 40000, 80, 6, false) {
		t.Error("the seed does not change the hash")
	}
}

// TestFilterBitSpread: the address filter hash (and the next-hop cache slot, its top
// nhCacheLog2 bits: bpf/fib.h) spreads the address sets a site has (a /24, an IPv6 /120, IPv6
// sites × hosts) about as a random function would: 256 addresses into 65,536 bits collide
// about once, into 1,024 slots about 30 times.
func TestFilterBitSpread(t *testing.T) {
	sets := map[string][]netip.Addr{}
	for i := range 256 {
		sets["198.18.7.0/24"] = append(sets["198.18.7.0/24"], netip.AddrFrom4([4]byte{198, 18, 7, byte(i)}))
		b := netip.MustParseAddr("2001:db8:100::").As16()
		b[15] = byte(i)
		sets["2001:db8:100::/120"] = append(sets["2001:db8:100::/120"], netip.AddrFrom16(b))
		sets["2001:db8:S::H"] = append(sets["2001:db8:S::H"],
			netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::%x", i/16+1, i%16+1)))
	}
	for name, addrs := range sets {
		bitsSeen, slots := map[uint32]bool{}, map[uint32]bool{}
		for _, a := range addrs {
			bitsSeen[filterBit(a)] = true
			slots[filterBit(a)>>(addrFilterLog2-nhCacheLog2)] = true
		}
		t.Logf("%s: 256 addresses on %d filter bits, %d next-hop slots", name, len(bitsSeen), len(slots))
		if len(bitsSeen) < 250 || len(slots) < 200 {
			t.Errorf("%s: 256 addresses on %d filter bits and %d next-hop slots, want ≥ 250 and ≥ 200",
				name, len(bitsSeen), len(slots))
		}
	}
}
