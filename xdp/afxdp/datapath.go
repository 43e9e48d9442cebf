// SPDX-License-Identifier: Apache-2.0
package afxdp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/kernelinfo"
)

// Worker timing.
const (
	// pollTimeout bounds how long a worker sleeps in poll(2) with nothing received.
	pollTimeout = 50 * time.Millisecond
	// sweepEvery and sweepBudget pace the removal of idle flows (Engine.Sweep).
	sweepEvery = 100 * time.Millisecond
	// heldPoll is the poll timeout while frames wait for a neighbour (Engine.Release).
	heldPoll    = 2 * time.Millisecond
	sweepBudget = 16384
)

// Config configures Load. The zero value is a working default.
type Config struct {
	// Engine configures the flow state and hashing, and (NextHopCacheTTL) how long a
	// destination's next hop is trusted (Resolver).
	Engine datapath.Settings
	// Frames is the number of UMEM frames of each socket, a power of two of at least 64; 0
	// means DefaultFrames.
	Frames int
	// PinWorker pins the thread of the worker of receive queue q to CPU WorkerCPU + q (modulo
	// the CPUs): say, the CPUs that serve the interfaces' receive queues.
	PinWorker bool
	WorkerCPU int
	// Logger receives warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Datapath is xlb's AF_XDP datapath: steer.c on each attached interface, one AF_XDP socket per
// receive queue, and a worker goroutine per receive queue index that runs the frames of its
// sockets through the Engine and sends them on. The Engine's methods (promoted) configure it exactly as xdp.Datapath's do,
// so lb/reconcile drives either. Nothing is pinned: the program and sockets live as long as the
// process (a killed process leaves nothing attached).
type Datapath struct {
	*Engine
	cfg Config
	log *slog.Logger
	// steerMap and steeredMap are steer.c's shared maps (one of each for every interface).
	steerMap, steeredMap *ebpf.Map
	start                time.Time

	// mu guards nl, ports, closed, workers and published. Workers never take it (they may hold
	// the engine's lock, which Attach and Detach take under mu).
	mu     sync.Mutex
	nl     *netlink.Handle
	ports  map[string]*attachment
	closed bool
	// res resolves next hops; set by the first Attach, read by the workers.
	res atomic.Pointer[Resolver]
	// workers: worker q serves receive queue q of every interface; started as attachments
	// bring more queues (under mu), never fewer than one.
	workers []*worker
	// published counts publish calls (under mu): the generation of the workers' views.
	published uint64
	// refreshDone closes when the route copy's refresher (started with the resolver) ends.
	refreshDone chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
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
	d = &Datapath{cfg: cfg, log: log, start: time.Now(), ports: map[string]*attachment{}}
	// The failure paths return a nil d: close the maps of this one.
	made := d
	defer func() {
		if err != nil {
			err = errors.Join(err, made.closeMaps())
		}
	}()
	if d.steerMap, err = ebpf.NewMap(spec.Maps["steer"]); err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: create map steer: %w", err)
	}
	if d.steeredMap, err = ebpf.NewMap(spec.Maps["steered"]); err != nil {
		return nil, fmt.Errorf("AF_XDP datapath: create map steered: %w", err)
	}
	d.Engine, err = NewEngine(cfg.Engine, datapathHops{d})
	if err != nil {
		return nil, err
	}
	d.Engine.steer = d
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if err := d.startWorkers(1); err != nil {
		d.cancel()
		return nil, fmt.Errorf("AF_XDP datapath: %w", err)
	}
	return d, nil
}

// datapathHops is the datapath's NextHops: its current Resolver's answers.
type datapathHops struct{ d *Datapath }

// Lookup implements NextHops.
func (h datapathHops) Lookup(dst netip.Addr) (Hop, HopKind) { return h.d.lookup(dst) }

// Source implements NextHops.
func (h datapathHops) Source(dst netip.Addr) (netip.Addr, bool) {
	r := h.d.res.Load()
	if r == nil {
		return netip.Addr{}, false
	}
	return r.Source(dst)
}

