package afxdp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlb-dev/xlb/xdp"
)

// Worker timing.
const (
	// pollTimeout bounds how long the worker sleeps in poll(2) with nothing received, so that it
	// notices attachments and Close.
	pollTimeout = 50 * time.Millisecond
	// sweepEvery and sweepBudget pace the removal of idle flows (Engine.Sweep).
	sweepEvery = 100 * time.Millisecond
	// heldPoll is the poll timeout while frames wait for a neighbour (Engine.Release).
	heldPoll    = 2 * time.Millisecond
	sweepBudget = 16384
)

// Config configures Load. The zero value is a working default.
type Config struct {
	// Engine configures the flow state and hashing.
	Engine Options
	// NextHopCacheTTL is how long a destination's next hop is trusted (Resolver); 0 means
	// 500 ms, as the XDP datapath's default, and a negative value no cache.
	NextHopCacheTTL time.Duration
	// Frames is the number of UMEM frames of each socket, a power of two of at least 64; 0
	// means DefaultFrames.
	Frames int
	// PinWorker pins the worker goroutine's thread to CPU WorkerCPU (say, the CPU that serves
	// the interfaces' receive queues).
	PinWorker bool
	WorkerCPU int
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Datapath is xlb's AF_XDP datapath: steer.c on each attached interface, one AF_XDP socket per
// receive queue, and one worker goroutine that runs every received frame through the Engine
// and sends it on. The Engine's methods (promoted) configure it exactly as xdp.Datapath's do,
// so lb/reconcile drives either. Nothing is pinned: the program and sockets live as long as the
// process (a killed process leaves nothing attached).
type Datapath struct {
	*Engine
	cfg Config
	log *slog.Logger
	// steerMap and steeredMap are steer.c's shared maps (one of each for every interface).
	steerMap, steeredMap *ebpf.Map
	start                time.Time

	// mu guards nl, ports and closed. The worker never takes it (it may hold the engine's
	// lock, which Attach and Detach take under mu).
	mu     sync.Mutex
	nl     *netlink.Handle
	ports  map[string]*attachment
	closed bool
	// res resolves next hops; set by the first Attach, read by the worker.
	res atomic.Pointer[Resolver]
	// sockets is what the worker serves; replaced (not modified) under mu.
	sockets atomic.Pointer[[]*socket]
	// published counts publish calls; seen is the count the worker's current loop started
	// with (it uses no socket published before).
	published, seen atomic.Uint64
	// wake interrupts the worker's poll when the sockets change.
	wakeR, wakeW int

	cancel context.CancelFunc
	done   chan struct{}
	// lastErr is the worker's last error, logged once per distinct message (worker only).
	lastErr string
}

// attachment is one interface's program, link and sockets.
type attachment struct {
	ifindex int
	objs    steerObjects
	link    link.Link
	sockets []*socket
}

// Load creates the datapath's shared maps and starts its worker. Attach interfaces to it.
func Load(cfg Config) (d *Datapath, err error) {
	if cfg.Frames == 0 {
		cfg.Frames = DefaultFrames
	}
	if cfg.Frames < 64 || cfg.Frames&(cfg.Frames-1) != 0 {
		return nil, fmt.Errorf("AF_XDP datapath: %d UMEM frames: want a power of two of at least 64", cfg.Frames)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	spec, err := loadSteer()
	if err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: load the steer program's spec: %w", err)
	}
	d = &Datapath{cfg: cfg, log: log, start: time.Now(), ports: map[string]*attachment{}, wakeR: -1, wakeW: -1}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.closeMaps())
		}
	}()
	if d.steerMap, err = ebpf.NewMap(spec.Maps["steer"]); err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: create map steer: %w", err)
	}
	if d.steeredMap, err = ebpf.NewMap(spec.Maps["steered"]); err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: create map steered: %w", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: wake pipe: %w", err)
	}
	d.wakeR, d.wakeW = p[0], p[1]
	d.Engine, err = NewEngine(cfg.Engine, hopsFunc(d.lookup))
	if err != nil {
		return nil, err
	}
	d.Engine.steer = d
	d.sockets.Store(&[]*socket{})
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan struct{})
	go d.work(ctx)
	return d, nil
}

