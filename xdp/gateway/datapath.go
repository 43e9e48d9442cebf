// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/kernelinfo"
	"golang.org/x/sys/unix"
)

// DefaultPinPath is where maps and links are pinned unless Options.PinPath says otherwise.
const DefaultPinPath = "/sys/fs/bpf/xlb"

// DefaultMaglevSlots is Options.MaglevSlots unless set: 64 MiB of slots, room for 1,024
// frontends of the default table size.
const DefaultMaglevSlots = 1 << 24

// Options configure Load. The zero value is a working default.
type Options struct {
	// Settings shape the flow state (seed, conntrack and handshake sizes, timeouts, the
	// flood budgets, the next-hop cache), as for every gateway datapath. The budgets are over
	// all CPUs (bpf/budget.h). A new ConntrackSize needs the pinned maps removed (conntrack and
	// ct_reverse, which is sized from it); a new HandshakeSize
	// takes effect on the next Load, also with pinned maps (the pinned table is replaced, its
	// connections moved into conntrack, the handshakes in flight lost). Conntrack (an LRU) and
	// the handshake table (direct-mapped, HandshakeSize rounded up to a power of two) are tables
	// of their own, so a SYN flood churns the handshakes and never conntrack; the ACK that
	// completes a handshake leaves the connection in its slot, and a SYN of another tuple taking
	// the slot moves it into conntrack first.
	datapath.Settings
	// PinPath is the bpffs directory for maps and links. Empty means DefaultPinPath. A process
	// that loads with the PinPath of a running one adopts its maps and links.
	PinPath string
	// NoPin pins nothing: maps and links live as long as the Datapath. For tests and tools.
	NoPin bool
	// MaglevSlots is the capacity of the flat array that holds every VIP's Maglev table (a VIP
	// with table size M uses M slots); 0 means DefaultMaglevSlots (64 MiB). Changing it needs
	// the pinned maps removed.
	MaglevSlots uint32
	// Logger receives warnings (e.g. generic-mode fallback). nil means slog.Default().
	Logger *slog.Logger
}

// Datapath is the loaded XDP program and its maps. Its methods are safe for concurrent use.
type Datapath struct {
	mu   sync.Mutex
	opts Options
	objs xlbObjects
	log  *slog.Logger

	// links: interface name -> attached link (pinned under PinPath/links unless NoPin).
	links map[string]linkHandle
	// filter: reference counts behind the address filter bitmaps, rebuilt from the maps on load.
	filter addrFilter
	// slots: the free regions of maglev_slots, rebuilt from the VIP descriptors on load.
	slots *slotAllocator
	// endpoints: backends by endpoint and ambiguous endpoints, rebuilt from the maps on load.
	endpoints endpointIndex
	// stopClock stops the goroutine that writes map clock; clockDone closes when it has.
	stopClock context.CancelFunc
	clockDone chan struct{}
	// clockMu orders writes of map clock, so the cache generation never goes backwards.
	clockMu sync.Mutex
	// gen is the cache generation written to map clock (see bpf/consts.h); never 0.
	gen uint32
	// lockf is PinPath, flock'ed while this Datapath manages it (nil with NoPin).
	lockf *os.File
	// live: the loader's side of the live-flow filter (live.go); liveDone closes when the
	// goroutine that rebuilds it has stopped (with the clock's, by stopClock).
	live     liveFilter
	liveDone chan struct{}
}

