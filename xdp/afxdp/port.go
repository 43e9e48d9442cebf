package afxdp

import (
	"errors"
	"fmt"
	"unsafe"

	axdp "github.com/asavie/xdp"
	"golang.org/x/sys/unix"
)

// Socket sizes. Each socket's UMEM is split in two: the first half of its frames receive (they
// sit in the fill ring or are being processed), the second half transmit (free, or in the TX or
// completion ring).
const (
	// DefaultFrames is the number of UMEM frames of each socket.
	DefaultFrames = 4096
	// frameSize is the size of one UMEM frame: a page, the kernel's default.
	frameSize = 4096
	// batchSize is the most frames taken from one receive ring in one go.
	batchSize = 64
)

// socketOptions returns the asavie/xdp options of a socket with frames UMEM frames (a power of
// two): rings as large as each half, instead of the library's small defaults.
func socketOptions(frames int) axdp.SocketOptions {
	half := frames / 2
	return axdp.SocketOptions{NumFrames: frames, FrameSize: frameSize, FillRingNumDescs: half,
		CompletionRingNumDescs: half, RxRingNumDescs: half, TxRingNumDescs: half}
}

// socket is one AF_XDP socket, bound to one queue of one interface, with the frame bookkeeping
// asavie/xdp leaves to its user. It is used by the datapath's worker goroutine only.
type socket struct {
	sock    *axdp.Socket
	ifindex int
	queue   int
	// free are the TX frames not in flight; inflight the ones handed to the kernel, in order
	// (copy mode completes them in the order they were sent).
	free, inflight []uint64
	descs          []axdp.Desc
	// txSize is the TX ring's size.
	txSize int
}

// openSocket opens a socket on queue of ifindex (in the calling thread's network namespace)
// and fills its fill ring.
func openSocket(ifindex, queue, frames int) (*socket, error) {
	opts := socketOptions(frames)
	xs, err := axdp.NewSocket(ifindex, queue, &opts)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket on interface %d queue %d: %w", ifindex, queue, err)
	}
	half := frames / 2
	s := &socket{sock: xs, ifindex: ifindex, queue: queue, descs: make([]axdp.Desc, 0, batchSize), txSize: half}
	fill := make([]axdp.Desc, half)
	for i := range fill {
		fill[i] = axdp.Desc{Addr: uint64(i * frameSize), Len: frameSize}
	}
	if n := xs.Fill(fill); n != half {
		return nil, errors.Join(fmt.Errorf("AF_XDP socket on interface %d queue %d: fill ring took %d of %d frames",
			ifindex, queue, n, half), xs.Close())
	}
	for i := half; i < frames; i++ {
		s.free = append(s.free, uint64(i*frameSize))
	}
	return s, nil
}

// complete takes back the TX frames the kernel has sent.
func (s *socket) complete() {
	n := s.sock.NumCompleted()
	if n == 0 {
		return
	}
	n = min(n, len(s.inflight))
	s.sock.Complete(n)
	s.free = append(s.free, s.inflight[:n]...)
	s.inflight = append(s.inflight[:0], s.inflight[n:]...)
}

// send copies frames into free TX frames and hands them to the kernel. It returns how many it
// could not send (no free frame, or a full TX ring).
func (s *socket) send(frames [][]byte) (dropped int, err error) {
	s.complete()
	descs := s.descs[:0]
	for _, f := range frames {
		if len(s.free) == 0 || len(f) > frameSize {
			dropped++
			continue
		}
		addr := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		d := axdp.Desc{Addr: addr, Len: uint32(len(f))}
		copy(s.sock.GetFrame(d), f)
		descs = append(descs, d)
	}
	if len(descs) == 0 {
		return dropped, nil
	}
	n, err := s.transmit(descs)
	for _, d := range descs[n:] {
		s.free = append(s.free, d.Addr)
	}
	for _, d := range descs[:n] {
		s.inflight = append(s.inflight, d.Addr)
	}
	return dropped + len(descs) - n, err
}

// transmit puts descs on the TX ring with asavie/xdp's Transmit and has the kernel send them.
// Transmit panics when its kick (sendto) fails with anything but EINTR, EAGAIN or EBUSY (say,
// the interface went down): that is an error here.
func (s *socket) transmit(descs []axdp.Desc) (n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("AF_XDP transmit on interface %d queue %d: %v", s.ifindex, s.queue, r)
		}
	}()
	n = s.sock.Transmit(descs)
	return n, s.kick()
}

// maxKicks bounds the sendto calls of one kick: each sends at most the kernel's TX batch (32
// frames in copy mode), so a ring of several batches needs several.
const maxKicks = 64

// kick has the kernel send what is on the TX ring. In copy mode the kernel sends only inside
// sendto, at most a batch per call, answering EAGAIN when more is left: one call (asavie/xdp's)
// would strand the rest until the next transmit.
func (s *socket) kick() error {
	for range maxKicks {
		if s.sock.NumFreeTxSlots() >= s.txSize {
			return nil // the kernel took everything
		}
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.sock.FD()), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0, unix.EAGAIN, unix.EBUSY, unix.EINTR:
		default:
			return fmt.Errorf("AF_XDP transmit on interface %d queue %d: sendto: %w", s.ifindex, s.queue, errno)
		}
	}
	return nil
}

// receive returns up to batchSize received frames' descriptors; give them back with refill.
func (s *socket) receive() []axdp.Desc {
	n := s.sock.NumReceived()
	if n == 0 {
		return nil
	}
	return s.sock.Receive(min(n, batchSize))
}

// frame is the bytes of a received descriptor.
func (s *socket) frame(d axdp.Desc) []byte { return s.sock.GetFrame(d) }

// refill gives received frames back to the fill ring.
func (s *socket) refill(descs []axdp.Desc) { s.sock.Fill(descs) }

func (s *socket) close() error { return s.sock.Close() }

// kernelStats returns the kernel's counters of the socket (XDP_STATISTICS): frames it dropped
// because the RX ring was full or the fill ring empty, and invalid descriptors.
func (s *socket) kernelStats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	size := uint32(unsafe.Sizeof(st))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.sock.FD()), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return st, fmt.Errorf("AF_XDP socket statistics of interface %d queue %d: %w", s.ifindex, s.queue, errno)
	}
	return st, nil
}