// hopsFunc adapts a function to NextHops.
type hopsFunc func(netip.Addr) (Hop, HopKind)

// Lookup implements NextHops.
func (f hopsFunc) Lookup(dst netip.Addr) (Hop, HopKind) { return f(dst) }

func (d *Datapath) closeMaps() error {
	var errs []error
	for _, m := range []*ebpf.Map{d.steerMap, d.steeredMap} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	for _, fd := range []int{d.wakeR, d.wakeW} {
		if fd >= 0 {
			errs = append(errs, unix.Close(fd))
		}
	}
	return errors.Join(errs...)
}

// set implements steerer.
func (d *Datapath) set(k steerSteerKey, on bool) error {
	if on {
		return d.steerMap.Put(&k, uint8(1))
	}
	if err := d.steerMap.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// lookup resolves next hops once an interface is attached (the resolver asks the namespace of
// the first attachment).
func (d *Datapath) lookup(dst netip.Addr) (Hop, HopKind) {
	r := d.res.Load()
	if r == nil {
		return Hop{}, HopUnreachable
	}
	return r.Lookup(dst)
}

// Attach attaches the steer program to ifname in mode (xdp.AttachAuto: native, else generic
// with a warning) and opens a socket on each of its receive queues. It must be called in the
// interface's network namespace; every interface of a datapath must be in the same one.
func (d *Datapath) Attach(ifname string, mode xdp.AttachMode) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("attach AF_XDP datapath to %s: the datapath is closed", ifname)
	}
	if _, ok := d.ports[ifname]; ok {
		return nil
	}
	if d.nl == nil {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("attach AF_XDP datapath to %s: netlink: %w", ifname, err)
		}
		d.nl = h
		d.res.Store(NewResolver(h, d.cfg.NextHopCacheTTL))
	}
	l, err := d.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("attach AF_XDP datapath to %s: %w", ifname, err)
	}
	a := &attachment{ifindex: l.Attrs().Index}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("attach AF_XDP datapath to %s: %w", ifname, err), a.close())
		}
	}()
	spec, err := loadSteer()
	if err != nil {
		return err
	}
	if err := spec.LoadAndAssign(&a.objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"steer": d.steerMap, "steered": d.steeredMap}}); err != nil {
		return fmt.Errorf("load the steer program: %w", err)
	}
	queues, err := rxQueues(ifname)
	if err != nil {
		return err
	}
	if queues > maxQueues {
		return fmt.Errorf("%d receive queues: at most %d are served", queues, maxQueues)
	}
	for q := range queues {
		s, err := openSocket(a.ifindex, q, d.cfg.Frames)
		if err != nil {
			return err
		}
		a.sockets = append(a.sockets, s)
		if err := a.objs.Xsks.Put(uint32(q), uint32(s.xs.FD())); err != nil {
			return fmt.Errorf("register the socket of queue %d: %w", q, err)
		}
	}
	if mode != xdp.AttachGeneric {
		a.link, err = link.AttachXDP(link.XDPOptions{Program: a.objs.XlbSteer, Interface: a.ifindex, Flags: link.XDPDriverMode})
		if err != nil && mode == xdp.AttachNative {
			return fmt.Errorf("attach the steer program in native mode: %w", err)
		}
		if err != nil {
			d.log.Warn("native XDP refused; the AF_XDP datapath's steer program falls back to generic mode",
				"interface", ifname, "error", err)
		}
	}
	if a.link == nil {
		a.link, err = link.AttachXDP(link.XDPOptions{Program: a.objs.XlbSteer, Interface: a.ifindex, Flags: link.XDPGenericMode})
		if err != nil {
			return fmt.Errorf("attach the steer program in generic mode: %w", err)
		}
	}
	d.ports[ifname] = a
	d.Engine.setPort(a.ifindex, true)
	d.publish()
	return nil
}