func (o Options) withDefaults() Options {
	o.Settings = o.Settings.WithDefaults()
	if o.PinPath == "" {
		o.PinPath = DefaultPinPath
	}
	if o.NewFlowRate < 0 {
		o.NewFlowRate = 0 // no cap: the program reads 0 as none
	}
	if o.MaglevSlots == 0 {
		o.MaglevSlots = DefaultMaglevSlots
	}
	if o.NextHopCacheTTL < 0 {
		o.NextHopCacheTTL = 0 // no cache
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Load loads the datapath program and creates its maps, or adopts the maps pinned under
// opts.PinPath by an earlier process (their contents, and so forwarding, carry on). Links
// pinned there are adopted by Attach.
func Load(opts Options) (_ *Datapath, err error) {
	if err := opts.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	opts = opts.withDefaults()
	spec, err := loadXlb()
	if err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	if err := checkLimits(spec); err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	spec.Maps[xlbMapConntrack].MaxEntries = opts.ConntrackSize
	spec.Maps[xlbMapCtReverse].MaxEntries = opts.ReverseConntrackSize()
	spec.Maps[xlbMapHsSlots].MaxEntries = hsSlots(opts.HandshakeSize)
	spec.Maps[xlbMapMaglevSlots].MaxEntries = opts.MaglevSlots
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	// flow_cache holds FLOW_CACHE_SLOTS entries per CPU (see bpf/maps.h).
	spec.Maps[xlbMapFlowCache].MaxEntries = uint32(cpus) * spec.Maps[xlbMapFlowCache].MaxEntries
	for name, v := range loadVariables(opts) {
		vs := spec.Variables[name]
		if vs == nil {
			return nil, fmt.Errorf("load datapath: the BPF object declares no variable %s", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("load datapath: set %s: %w", name, err)
		}
	}

	var collOpts ebpf.CollectionOptions
	var oldReverse []reverseEntry
	var rescued []ctRecord // the connections of a handshake table replaced
	var lockf *os.File
	if opts.NoPin {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	} else {
		if err := ensureBPFFS(opts.PinPath); err != nil {
			return nil, fmt.Errorf("load datapath: %w", err)
		}
		if lockf, err = lockPinPath(opts.PinPath); err != nil {
			return nil, fmt.Errorf("load datapath: %w", err)
		}
		defer func() {
			if err != nil {
				lockf.Close()
			}
		}()
		collOpts.Maps.PinPath = opts.PinPath
		if rescued, err = replaceDisposablePins(spec, opts.PinPath, opts.Settings, opts.Logger); err != nil {
			return nil, fmt.Errorf("load datapath: %w", err)
		}
		if err := removeRetiredPins(opts.PinPath, opts.Logger); err != nil {
			return nil, fmt.Errorf("load datapath: %w", err)
		}
		if oldReverse, err = unpinOldReverse(spec, opts.PinPath, opts.Logger); err != nil {
			return nil, fmt.Errorf("load datapath: %w", err)
		}
	}

	d := &Datapath{opts: opts, log: opts.Logger, links: map[string]linkHandle{}, lockf: lockf}
	// Programs and maps only: nothing reads the variables back (and a base build in an A/B
	// benchmark lacks some).
	objs := struct {
		xlbPrograms
		xlbMaps
	}{}
	err = spec.LoadAndAssign(&objs, &collOpts)
	d.objs.xlbPrograms, d.objs.xlbMaps = objs.xlbPrograms, objs.xlbMaps
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load datapath: %sverifier rejected the program: %+v", kernelinfo.Note(), verr)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("load datapath: maps pinned under %s were made by another build "+
				"or with another conntrack size or Maglev capacity; remove them to start afresh (this drops all flows): %w",
				opts.PinPath, err)
		}
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	for _, e := range oldReverse {
		if err := d.objs.Reverse.Put(e.key, e.value); err != nil {
			d.objs.Close()
			return nil, fmt.Errorf("load datapath: carry a reverse NAT entry over from the pinned map: %w", err)
		}
	}
	// Before start's filter rebuild, which gives them their live-flow bits.
	for _, r := range rescued {
		if err := d.objs.Conntrack.Update(&r.key, &r.val, ebpf.UpdateAny); err != nil {
			d.objs.Close()
			return nil, fmt.Errorf("load datapath: move a connection of the replaced handshake table into conntrack: %w", err)
		}
	}
	if len(rescued) > 0 {
		d.log.Info("moved the connections of the replaced handshake table into conntrack", "connections", len(rescued))
	}
	if err := d.openLive(); err != nil {
		d.objs.Close()
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	if err := d.start(); err != nil {
		d.closeLive()
		d.objs.Close()
		return nil, fmt.Errorf("load datapath: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stopClock, d.clockDone, d.liveDone = cancel, make(chan struct{}), make(chan struct{})
	go d.runClock(ctx)
	go d.runLive(ctx, d.liveDone)
	return d, nil
}

// loadVariables returns the object's load-time variables for opts (defaults applied).
func loadVariables(opts Options) map[string]any {
	return map[string]any{
		xlbVarCfgHashSeed:         opts.Seed,
		xlbVarCfgTcpEstablishedNs: uint64(opts.TCPEstablishedTimeout),
		xlbVarCfgTcpClosingNs:     uint64(opts.TCPClosingTimeout),
		xlbVarCfgUdpNs:            uint64(opts.UDPTimeout),
		xlbVarCfgNewFlowRate:      uint64(opts.NewFlowRate),
		xlbVarCfgMidFlowRate:      midFlowVar(opts.Settings),
		xlbVarCfgNhCacheNs:        uint64(opts.NextHopCacheTTL),
		xlbVarCfgHsMask:           hsSlots(opts.HandshakeSize) - 1,
	}
}

// checkLimits checks that the object's maps hold the ids and tables the contract promises
// (datapath.MaxVIPs and the like, which datapath.h gives the C side).
func checkLimits(spec *ebpf.CollectionSpec) error {
	for name, want := range map[string]uint32{xlbMapVipById: datapath.MaxVIPs, xlbMapVipStats: datapath.MaxVIPs,
		xlbMapBackends: datapath.MaxBackends, xlbMapBackendStats: datapath.MaxBackends} {
		if got := spec.Maps[name].MaxEntries; got != want {
			return fmt.Errorf("the BPF object's map %s holds %d ids, the datapath contract %d: the object was built from another datapath.h", name, got, want)
		}
	}
	return nil
}

// start wires the loaded objects together and rebuilds the loader's derived state from the maps
// (empty ones, or those adopted from pins).
func (d *Datapath) start() error {
	// The tail-call table (progs) came filled with the object's stages (bpf/maps.h).
	if err := d.checkProgs(); err != nil {
		return err
	}
	if err := d.filter.rebuild(&d.objs); err != nil {
		return fmt.Errorf("rebuild address filter from maps: %w", err)
	}
	if err := d.rebuildSlots(); err != nil {
		return err
	}
	if err := d.endpoints.rebuild(&d.objs); err != nil {
		return fmt.Errorf("rebuild backend index: %w", err)
	}
	// Conntrack adopted from pins may hold entries an earlier build made without the filter.
	return d.rebuildLive()
}

// ensureBPFFS checks that dir is (or will be) on a bpffs, mounting one on /sys/fs/bpf when that is
// where dir lives and nothing is mounted there (as after `ip netns exec`).
func ensureBPFFS(dir string) error {
	probe := dir
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(probe, &st); err == nil {
			if st.Type == unix.BPF_FS_MAGIC {
				return os.MkdirAll(dir, 0o700)
			}
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	const root = "/sys/fs/bpf"
	if rel, err := filepath.Rel(root, dir); err == nil && filepath.IsLocal(rel) || dir == root {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", root, err)
		}
		if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs on %s for pin path %s: %w", root, dir, err)
		}
		return os.MkdirAll(dir, 0o700)
	}
	return fmt.Errorf("pin path %s is not on a bpffs (mount -t bpf bpf <dir>)", dir)
}

// rebuildSlots derives which regions of maglev_slots are in use from the VIP descriptors.
func (d *Datapath) rebuildSlots() error {
	d.slots = newSlotAllocator(d.opts.MaglevSlots)
	var k xlbSvcKey
	var vi xlbVipInfo
	it := d.objs.Vips.Iterate()
	for it.Next(&k, &vi) {
		if vi.Flags&vipFlagMarker != 0 || vi.TableSize == 0 {
			continue
		}
		if !d.slots.reserve(vi.TableOff, vi.TableSize) {
			return fmt.Errorf("VIP %s: Maglev region [%d,+%d) overlaps another or exceeds %d slots",
				frontendOf(k), vi.TableOff, vi.TableSize, d.opts.MaglevSlots)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("rebuild Maglev slot map: iterate vips: %w", err)
	}
	return nil
}

// clockTick is how often the loader refreshes the datapath's clock (see bpf/consts.h).
const clockTick = 10 * time.Millisecond

func (d *Datapath) tick() error {
	d.clockMu.Lock()
	defer d.clockMu.Unlock()
	if d.gen == 0 {
		// Continue from the generation an earlier process left in the pinned clock: its
		// program, still attached until ours replaces it, must see our changes too.
		var prev xlbClockValue
		if err := d.objs.Clock.Lookup(uint32(0), &prev); err == nil {
			d.gen = prev.Gen
		}
		d.gen++
		if d.gen == 0 {
			d.gen = 1
		}
	}
	if err := d.objs.Clock.Put(uint32(0), &xlbClockValue{Ns: monotonicNow(), Gen: d.gen, LiveHalf: d.live.half}); err != nil {
		return fmt.Errorf("write clock: %w", err)
	}
	return nil
}

// invalidateCaches makes every CPU drop its cached vips, reverse and conntrack lookups and its
// flow records. Called after each change of those maps and of a backend in use.
func (d *Datapath) invalidateCaches() error {
	d.clockMu.Lock()
	d.gen++
	if d.gen == 0 {
		d.gen = 1
	}
	d.clockMu.Unlock()
	return d.tick()
}

// runClock keeps map clock fresh until ctx ends. If it stops (the process dies), the datapath
// notices within CLOCK_STALE_NS and reads the kernel clock itself.
func (d *Datapath) runClock(ctx context.Context) {
	defer close(d.clockDone)
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.tick(); err != nil {
				d.log.Warn("datapath clock", "error", err)
			}
		}
	}
}

// Program returns the XDP program, for tests and tools that run it with BPF_PROG_TEST_RUN.
func (d *Datapath) Program() *ebpf.Program { return d.objs.XlbXdp }

// Persistent reports whether forwarding outlives the process: it does, from the pins, unless
// Options.NoPin.
func (d *Datapath) Persistent() bool { return !d.opts.NoPin }

// The XDP datapath is a gateway datapath.
var _ datapath.Gateway = (*Datapath)(nil)

// Close releases this process's handles. Pinned maps and links stay, so forwarding goes on;
// with NoPin, closing detaches everything.
func (d *Datapath) Close() error {
	if d.stopClock != nil {
		d.stopClock()
		<-d.clockDone
		<-d.liveDone
		d.stopClock = nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for name, l := range d.links {
		if err := l.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close link on %s: %w", name, err))
		}
	}
	d.links = map[string]linkHandle{}
	if err := d.closeLive(); err != nil {
		errs = append(errs, err)
	}
	if err := d.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	if d.lockf != nil {
		d.lockf.Close() // another process may manage PinPath now
		d.lockf = nil
	}
	return errors.Join(errs...)
}

// lockPinPath takes the lock of the pin directory dir, so that two processes (a second daemon
// started by hand, a restart that overlaps the old process) never manage the same pins: links,
// tail-call tables, and state rebuilt from the maps. The kernel drops it when the process exits,
// however it exits.
func lockPinPath(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("pin directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another process (an xlb daemon running?)", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// Remove detaches the program from every interface it is pinned to, removes all pins and closes
// the Datapath: forwarding stops and all state is gone.
func (d *Datapath) Remove() error {
	var errs []error
	if !d.opts.NoPin {
		names, err := d.pinnedLinks()
		if err != nil {
			errs = append(errs, err)
		}
		for _, name := range names {
			if err := d.Detach(name); err != nil {
				errs = append(errs, err)
			}
		}
		for _, m := range d.maps() {
			if err := m.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("unpin map: %w", err))
			}
		}
		d.unpinIdleProgs() // a link that failed to detach keeps its table
		_ = os.Remove(filepath.Join(d.opts.PinPath, "links"))
		_ = os.Remove(d.opts.PinPath)
	}
	if err := d.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (d *Datapath) maps() []*ebpf.Map {
	m := &d.objs.xlbMaps
	return []*ebpf.Map{m.AddrBitmap, m.BackendStats, m.Backends, m.Clock, m.Conntrack, m.CtReverse,
		m.Frags, m.HsSlots, m.IfRoles, m.MaglevSlots, m.Reasons, m.Reverse, m.SiteSources, m.SrcRanges, m.TxPorts, m.VipById,
		m.VipStats, m.Vips}
}

// disposableMaps are the pinned maps whose contents may be lost without breaking a flow: the
// verdict counters (a metrics counter reset), the handshakes in flight (which fall back to
// Maglev) and the fragments table (its entries live 2 s: at worst the rest of a datagram in
// flight is dropped). A pinned one that does not match this build (a new reason, a new
// HandshakeSize, a new frags value) is replaced rather than refused.
var disposableMaps = []string{xlbMapReasons, xlbMapHsSlots, xlbMapFrags}

// retiredMaps are maps earlier builds pinned that this one no longer uses, each with what took
// its place. Their pins are removed at Load; a program of an earlier build still attached keeps
// its map until Attach replaces the program.
var retiredMaps = map[string]string{
	"addr_filter": xlbMapAddrBitmap, // the address filter with a murmur hash
	"handshakes":  xlbMapHsSlots,    // the handshake table as an LRU hash
	"ct_live":     xlbMapHsSlots,    // the live-flow filter as an array of its own
}

// absorbedBy are disposable maps whose layout changed when they took over a retired map's job,
// with that map: a pinned retired map marks the disposable one pinned beside it as of the old
// layout, although the kernel sees no difference (the same value size).
var absorbedBy = map[string]string{
	// hs_slots took over ct_live, the live-flow filter: its slots' SYN time went from 64 to
	// 32 bits, and their last 4 bytes became the filter's bits.
	xlbMapHsSlots: "ct_live",
}

// removeRetiredPins removes the pins of retiredMaps under dir.
func removeRetiredPins(dir string, log *slog.Logger) error {
	for _, name := range slices.Sorted(maps.Keys(retiredMaps)) {
		path := filepath.Join(dir, name)
		err := os.Remove(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("remove the pin of retired map %s: %w", path, err)
		}
		log.Info("removed the pinned map of an earlier build", "map", name, "replacedBy", retiredMaps[name])
	}
	return nil
}

// replaceDisposablePins unpins those of disposableMaps pinned under dir that the maps of spec are
// not compatible with, so that loading creates them afresh. A program still attached keeps using
// the old map until Attach replaces it. A handshake table replaced that has this build's slot
// layout (only its size differs) may hold connections (HS_ST_CONN): they are returned, as
// conntrack entries, for Load to keep (idle ones, by the timeouts of s, left out). Those the old
// program completes after this, until Attach replaces it, fall back to Maglev, as handshakes in
// flight do.
func replaceDisposablePins(spec *ebpf.CollectionSpec, dir string, s datapath.Settings, log *slog.Logger) ([]ctRecord, error) {
	var rescued []ctRecord
	for _, name := range disposableMaps {
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			continue // not pinned (or unreadable: loading reports it)
		}
		incompatible := spec.Maps[name].Compatible(m)
		sameLayout := m.ValueSize() == spec.Maps[name].ValueSize
		if old, ok := absorbedBy[name]; ok && incompatible == nil {
			if _, err := os.Stat(filepath.Join(dir, old)); err == nil {
				incompatible = fmt.Errorf("pinned beside %s, so made by a build with another slot layout", old)
				sameLayout = false
			}
		}
		if incompatible != nil && name == xlbMapHsSlots && sameLayout {
			if rescued, err = rescueSlotConns(m, s.WithDefaults()); err != nil {
				m.Close()
				return nil, fmt.Errorf("read the connections of pinned map %s: %w", path, err)
			}
		}
		m.Close()
		if incompatible == nil {
			continue
		}
		log.Info("replacing pinned map made by another build", "map", name, "reason", incompatible)
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("replace pinned map %s: %w", path, err)
		}
	}
	return rescued, nil
}

// reverseEntry is one entry of a pinned reverse map, as raw key and value bytes.
type reverseEntry struct{ key, value []byte }

// oldRevValueSize is the size of struct rev_value before it listed the ambiguous endpoints'
// candidate VIPs: {vip_id, vip_port, flags}.
const oldRevValueSize = 8

// unpinOldReverse reads the entries of a reverse map pinned under dir by a build whose rev_value
// had no candidates, and unpins it, so that loading creates this build's map; Load then writes
// the entries into it, their candidates empty (the reconciler fills them in), before the program
// is attached. Forwarding goes on meanwhile: the attached program keeps the old map. A map
// pinned with any other mismatch is left alone (loading reports it).
func unpinOldReverse(spec *ebpf.CollectionSpec, dir string, log *slog.Logger) ([]reverseEntry, error) {
	path := filepath.Join(dir, xlbMapReverse)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return nil, nil // not pinned (or unreadable: loading reports it)
	}
	defer m.Close()
	want := spec.Maps[xlbMapReverse]
	if want.Compatible(m) == nil || m.ValueSize() != oldRevValueSize || m.KeySize() != want.KeySize ||
		m.Type() != want.Type || m.MaxEntries() != want.MaxEntries {
		return nil, nil
	}
	var out []reverseEntry
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		val := make([]byte, want.ValueSize)
		copy(val, v)
		out = append(out, reverseEntry{key: slices.Clone(k), value: val})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read pinned reverse map of an earlier build: %w", err)
	}
	log.Info("replacing pinned map made by another build, keeping its entries", "map", xlbMapReverse,
		"entries", len(out))
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("replace pinned map %s: %w", path, err)
	}
	return out, nil
}

// midFlowVar is cfg_mid_flow_rate for settings s as withDefaults leaves them (NewFlowRate 0:
// no cap, and so none for mid-flow pickups either).
func midFlowVar(s datapath.Settings) uint64 {
	if s.NewFlowRate <= 0 {
		return 0
	}
	return uint64(s.MidFlowRate())
}

// LoadPinned loads the datapath adopting the maps pinned under dir with whatever conntrack size,
// handshake table size and Maglev capacity they were made with (for tools such as `xlb cleanup`).
func LoadPinned(dir string) (*Datapath, error) {
	opts := Options{PinPath: dir}
	for name, size := range map[string]*uint32{xlbMapConntrack: &opts.ConntrackSize,
		xlbMapHsSlots: &opts.HandshakeSize, xlbMapMaglevSlots: &opts.MaglevSlots} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			continue // not pinned: Load creates it with the default
		}
		*size = m.MaxEntries()
		m.Close()
	}
	return Load(opts)
}
