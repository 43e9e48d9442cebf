// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// headerValid reports whether untagged frame f's IPv4 header checksum is right.
func headerValid(f []byte) bool {
	ihl := int(f[14]&0x0f) * 4
	var s uint32
	for i := 0; i < ihl; i += 2 {
		s += uint32(binary.BigEndian.Uint16(f[14+i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s) == 0xffff
}

// TestEngineNoLaunderedChecksum: as the XDP datapath's TestGoldenNoLaunderedChecksum, a frame
// whose IPv4 header checksum is wrong never leaves the engine with a right one, plain DNAT or
// carried (the carrier's insertion recomputed the checksum before).
func TestEngineNoLaunderedChecksum(t *testing.T) {
	for _, dsr := range []bool{false, true} {
		e := testEngine(t)
		if err := e.UpsertBackend(1, datapath.Backend{Addr: pBE[0], Port: 8080, DSR: dsr}); err != nil {
			t.Fatal(err)
		}
		good := frameSpec{src: netip.MustParseAddrPort("198.18.128.1:1234"), dst: netip.AddrPortFrom(pVIP, 80),
			proto: protoTCP, flags: tcpSYN, payload: []byte("hello")}.bytes()
		bad := append(make([]byte, 0, len(good)+64), good...) // room for the carrier
		bad[14+11] ^= 0x5a
		good = append(make([]byte, 0, len(good)+64), good...)
		v := e.Process(bad, 1, time.Second)
		if !v.Send {
			continue // dropped: nothing laundered
		}
		out := v.Frame
		if dsr && out[14]&0x0f != 7 {
			t.Errorf("DSR: no carrier (IHL %d)", out[14]&0x0f)
		}
		if headerValid(out) {
			t.Errorf("DSR %v: a header with a wrong checksum left with a right one", dsr)
		}
		v = e.Process(good, 1, time.Second)
		if !v.Send || !headerValid(v.Frame) {
			t.Errorf("DSR %v: a sound header: sent %v, right checksum %v", dsr, v.Send, v.Send && headerValid(v.Frame))
		}
	}
}