// Interfaces returns the names of the interfaces the datapath is attached to, sorted.
func (d *Datapath) Interfaces() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.ports))
}

// maxQueues is steer.c's MAX_QUEUES.
const maxQueues = 256

// Detach removes the datapath from ifname.
func (d *Datapath) Detach(ifname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.ports[ifname]
	if !ok {
		return nil
	}
	delete(d.ports, ifname)
	d.Engine.setPort(a.ifindex, false)
	d.publish()
	d.waitIdle()
	return a.close()
}

// publish gives the worker the current sockets and wakes it. Called with mu held.
func (d *Datapath) publish() {
	var all []*socket
	for _, a := range d.ports {
		all = append(all, a.sockets...)
	}
	d.sockets.Store(&all)
	d.published.Add(1)
	_, _ = unix.Write(d.wakeW, []byte{1})
}

// waitIdle returns once the worker has started a loop with the latest sockets, so that detached
// sockets are no longer in use.
func (d *Datapath) waitIdle() {
	want := d.published.Load()
	for d.seen.Load() < want {
		select {
		case <-d.done:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

func (a *attachment) close() error {
	var errs []error
	if a.link != nil {
		errs = append(errs, a.link.Close())
	}
	for _, s := range a.sockets {
		errs = append(errs, s.close())
	}
	errs = append(errs, a.objs.Close())
	return errors.Join(errs...)
}

// Close stops the worker and detaches everything: programs, links, sockets (their UMEM and
// rings) and maps. Calling it again does nothing.
func (d *Datapath) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	_, _ = unix.Write(d.wakeW, []byte{1})
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for name, a := range d.ports {
		errs = append(errs, a.close())
		delete(d.ports, name)
	}
	if d.nl != nil {
		d.nl.Close()
		d.nl = nil
	}
	errs = append(errs, d.closeMaps())
	d.wakeR, d.wakeW = -1, -1 // closed (the maps stay set: using a closed one is an error)
	return errors.Join(errs...)
}

// Steered is what the steer programs did with the datapath's frames, summed over CPUs.
type Steered struct {
	// ToSocket were handed to the socket of their receive queue.
	ToSocket uint64
	// Passed went to the kernel: IPv4 fragments and expiring TTLs.
	Passed uint64
	// NoSocket went to the kernel because their receive queue has no socket (a queue added
	// after Attach, say): a sign that the datapath misses traffic.
	NoSocket uint64
	// EchoReplies are echo requests to a VIP address, answered by the steer program.
	EchoReplies uint64
	// NotOurs are IP packets for no VIP and from no backend, left to the kernel.
	NotOurs uint64
}

// Steered returns the steer programs' counters.
func (d *Datapath) Steered() (Steered, error) {
	var out Steered
	for i, n := range []*uint64{&out.ToSocket, &out.Passed, &out.NoSocket, &out.EchoReplies, &out.NotOurs} {
		var per []uint64
		if err := d.steeredMap.Lookup(uint32(i), &per); err != nil {
			return Steered{}, fmt.Errorf("read steered[%d]: %w", i, err)
		}
		for _, v := range per {
			*n += v
		}
	}
	return out, nil
}

// now is the engine's clock.
func (d *Datapath) now() time.Duration { return time.Since(d.start) }

// work is the worker: it takes frames from every socket, runs them through the engine and sends
// them out of their egress socket, until ctx ends.
func (d *Datapath) work(ctx context.Context) {
	defer close(d.done)
	if d.cfg.PinWorker {
		// The thread stays locked (and pinned) until the worker returns, and then ends with it.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(d.cfg.WorkerCPU)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			d.log.Warn("AF_XDP datapath: worker not pinned", "cpu", d.cfg.WorkerCPU, "error", err)
		}
	}
	out := map[int][][]byte{}
	var fds []unix.PollFd
	lastSweep := time.Duration(0)
	drain := make([]byte, 64)
	for ctx.Err() == nil {
		d.seen.Store(d.published.Load())
		socks := *d.sockets.Load()
		byIf := map[int]*socket{}
		for _, s := range socks {
			if byIf[s.ifindex] == nil {
				byIf[s.ifindex] = s
			}
		}
		busy, held := false, false
		for _, s := range socks {
			descs := s.receive()
			if len(descs) == 0 {
				continue
			}
			busy = true
			now := d.now()
			for _, desc := range descs {
				f := s.frame(desc)
				if v := d.Engine.Process(f, s.ifindex, now); v.Send {
					out[v.Ifindex] = append(out[v.Ifindex], f)
				}
			}
			// Frames are copied into the egress socket's UMEM before the received ones are
			// given back to the fill ring.
			for ifindex, frames := range out {
				d.transmit(byIf[ifindex], frames)
				out[ifindex] = frames[:0]
			}
			s.refill(descs)
		}
		if d.Engine.Held() > 0 {
			frames, ifindexes := d.Engine.Release(d.now())
			for i, f := range frames {
				d.transmit(byIf[ifindexes[i]], [][]byte{f})
			}
			// Poll no longer than it takes to notice a resolution.
			busy = busy || len(frames) > 0
			held = d.Engine.Held() > 0
		}
		if now := d.now(); now-lastSweep >= sweepEvery {
			d.Engine.Sweep(now, sweepBudget)
			lastSweep = now
		}
		if busy {
			continue
		}
		fds = fds[:0]
		fds = append(fds, unix.PollFd{Fd: int32(d.wakeR), Events: unix.POLLIN})
		for _, s := range socks {
			if err := s.kick(); err != nil { // what a busy kernel left on the ring
				d.logOnce(err)
			}
			fds = append(fds, unix.PollFd{Fd: int32(s.xs.FD()), Events: unix.POLLIN})
		}
		timeout := pollTimeout
		if held {
			timeout = heldPoll
		}
		if _, err := unix.Poll(fds, int(timeout/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
			d.logOnce(fmt.Errorf("AF_XDP datapath: poll: %w", err))
			time.Sleep(pollTimeout)
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			for {
				if n, _ := unix.Read(d.wakeR, drain); n <= 0 {
					break
				}
			}
		}
	}
}

// transmit sends frames out of s (nil: the interface has no socket any more).
func (d *Datapath) transmit(s *socket, frames [][]byte) {
	if s == nil {
		d.Engine.countTxFull(len(frames))
		return
	}
	dropped, err := s.send(frames)
	if dropped > 0 {
		d.Engine.countTxFull(dropped)
	}
	if err != nil {
		d.logOnce(err)
	}
}

func (d *Datapath) logOnce(err error) {
	if msg := err.Error(); msg != d.lastErr {
		d.lastErr = msg
		d.log.Warn("AF_XDP datapath", "error", err)
	}
}

// SocketStats returns the kernel's counters of every socket, summed by name:
// "xsk_rx_dropped" (no room in the UMEM), "xsk_rx_ring_full", "xsk_rx_fill_ring_empty",
// "xsk_rx_invalid_descs", "xsk_tx_invalid_descs" and "xsk_tx_ring_empty".
func (d *Datapath) SocketStats() (map[string]uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]uint64{}
	for _, a := range d.ports {
		for _, s := range a.sockets {
			st, err := s.kernelStats()
			if err != nil {
				return nil, err
			}
			out["xsk_rx_dropped"] += st.Rx_dropped
			out["xsk_rx_ring_full"] += st.Rx_ring_full
			out["xsk_rx_fill_ring_empty"] += st.Rx_fill_ring_empty_descs
			out["xsk_rx_invalid_descs"] += st.Rx_invalid_descs
			out["xsk_tx_invalid_descs"] += st.Tx_invalid_descs
			out["xsk_tx_ring_empty"] += st.Tx_ring_empty_descs
		}
	}
	return out, nil
}
