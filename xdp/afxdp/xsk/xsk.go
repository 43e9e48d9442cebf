// SPDX-License-Identifier: Apache-2.0

// Package xsk is one AF_XDP socket: bound to one receive queue of one interface, with a UMEM
// of its own and its four rings (fill, RX, TX, completion). It moves frame addresses and
// descriptors through the rings and leaves the frame bookkeeping to its user.
//
// The rings are shared with the kernel: their producer and consumer indexes are read and written
// with atomic operations, which order the ring entries before the index that publishes them.
// The RX side (Fill, Receive) and the TX side (Transmit, Kick, TxQueued, Complete) use separate
// rings and may each have a goroutine of their own; each side is used by one goroutine at a
// time. FrameSize, RingSize, FD and Stats may be called from any, Close when neither side is in
// use.
package xsk

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultFrameSize is the size of a UMEM frame: a page, what copy mode and most drivers expect.
const DefaultFrameSize = 4096

// Options size a socket.
type Options struct {
	// Frames is the number of UMEM frames, a power of two.
	Frames int
	// FrameSize is each frame's size, 2048 or 4096; 0 means DefaultFrameSize.
	FrameSize int
	// RingSize is the number of entries of each ring, a power of two; 0 means Frames/2.
	RingSize int
}

// Socket is an open AF_XDP socket (see the package documentation for which methods may run
// concurrently).
type Socket struct {
	fd        int
	ifindex   int
	queue     int
	frameSize int
	umem      []byte
	// mmaps are the four rings' mappings, unmapped by Close (a mapping keeps the socket alive).
	mmaps    [][]byte
	fill     addrRing
	comp     addrRing
	rx, tx   descRing
	ringSize uint32
}

// addrRing is the fill or completion ring: frame addresses.
type addrRing struct {
	prod, cons *uint32
	entries    []uint64
	mask       uint32
}

// descRing is the RX or TX ring: descriptors (address, length, options).
type descRing struct {
	prod, cons *uint32
	entries    []unix.XDPDesc
	mask       uint32
}

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Open creates a socket with its UMEM and rings and binds it to queue of ifindex, in the calling
// thread's network namespace. The kernel picks zero-copy when the driver has it, else copy mode.
func Open(ifindex, queue int, o Options) (_ *Socket, err error) {
	if o.FrameSize == 0 {
		o.FrameSize = DefaultFrameSize
	}
	if o.RingSize == 0 {
		o.RingSize = o.Frames / 2
	}
	if !pow2(o.Frames) || !pow2(o.RingSize) || (o.FrameSize != 2048 && o.FrameSize != 4096) {
		return nil, fmt.Errorf("AF_XDP socket: %d frames of %d bytes, rings of %d: want powers of two and 2048- or 4096-byte frames",
			o.Frames, o.FrameSize, o.RingSize)
	}
	what := fmt.Sprintf("AF_XDP socket on interface %d queue %d", ifindex, queue)
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: socket: %w", what, err)
	}
	s := &Socket{fd: fd, ifindex: ifindex, queue: queue, frameSize: o.FrameSize, ringSize: uint32(o.RingSize)}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("%s: %w", what, err), s.Close())
		}
	}()
	s.umem, err = unix.Mmap(-1, 0, o.Frames*o.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("map the UMEM (%d bytes): %w", o.Frames*o.FrameSize, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)),
		Size: uint32(o.FrameSize)}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("register the UMEM: %w", err)
	}
	for _, r := range []struct {
		opt  int
		name string
	}{{unix.XDP_UMEM_FILL_RING, "fill"}, {unix.XDP_UMEM_COMPLETION_RING, "completion"},
		{unix.XDP_RX_RING, "RX"}, {unix.XDP_TX_RING, "TX"}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, o.RingSize); err != nil {
			return nil, fmt.Errorf("size the %s ring: %w", r.name, err)
		}
	}
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); errno != 0 {
		return nil, fmt.Errorf("ring offsets: %w", errno)
	}
	n := uint64(o.RingSize)
	descSize := uint64(unsafe.Sizeof(unix.XDPDesc{}))
	fill, err := s.mapRing(unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr.Desc+n*8)
	if err != nil {
		return nil, fmt.Errorf("map the fill ring: %w", err)
	}
	s.fill = addrRing{prod: u32At(fill, off.Fr.Producer), cons: u32At(fill, off.Fr.Consumer),
		entries: unsafe.Slice((*uint64)(unsafe.Pointer(&fill[off.Fr.Desc])), n), mask: uint32(n - 1)}
	comp, err := s.mapRing(unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr.Desc+n*8)
	if err != nil {
		return nil, fmt.Errorf("map the completion ring: %w", err)
	}
	s.comp = addrRing{prod: u32At(comp, off.Cr.Producer), cons: u32At(comp, off.Cr.Consumer),
		entries: unsafe.Slice((*uint64)(unsafe.Pointer(&comp[off.Cr.Desc])), n), mask: uint32(n - 1)}
	rx, err := s.mapRing(unix.XDP_PGOFF_RX_RING, off.Rx.Desc+n*descSize)
	if err != nil {
		return nil, fmt.Errorf("map the RX ring: %w", err)
	}
	s.rx = descRing{prod: u32At(rx, off.Rx.Producer), cons: u32At(rx, off.Rx.Consumer),
		entries: unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&rx[off.Rx.Desc])), n), mask: uint32(n - 1)}
	tx, err := s.mapRing(unix.XDP_PGOFF_TX_RING, off.Tx.Desc+n*descSize)
	if err != nil {
		return nil, fmt.Errorf("map the TX ring: %w", err)
	}
	s.tx = descRing{prod: u32At(tx, off.Tx.Producer), cons: u32At(tx, off.Tx.Consumer),
		entries: unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&tx[off.Tx.Desc])), n), mask: uint32(n - 1)}
	// The kernel releases a closed socket's hold on its queue from a work queue, a moment after
	// the close: a socket opened right after another was closed may find the queue busy.
	sa := &unix.SockaddrXDP{Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	for deadline := time.Now().Add(bindWait); ; time.Sleep(bindRetry) {
		err := unix.Bind(fd, sa)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return nil, fmt.Errorf("bind: %w", err)
		}
	}
}

