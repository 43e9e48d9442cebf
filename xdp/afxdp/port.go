// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp/afxdp/xsk"
)

// Socket sizes. Each socket's UMEM is split in two: the first half of its frames receive (they
// sit in the fill ring, the RX ring, or are being processed), the second half transmit (free,
// or on the TX or completion ring).
const (
	// DefaultFrames is the number of UMEM frames of each socket.
	DefaultFrames = 4096
	// batchSize is the most frames taken from one RX ring in one go.
	batchSize = 64
)

// socket is one AF_XDP socket and the bookkeeping of its frames. It is received from by the
// worker of its queue, sent through by any worker (under txMu), and opened and closed under the
// datapath's lock when no worker sees it.
type socket struct {
	xs      *xsk.Socket
	ifindex int
	queue   int
	// txMu guards the TX side (free, descs, done, the TX and completion rings): workers of
	// other queues send through this socket when their egress has fewer queues. The RX side
	// (rx, addrs, the fill and RX rings) is the owning worker's alone.
	txMu sync.Mutex
	// free are the TX frames neither on the TX ring nor waiting for completion.
	free []uint64
	// rx, descs and done are reused buffers: received descriptors, descriptors to send, and
	// completed addresses.
	rx    []unix.XDPDesc
	descs []unix.XDPDesc
	addrs []uint64
	done  []uint64
	// received counts the frames taken from the RX ring.
	received atomic.Uint64
}

// openSocket opens a socket with frames UMEM frames on queue of ifindex (in the calling thread's
// network namespace) and fills its fill ring with the first half.
func openSocket(ifindex, queue, frames int) (*socket, error) {
	xs, err := xsk.Open(ifindex, queue, xsk.Options{Frames: frames})
	if err != nil {
		return nil, err
	}
	s := &socket{xs: xs, ifindex: ifindex, queue: queue, rx: make([]unix.XDPDesc, batchSize),
		descs: make([]unix.XDPDesc, 0, batchSize), done: make([]uint64, xs.RingSize())}
	half := frames / 2
	fill := make([]uint64, half)
	for i := range fill {
		fill[i] = uint64(i * xs.FrameSize())
	}
	if n := xs.Fill(fill); n != half {
		return nil, fmt.Errorf("AF_XDP socket on interface %d queue %d: the fill ring took %d of %d frames (%w)",
			ifindex, queue, n, half, xs.Close())
	}
	for i := half; i < frames; i++ {
		s.free = append(s.free, uint64(i*xs.FrameSize()))
	}
	return s, nil
}

// complete takes back the TX frames the kernel has sent. txMu must be held.
func (s *socket) complete() {
	n := s.xs.Complete(s.done)
	s.free = append(s.free, s.done[:n]...)
}

// send copies frames into free TX frames, puts them on the TX ring and has the kernel send them.
// It returns how many it could not send (no free frame, a frame too long, a full TX ring).
func (s *socket) send(frames [][]byte) (dropped int, err error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.complete()
	descs := s.descs[:0]
	for _, f := range frames {
		if len(s.free) == 0 || len(f) > s.xs.FrameSize() {
			dropped++
			continue
		}
		addr := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		copy(s.xs.Frame(addr, uint32(len(f))), f)
		descs = append(descs, unix.XDPDesc{Addr: addr, Len: uint32(len(f))})
	}
	if len(descs) == 0 {
		return dropped, nil
	}
	n := s.xs.Transmit(descs)
	for _, d := range descs[n:] {
		s.free = append(s.free, d.Addr)
	}
	return dropped + len(descs) - n, s.xs.Kick()
}

// kick has the kernel send what a busy moment left on the TX ring, and takes back what it sent.
func (s *socket) kick() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	err := s.xs.Kick()
	s.complete()
	return err
}

// receive returns up to batchSize received descriptors; give them back with refill.
func (s *socket) receive() []unix.XDPDesc {
	n := s.xs.Receive(s.rx)
	if n > 0 {
		s.received.Add(uint64(n))
	}
	return s.rx[:n]
}

// frame is the bytes of a received descriptor.
func (s *socket) frame(d unix.XDPDesc) []byte { return s.xs.Frame(d.Addr, d.Len) }

// refill gives received frames back to the fill ring.
func (s *socket) refill(descs []unix.XDPDesc) {
	addrs := s.addrs[:0]
	for _, d := range descs {
		// In aligned mode the kernel may hand back an address with an offset into its frame.
		addrs = append(addrs, d.Addr-d.Addr%uint64(s.xs.FrameSize()))
	}
	s.addrs = addrs
	s.xs.Fill(addrs)
}

// kernelStats returns the kernel's counters of the socket.
func (s *socket) kernelStats() (unix.XDPStatistics, error) { return s.xs.Stats() }

func (s *socket) close() error { return s.xs.Close() }
