// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// worker is one goroutine serving receive queue q of every attached interface: it takes frames
// from those sockets, runs them through the engine and sends them out of their egress
// interface's socket of the same queue (queue 0's when the egress has fewer queues; a socket's
// TX side is locked, its RX side is the worker's alone). Worker 0 also sweeps idle flows; any
// worker releases frames held for a neighbour.
type worker struct {
	d *Datapath
	q int
	// view is what the worker serves, replaced (never modified) by publish; seen is the
	// generation of the view its current loop started with.
	view atomic.Pointer[workerView]
	seen atomic.Uint64
	// wakeR, wakeW: a pipe that interrupts the worker's poll.
	wakeR, wakeW int
	done         chan struct{}
	// lastErr is the worker's last error, logged once per distinct message (worker only).
	lastErr string
}

// workerView is one generation of a worker's sockets.
type workerView struct {
	gen uint64
	// rx are the sockets of the worker's queue; tx the egress socket of each interface.
	rx []*socket
	tx map[int]*socket
}

func newWorker(d *Datapath, q int) (*worker, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("worker %d: wake pipe: %w", q, err)
	}
	return &worker{d: d, q: q, wakeR: p[0], wakeW: p[1], done: make(chan struct{})}, nil
}

// wake interrupts the worker's poll.
func (w *worker) wake() { _, _ = unix.Write(w.wakeW, []byte{1}) }

// close closes the wake pipe, once the worker is done.
func (w *worker) close() error {
	return errors.Join(unix.Close(w.wakeR), unix.Close(w.wakeW))
}

// pin locks the worker to its thread and the thread to CPU WorkerCPU + q (modulo the CPUs).
func (w *worker) pin() {
	runtime.LockOSThread() // until the worker returns; the thread then ends with it
	cpu := (w.d.cfg.WorkerCPU + w.q) % runtime.NumCPU()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		w.d.log.Warn("AF_XDP datapath: worker not pinned", "queue", w.q, "cpu", cpu, "error", err)
	}
}

// run is the worker's loop, until ctx ends.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	if w.d.cfg.PinWorker {
		w.pin()
	}
	d, e := w.d, w.d.Engine
	out := map[int][][]byte{}
	var fds []unix.PollFd
	lastSweep := time.Duration(0)
	drain := make([]byte, 64)
	for ctx.Err() == nil {
		v := w.view.Load()
		w.seen.Store(v.gen)
		busy, held := false, false
		for _, s := range v.rx {
			descs := s.receive()
			if len(descs) == 0 {
				continue
			}
			busy = true
			now := d.now()
			for _, desc := range descs {
				f := s.frame(desc)
				if vd := e.Process(f, s.ifindex, now); vd.Send {
					out[vd.Ifindex] = append(out[vd.Ifindex], vd.Frame)
				}
			}
			// Frames are copied into the egress socket's UMEM before the received ones are
			// given back to the fill ring.
			for ifindex, frames := range out {
				if len(frames) == 0 {
					continue
				}
				w.transmit(v.tx[ifindex], frames)
				clear(frames) // no pointer into a UMEM outlives the batch
				out[ifindex] = frames[:0]
			}
			s.refill(descs)
		}
		// Any worker with frames held for a neighbour releases them (whichever comes first: the
		// engine locks), and polls briefly while some are held.
		if e.Held() > 0 {
			frames, ifindexes := e.Release(d.now())
			for i, f := range frames {
				w.transmit(v.tx[ifindexes[i]], [][]byte{f})
			}
			busy = busy || len(frames) > 0
			held = e.Held() > 0
		}
		if now := d.now(); w.q == 0 && now-lastSweep >= sweepEvery {
			e.Sweep(now, sweepBudget)
			lastSweep = now
		}
		if busy {
			continue
		}
		fds = append(fds[:0], unix.PollFd{Fd: int32(w.wakeR), Events: unix.POLLIN})
		for _, s := range v.rx {
			fds = append(fds, unix.PollFd{Fd: int32(s.xs.FD()), Events: unix.POLLIN})
		}
		for _, s := range v.tx {
			if err := s.kick(); err != nil { // what a busy kernel left on the ring
				w.logOnce(err)
			}
		}
		timeout := pollTimeout
		if held {
			timeout = heldPoll
		}
		if _, err := unix.Poll(fds, int(timeout/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
			w.logOnce(fmt.Errorf("AF_XDP datapath: poll: %w", err))
			time.Sleep(pollTimeout)
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			for {
				if n, _ := unix.Read(w.wakeR, drain); n <= 0 {
					break
				}
			}
		}
	}
}

// transmit sends frames out of s (nil: the interface has no socket any more).
func (w *worker) transmit(s *socket, frames [][]byte) {
	if s == nil {
		w.d.Engine.countTxFull(len(frames))
		return
	}
	dropped, err := s.send(frames)
	if dropped > 0 {
		w.d.Engine.countTxFull(dropped)
	}
	if err != nil {
		w.logOnce(err)
	}
}

func (w *worker) logOnce(err error) {
	if msg := err.Error(); msg != w.lastErr {
		w.lastErr = msg
		w.d.log.Warn("AF_XDP datapath", "queue", w.q, "error", err)
	}
}