// How long Open waits for a busy queue (see the bind in Open).
const (
	bindWait  = time.Second
	bindRetry = 5 * time.Millisecond
)

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt),
		uintptr(p), n, 0); errno != 0 {
		return errno
	}
	return nil
}

func (s *Socket) mapRing(pgoff int64, length uint64) ([]byte, error) {
	m, err := unix.Mmap(s.fd, pgoff, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	s.mmaps = append(s.mmaps, m)
	return m, nil
}

func u32At(m []byte, off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

// FD is the socket's file descriptor: for an XSKMAP entry, and for poll(2) (POLLIN: frames to
// receive).
func (s *Socket) FD() int { return s.fd }

// Frame returns n bytes of UMEM at addr, which may lie past the start of its frame (received
// frames start after the kernel's headroom); the slice ends, and its capacity too, at the frame's
// end at the latest.
func (s *Socket) Frame(addr uint64, n uint32) []byte {
	fs := uint64(s.frameSize)
	end := addr - addr%fs + fs
	return s.umem[addr:min(addr+uint64(n), end):end]
}

// FrameSize is the size of a UMEM frame.
func (s *Socket) FrameSize() int { return s.frameSize }

// RingSize is the number of entries of each ring.
func (s *Socket) RingSize() int { return int(s.ringSize) }

// Fill hands frame addresses to the kernel to receive into, as many as the fill ring has room
// for; it returns how many.
func (s *Socket) Fill(addrs []uint64) int {
	prod, cons := *s.fill.prod, atomic.LoadUint32(s.fill.cons)
	n := min(len(addrs), int(s.ringSize-(prod-cons)))
	for i := range n {
		s.fill.entries[(prod+uint32(i))&s.fill.mask] = addrs[i]
	}
	atomic.StoreUint32(s.fill.prod, prod+uint32(n))
	return n
}

// Receive takes up to len(out) received descriptors into out and returns how many. Their frames
// are the caller's until it fills them again.
func (s *Socket) Receive(out []unix.XDPDesc) int {
	cons, prod := *s.rx.cons, atomic.LoadUint32(s.rx.prod)
	n := min(len(out), int(prod-cons))
	for i := range n {
		out[i] = s.rx.entries[(cons+uint32(i))&s.rx.mask]
	}
	atomic.StoreUint32(s.rx.cons, cons+uint32(n))
	return n
}

// Transmit puts descriptors on the TX ring, as many as it has room for, and returns how many.
// The kernel sends them when kicked (Kick); their frames come back through Complete.
func (s *Socket) Transmit(descs []unix.XDPDesc) int {
	prod, cons := *s.tx.prod, atomic.LoadUint32(s.tx.cons)
	n := min(len(descs), int(s.ringSize-(prod-cons)))
	for i := range n {
		s.tx.entries[(prod+uint32(i))&s.tx.mask] = descs[i]
	}
	atomic.StoreUint32(s.tx.prod, prod+uint32(n))
	return n
}

// TxQueued is the number of descriptors on the TX ring the kernel has not taken yet.
func (s *Socket) TxQueued() int {
	return int(*s.tx.prod - atomic.LoadUint32(s.tx.cons))
}

// maxKicks bounds the sendto calls of one Kick: in copy mode each sends at most the kernel's TX
// batch (32 frames).
const maxKicks = 64

// Kick has the kernel send what is on the TX ring. In copy mode the kernel sends only inside
// sendto, at most a batch per call, answering EAGAIN while more is left and 0 once the ring is
// empty, so Kick calls it until then (or maxKicks times: the next Kick goes on). In zero-copy
// mode sendto only wakes the driver and answers 0 at once.
func (s *Socket) Kick() error {
	for range maxKicks {
		if s.TxQueued() == 0 {
			return nil
		}
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0, unix.ENOBUFS:
			return nil // sent, or woken; ENOBUFS: out of skbs, the next kick goes on
		case unix.EAGAIN, unix.EBUSY, unix.EINTR:
		default:
			return fmt.Errorf("AF_XDP socket on interface %d queue %d: send: %w", s.ifindex, s.queue, errno)
		}
	}
	return nil
}

// Complete takes up to len(out) addresses of sent frames into out and returns how many: those
// frames are the caller's again.
func (s *Socket) Complete(out []uint64) int {
	cons, prod := *s.comp.cons, atomic.LoadUint32(s.comp.prod)
	n := min(len(out), int(prod-cons))
	for i := range n {
		out[i] = s.comp.entries[(cons+uint32(i))&s.comp.mask]
	}
	atomic.StoreUint32(s.comp.cons, cons+uint32(n))
	return n
}

// Stats returns the kernel's counters of the socket (XDP_STATISTICS).
func (s *Socket) Stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	size := uint32(unsafe.Sizeof(st))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return st, fmt.Errorf("AF_XDP socket on interface %d queue %d: statistics: %w", s.ifindex, s.queue, errno)
	}
	return st, nil
}

// Close unmaps the rings and the UMEM and closes the socket; the queue is free again. Calling it
// again does nothing.
func (s *Socket) Close() error {
	var errs []error
	for _, m := range s.mmaps {
		errs = append(errs, unix.Munmap(m))
	}
	s.mmaps = nil
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	return errors.Join(errs...)
}