func (d *Datapath) closeMaps() error {
	var errs []error
	for _, m := range []*ebpf.Map{d.steerMap, d.steeredMap} {
		if m != nil {
			errs = append(errs, m.Close())
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

// Attach attaches the steer program to ifname in mode (datapath.AttachAuto: native, else generic
// with a warning) and opens a socket on each of its receive queues. It must be called in the
// interface's network namespace; every interface of a datapath must be in the same one.
func (d *Datapath) Attach(ifname string, mode datapath.AttachMode, role datapath.Role) (err error) {
	switch mode {
	case "", datapath.AttachAuto, datapath.AttachNative, datapath.AttachGeneric:
	default:
		return fmt.Errorf("attach AF_XDP datapath to %s: unknown attach mode %q (auto, native or generic)", ifname, mode)
	}
	if role == datapath.RoleNone || role > datapath.RoleBoth {
		return fmt.Errorf("attach AF_XDP datapath to %s: role %d: want client, cluster or both", ifname, role)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("attach AF_XDP datapath to %s: the datapath is closed", ifname)
	}
	if a, ok := d.ports[ifname]; ok {
		d.Engine.setPort(a.ifindex, role)
		return nil
	}
	if d.nl == nil {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("attach AF_XDP datapath to %s: netlink: %w", ifname, err)
		}
		// The route copy's refresher has a handle of its own, in this namespace too.
		hr, err := netlink.NewHandle()
		if err != nil {
			h.Close()
			return fmt.Errorf("attach AF_XDP datapath to %s: netlink: %w", ifname, err)
		}
		d.nl = h
		res := NewResolver(h, d.cfg.Engine.WithDefaults().NextHopCacheTTL)
		d.res.Store(res)
		d.refreshDone = make(chan struct{})
		go func() {
			defer close(d.refreshDone)
			defer hr.Close()
			res.RefreshRoutes(d.ctx, hr)
		}()
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
		return fmt.Errorf("load the steer program: %w", kernelinfo.VerifierHint(err))
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
	if mode != datapath.AttachGeneric {
		a.link, err = link.AttachXDP(link.XDPOptions{Program: a.objs.XlbSteer, Interface: a.ifindex, Flags: link.XDPDriverMode})
		if err != nil && mode == datapath.AttachNative {
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
	if err := d.publish(); err != nil {
		delete(d.ports, ifname)
		return err
	}
	d.Engine.setPort(a.ifindex, role)
	return nil
}

// Interfaces returns the names of the interfaces the datapath is attached to, sorted.
func (d *Datapath) Interfaces() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.ports)), nil
}

// Reasons returns every counter by name (datapath.Gateway): the engine's verdicts, what
// happened before a frame reached it (the steer programs' counts, steered_*; the sockets'
// kernel counters, xsk_*: frames the kernel dropped because a worker fell behind), and under
// the XDP datapath's names the echo replies and the frames that were not ours.
func (d *Datapath) Reasons() (map[string]uint64, error) {
	out := map[string]uint64{}
	for r, n := range d.ReasonCounts() {
		out[r.String()] = n
	}
	st, err := d.SocketStats()
	if err != nil {
		return out, err
	}
	for k, n := range st {
		if k != "xsk_tx_ring_empty" { // times the kernel found nothing to send: no packets
			out[k] = n
		}
	}
	s, err := d.Steered()
	if err != nil {
		return out, err
	}
	out["steered_to_socket"], out["steered_passed"], out["steered_no_socket"] = s.ToSocket, s.Passed, s.NoSocket
	out["steered_icmp"] = s.ICMP
	out["pass_not_vip"] = s.NotOurs // the XDP datapath's name
	out["drop_vip_unserved"] += s.Unserved
	out["drop_frag_unknown"] += s.Fragments // the XDP datapath's name for a fragment it cannot place
	return out, nil
}

// Persistent reports false: nothing of the AF_XDP datapath outlives the process.
func (d *Datapath) Persistent() bool { return false }

// Remove is Close: nothing of the AF_XDP datapath outlives it.
func (d *Datapath) Remove() error { return d.Close() }

// The AF_XDP datapath is a gateway datapath.
var _ datapath.Gateway = (*Datapath)(nil)

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
	d.Engine.setPort(a.ifindex, datapath.RoleNone)
	err := d.publish() // starts no worker: as many queues or fewer
	d.waitIdle()
	return errors.Join(err, a.close())
}

// publish gives every worker its sockets (starting workers for new queues) and wakes them.
// Called with mu held.
func (d *Datapath) publish() error {
	queues := 1
	for _, a := range d.ports {
		queues = max(queues, len(a.sockets))
	}
	if err := d.startWorkers(queues); err != nil {
		return err
	}
	d.published++
	for _, w := range d.workers {
		v := &workerView{gen: d.published, tx: map[int]*socket{}}
		for _, a := range d.ports {
			if w.q < len(a.sockets) {
				v.rx = append(v.rx, a.sockets[w.q])
				v.tx[a.ifindex] = a.sockets[w.q]
			} else {
				v.tx[a.ifindex] = a.sockets[0] // shared: its TX side is locked
			}
		}
		w.view.Store(v)
		w.wake()
	}
	return nil
}

// startWorkers starts workers until there are n. Called with mu held (or from Load).
func (d *Datapath) startWorkers(n int) error {
	for q := len(d.workers); q < n; q++ {
		w, err := newWorker(d, q)
		if err != nil {
			return err
		}
		w.view.Store(&workerView{gen: d.published})
		d.workers = append(d.workers, w)
		go w.run(d.ctx)
	}
	return nil
}

// waitIdle returns once every worker has started a loop with the latest view, so that sockets
// no longer published are no longer in use. Called with mu held.
func (d *Datapath) waitIdle() {
	for _, w := range d.workers {
		for w.seen.Load() < d.published {
			select {
			case <-w.done:
			case <-time.After(time.Millisecond):
				continue
			}
			break
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
	workers := d.workers
	d.mu.Unlock()
	d.cancel()
	for _, w := range workers {
		w.wake()
		<-w.done
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refreshDone != nil {
		<-d.refreshDone
	}
	var errs []error
	for name, a := range d.ports {
		errs = append(errs, a.close())
		delete(d.ports, name)
	}
	if d.nl != nil {
		d.nl.Close()
		d.nl = nil
	}
	for _, w := range workers {
		errs = append(errs, w.close())
	}
	errs = append(errs, d.closeMaps()) // the maps stay set: using a closed one is an error
	return errors.Join(errs...)
}

// Steered is what the steer programs did with the datapath's frames, summed over CPUs.
type Steered struct {
	// ToSocket were handed to the socket of their receive queue.
	ToSocket uint64
	// Passed went to the kernel: a backend's IPv4 fragments and expiring TTLs.
	Passed uint64
	// NoSocket went to the kernel because their receive queue has no socket (a queue added
	// after Attach, say): a sign that the datapath misses traffic.
	NoSocket uint64
	// ICMP are echo requests to a VIP address and ICMP errors to a VIP address or about a
	// backend endpoint's flow, handed to the engine (counted in ToSocket or NoSocket too).
	ICMP uint64
	// NotOurs are IP packets for no VIP and from no backend, left to the kernel.
	NotOurs uint64
	// Unserved are packets to a VIP address of a protocol no service has (not TCP or UDP, nor
	// an echo request): dropped.
	Unserved uint64
	// Fragments are IPv4 fragments to a VIP address: dropped (the AF_XDP datapath keeps no
	// fragment state; the XDP datapath balances them).
	Fragments uint64
}

// Steered returns the steer programs' counters.
func (d *Datapath) Steered() (Steered, error) { return readSteered(d.steeredMap) }

// readSteered sums a steered map over CPUs.
func readSteered(m *ebpf.Map) (Steered, error) {
	var out Steered
	for i, n := range []*uint64{&out.ToSocket, &out.Passed, &out.NoSocket, &out.ICMP, &out.NotOurs, &out.Unserved, &out.Fragments} {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
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

// queueFrames returns the frames received per receive queue index, over every interface.
func (d *Datapath) queueFrames() map[int]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int]uint64{}
	for _, a := range d.ports {
		for _, s := range a.sockets {
			out[s.queue] += s.received.Load()
		}
	}
	return out
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
