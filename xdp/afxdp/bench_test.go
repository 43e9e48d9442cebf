// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"net/netip"
	"testing"
	"time"
)

// BenchmarkProcessEstablished is the engine's cost per packet of an established TCP flow (the
// frame rewritten in place each time, as the worker does), over 1,000 flows.
func BenchmarkProcessEstablished(b *testing.B) {
	e := testEngine(b)
	frames := make([][]byte, 1000)
	for i := range frames {
		frames[i] = frameSpec{src: netip.AddrPortFrom(pClients.Addr(), uint16(1000+i)), dst: netip.AddrPortFrom(pVIP, 80),
			proto: protoTCP, flags: tcpACK}.bytes()
		e.Process(append([]byte(nil), frames[i]...), 1, time.Second)
	}
	buf := make([]byte, len(frames[0]))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		copy(buf, frames[i%len(frames)])
		if v := e.Process(buf, 1, time.Second); !v.Send {
			b.Fatal("not sent")
		}
	}
}
