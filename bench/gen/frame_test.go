// SPDX-License-Identifier: Apache-2.0
package gen

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// csum folds the big-endian ones' complement sum of b; a valid header sums to 0xffff.
func csum(parts ...[]byte) uint16 {
	var s uint32
	for _, b := range parts {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// TestFrames runs the generator program once per frame (not live) and checks each frame: flow
// fields cycle as specified and the IPv4 and L4 checksums are valid, for TCP and UDP, whatever
// headers the page held before (live-frames pages come back rewritten).
func TestFrames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF)")
	}
	g, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, proto := range []Protocol{TCP, UDP} {
		spec := Spec{
			SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
			Src: netip.MustParseAddr("198.18.128.0"), SrcPort: 1000, PortsPerAddr: 3,
			Dst: netip.MustParseAddrPort("198.18.100.1:80"), Proto: proto, TCPFlags: FlagACK, Size: 64, Flows: 7,
		}
		if err := g.Configure(spec); err != nil {
			t.Fatal(err)
		}
		// Headers rewritten by someone else; the payload is zero, as the generator's initial
		// data is and as nothing downstream writes payload.
		garbage := make([]byte, frameAlign+spec.Size)
		for i := range frameAlign + MinSize {
			garbage[i] = byte(0xa5 ^ i)
		}
		for i := range 10 {
			ro := &ebpf.RunOptions{Data: garbage, DataOut: make([]byte, spec.Size+256), Repeat: 1}
			ret, err := g.Program().Run(ro)
			out := ro.DataOut
			if err != nil {
				t.Fatal(err)
			}
			if ret != 3 { // XDP_TX
				t.Fatalf("%s frame %d: verdict %d, want XDP_TX", proto, i, ret)
			}
			if len(out) != spec.Size {
				t.Fatalf("%s frame %d: %d bytes out, want %d (the %d in front moved past)", proto, i, len(out), spec.Size, frameAlign)
			}
			f := out[:spec.Size]
			flow := i % spec.Flows
			wantSrc := netip.AddrFrom4([4]byte{198, 18, 128, byte(flow / 3)})
			wantPort := uint16(1000 + flow%3)
			if src := netip.AddrFrom4([4]byte(f[26:30])); src != wantSrc {
				t.Errorf("%s frame %d: source %s, want %s", proto, i, src, wantSrc)
			}
			if p := binary.BigEndian.Uint16(f[34:]); p != wantPort {
				t.Errorf("%s frame %d: source port %d, want %d", proto, i, p, wantPort)
			}
			if s := csum(f[14:34]); s != 0xffff {
				t.Errorf("%s frame %d: IPv4 header sums to %#x, want 0xffff", proto, i, s)
			}
			l4 := f[34:]
			pseudo := append(append(append([]byte{}, f[26:34]...), 0, byte(proto)), byte(len(l4)>>8), byte(len(l4)))
			if s := csum(pseudo, l4); s != 0xffff {
				t.Errorf("%s frame %d: L4 checksum sums to %#x, want 0xffff", proto, i, s)
			}
		}
		sent, err := g.Sent()
		if err != nil {
			t.Fatal(err)
		}
		if proto == UDP && sent != 20 {
			t.Errorf("sent counter %d after 20 frames", sent)
		}
	}
}
